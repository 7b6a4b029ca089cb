#!/bin/sh
# Runs the operator under heaptrack, in place of the binary: for a heap profile of a benchmark,
#   ETCD_OPERATOR_BIN=hack/heaptrack-operator.sh hack/with-cluster.sh --control-plane-only \
#     env SCALE_CP_CLUSTERS=1000 BENCH_ONLY=control-plane target/debug/bench-scale
# then `hack/heap-report.py target/heaptrack/op.PID.gz` (the leader is the replica killed at
# rest: what it held then is what heaptrack reports as leaked). heaptrack's own script would
# start the operator as its child, and the benchmark signals the PID it started: this one
# becomes the operator (exec), with heaptrack's interpreter reading beside it.
# The binary needs symbols and line tables, which the release profile strips:
#   CARGO_TARGET_DIR=$HOME/.cache/etcd-operator/prof-target CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
#     CARGO_PROFILE_RELEASE_STRIP=false cargo build --release --bin etcd-operator
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${HEAPTRACK_OPERATOR_BIN:-$HOME/.cache/etcd-operator/prof-target/release/etcd-operator}
lib=${HEAPTRACK_LIB:-/usr/lib/heaptrack}
[ -x "$lib/libexec/heaptrack_interpret" ] || { echo "heaptrack is not installed (apt-get install heaptrack)" >&2; exit 2; }
out=$root/target/heaptrack
mkdir -p "$out"
pipe=$out/fifo.$$
rm -f "$pipe"; mkfifo "$pipe"
"$lib/libexec/heaptrack_interpret" < "$pipe" | gzip -c > "$out/op.$$.gz" &
LD_PRELOAD=$lib/libheaptrack_preload.so DUMP_HEAPTRACK_OUTPUT=$pipe exec "$bin" "$@"
