#!/usr/bin/env bash
# cargo deny check licenses bans sources (deny.toml says what each allows, and why advisories
# are not checked). cargo-deny is built once, at the pinned version, into a cache outside
# target/ (like the Go tools of hack/build-tools.sh), and reused after that.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
# The newest release at the time of pinning; it needs Rust 1.88, the toolchain is 1.95.0.
version=0.20.2
dir=$cache/tools/cargo-deny
if [ "$("$dir/bin/cargo-deny" --version 2>/dev/null)" != "cargo-deny $version" ]; then
  echo "building cargo-deny $version into $dir" >&2
  cargo install cargo-deny --locked --version "$version" --root "$dir" --force >&2
fi
cd "$root"
PATH=$dir/bin:$PATH cargo deny --locked check --hide-inclusion-graph licenses bans sources
