#!/usr/bin/env bash
# The e2e suite on the local cluster (KUBECONFIG set: run it through hack/with-cluster.sh), the
# test binaries built already (`cargo build -p e2e --tests`).
#
# cargo runs one test binary after another, so a binary of one long, mostly idle test holds
# the whole suite: tests/scheduled.rs waits three minutes for cron ticks. It and other long ones
# run beside the others, one after another (each test has its own namespace). On 2 cores the
# tests beside slow those of the main stream (tests/ready.rs 220 s instead of 115,
# tests/recovery.rs 192 s instead of 99, with tests/lifecycle.rs and tests/tls.rs beside), yet
# the suite ends sooner: the main stream took 1,019 s with them beside, 1,084 s without (the
# same day, the same machine). On 2026-12-02 the main stream's files took 1,634 s and those
# beside 740 s: tests/external.rs (new) and tests/cert_manager.rs (137 s) joined them. Last and
# alone: tests/nodes.rs stops, partitions and
# drains the nodes everything else runs on; tests/upgrade.rs puts the previous release's CRDs
# back.
#
#   hack/e2e.sh              the suite
#   E2E_TEST_THREADS=N       tests at once within a binary (default 2)
#   E2E_REPEAT=NAME=N        tests/NAME.rs (one of those beside) N times in a row, in a group of
#                            its own from the start, stopping at the first failure: a file
#                            tried again and again under the suite's own load
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
threads=${E2E_TEST_THREADS:-2}
# Each group beside runs its files one after another, all groups at once with the main stream.
# Group 1 holds the long idle ones; group 2 files that assert no timing of their own (on
# 2026-12-02 a clean `make test` used 41 CPU minutes in 60: the machine waited more than it
# worked). Files that time a handover or a failed-write window stay in the main stream: with
# them in group 2 beside a build, tests/arrival.rs saw a 6.4 s window (4 s allowed) and
# tests/operator.rs a 13.03 s handover (13 s allowed).
beside=(
  "scheduled alerts continuous lifecycle tls external cert_manager standby"
  "crd_validation network_policy backup restore settings hibernation tenancy"
)
last=(nodes upgrade)
repeat_name= repeat_count=1
if [ -n "${E2E_REPEAT:-}" ]; then
  repeat_name=${E2E_REPEAT%%=*} repeat_count=${E2E_REPEAT#*=}
  case " ${beside[*]} " in *" $repeat_name "*) ;; *)
    echo "E2E_REPEAT: tests/$repeat_name.rs is not one of the files run beside" >&2; exit 2 ;; esac
  [[ "$repeat_count" =~ ^[1-9][0-9]?$ ]] || { echo "E2E_REPEAT: NAME=N, N from 1 to 99" >&2; exit 2; }
  for g in "${!beside[@]}"; do
    beside[$g]=$(echo " ${beside[$g]} " | sed "s/ $repeat_name / /; s/^ *//; s/ *$//")
  done
  beside+=("$repeat_name")
fi

main=()
for f in e2e/tests/*.rs; do
  t=$(basename "$f" .rs)
  case " ${beside[*]} ${last[*]} " in *" $t "*) ;; *) main+=(--test "$t") ;; esac
done

# The test binary of tests/NAME.rs (cargo holds its build directory's lock for as long as
# `cargo test` runs, so the binaries beside it are run directly, as cargo would: from the
# package's directory).
executable() {
  "$cargo" test -p e2e --test "$1" --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$1"
}

mkdir -p target
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for g in "${!beside[@]}"; do
  bins=()
  for t in ${beside[$g]}; do
    b=$(executable "$t")
    [ -x "$b" ] || { echo "no test binary for tests/$t.rs: cargo build -p e2e --tests" >&2; exit 1; }
    bins+=("$b")
  done
  (
    cd e2e
    for b in "${bins[@]}"; do
      runs=1 show=()
      # A repeated file prints what it measured in each run.
      [ "${beside[$g]}" = "$repeat_name" ] && runs=$repeat_count show=(--nocapture)
      for run in $(seq 1 "$runs"); do
        echo "     Running $b (run $run of $runs, $(date -u +%T))"
        began=$SECONDS
        "$b" --test-threads="$threads" "${show[@]}" || { echo "run $run of $runs failed"; exit 1; }
        echo "     run $run of $runs passed in $((SECONDS - began)) s"
      done
    done
  ) >"target/e2e-beside-$g.log" 2>&1 &
  pids+=($!)
done

status=0
"$cargo" test -p e2e --lib --bins "${main[@]}" -- --test-threads="$threads" || status=$?
for g in "${!beside[@]}"; do
  wait "${pids[$g]}" || status=1
  echo "--- ${beside[$g]} (run beside the others) ---"
  cat "target/e2e-beside-$g.log"
done
trap - EXIT
[ "$status" -eq 0 ] || exit 1
"$cargo" test -p e2e "${last[@]/#/--test=}" -- --test-threads="$threads"
