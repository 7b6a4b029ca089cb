#!/usr/bin/env bash
# The chart's alerts and dashboard against real Prometheus and etcd code, offline:
#   - promtool (Prometheus's own rule engine) checks charts/etcd-operator/files/alerts.yaml and
#     runs its unit tests, hack/alerts-test.yaml (each alert fires, and only when it should);
#   - every series the alerts and the dashboard read exists: etcd_* in the /metrics of a real
#     etcd 3.6 started here, etcd_operator_* among the operator's registered series
#     (src/metrics.rs); the dashboard is valid JSON.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/..
promtool=$("$here/build-tools.sh" promtool)/promtool
etcd=$("$here/build-tools.sh" etcd-3.6)/etcd
alerts=$root/charts/etcd-operator/files/alerts.yaml
dashboard=$root/charts/etcd-operator/files/dashboard.json

"$promtool" check rules "$alerts" >&2
(cd "$here" && "$promtool" test rules alerts-test.yaml) >&2

work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
peer=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$etcd" --data-dir "$work/data" --listen-client-urls "http://127.0.0.1:$port" \
  --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$peer" \
  --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "default=http://127.0.0.1:$peer" >"$work/etcd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/metrics" >"$work/metrics" 2>/dev/null && grep -q '^etcd_server_has_leader 1' "$work/metrics" && break
  sleep 0.1
done
grep -q '^etcd_server_has_leader 1' "$work/metrics" || { cat "$work/etcd.log" >&2; echo "[monitoring] etcd did not serve /metrics" >&2; exit 1; }

python3 - "$alerts" "$dashboard" "$work/metrics" "$root/src/metrics.rs" <<'PY'
import json, re, sys
alerts, dashboard, metrics, source = (open(p).read() for p in sys.argv[1:])
json.loads(dashboard)
etcd = set(re.findall(r'^([a-z_:]+?)(?:_bucket|_sum|_count)?(?:\{| )', metrics, re.M))
registered = set(re.findall(r'"([a-z_]+)",\n\s+"', source))
missing = []
for where, text in (("alerts", alerts), ("dashboard", dashboard)):
    for name in sorted(set(re.findall(r'\b(etcd_[a-z_]+)', text))):
        if name.startswith("etcd_operator_"):
            base = re.sub(r'_(total|bucket|sum|count)$', '', name[len("etcd_operator_"):])
            if base not in registered:
                missing.append(f"{where}: {name} is not an operator series")
        else:
            base = re.sub(r'_(bucket|sum|count)$', '', name)
            if base not in etcd and name not in etcd and name != "etcd_cluster":
                missing.append(f"{where}: {name} is not in etcd 3.6's /metrics")
if missing:
    print("\n".join(missing), file=sys.stderr)
    sys.exit(1)
PY
echo "[monitoring] alerts checked and unit-tested by promtool; every series they and the dashboard read exists" >&2
