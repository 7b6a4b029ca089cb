#!/usr/bin/env bash
# The Helm chart offline: helm lint --strict, helm template over the value sets users pick, and
# every rendered object checked against the Kubernetes 1.34 schemas (PyPI kubernetes-validate,
# strict: unknown fields fail). The ServiceMonitor has no schema there (its CRD belongs to
# prometheus-operator); it is only rendered.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
chart=$here/../charts/etcd-operator
helm=$("$here/build-tools.sh" helm)/helm
validate_version=1.37.0
if ! python3 -m pip show kubernetes-validate 2>/dev/null | grep -qx "Version: $validate_version"; then
  python3 -m pip install -q --root-user-action=ignore "kubernetes-validate==$validate_version"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$helm" lint --strict "$chart"
"$helm" lint --strict "$chart" --set watchNamespaces='{team-a,team-b}' --set replicas=2

render() { # NAME ARGS...
  local name=$1; shift
  "$helm" template "eo-$name" "$chart" --namespace etcd-operator "$@" > "$out/$name.yaml"
  python3 -m kubernetes_validate -k 1.34.0 --strict --quiet "$out/$name.yaml" 2>&1 |
    { grep -v "Couldn't find schema for kind \(ServiceMonitor\|PodMonitor\|PrometheusRule\)" || true; } > "$out/$name.log"
  if [ -s "$out/$name.log" ]; then cat "$out/$name.log" >&2; echo "[chart] $name: invalid" >&2; exit 1; fi
  echo "[chart] $name: $(grep -c '^kind:' "$out/$name.yaml") objects valid" >&2
}
render defaults
render namespaced --set watchNamespaces='{team-a,team-b}'
render namespaced-nodes --set watchNamespaces='{team-a}' --set readNodes=true
render namespaced-no-nodes --set watchNamespaces='{team-a,team-b}' --set readNodes=false
render single --set replicas=1
render ha --set replicas=2 --set metrics.serviceMonitor.enabled=true \
  --set podLabels.team=db --set podAnnotations.note=x --set nodeSelector.disk=ssd \
  --set 'tolerations[0].key=dedicated' --set 'tolerations[0].operator=Exists' \
  --set priorityClassName=system-cluster-critical --set log.format=text
render monitoring --set alerts.enabled=true --set dashboards.enabled=true --set 'alerts.labels.release=prom'
grep -q '^kind: PrometheusRule$' "$out/monitoring.yaml" && grep -q '^kind: PodMonitor$' "$out/monitoring.yaml" &&
  grep -q 'grafana_dashboard: "1"' "$out/monitoring.yaml" && grep -q 'alert: EtcdClusterQuorumLost' "$out/monitoring.yaml" ||
  { echo "[chart] alerts.enabled/dashboards.enabled: PrometheusRule, PodMonitor or dashboard missing" >&2; exit 1; }
# The alerts read the operator's series: its ServiceMonitor comes with them, selected like them.
python3 - "$out/monitoring.yaml" <<'PY' || { echo "[chart] alerts.enabled must scrape the operator (a ServiceMonitor with alerts.labels)" >&2; exit 1; }
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
sm = [d for d in docs if d["kind"] == "ServiceMonitor"]
assert len(sm) == 1 and sm[0]["metadata"]["labels"].get("release") == "prom", sm
assert sm[0]["spec"]["endpoints"][0]["honorLabels"] is True, sm
PY
if grep -q 'PrometheusRule\|PodMonitor\|ServiceMonitor\|grafana_dashboard' "$out/defaults.yaml"; then
  echo "[chart] monitoring objects rendered although alerts and dashboards are off" >&2; exit 1
fi
"$here/monitoring-test.sh"
# The operator lends its cloud identity to no namespace unless listed.
if grep -q -- '--allowed-external-cidrs' "$out/defaults.yaml"; then
  echo "[chart] the defaults let specs reach addresses outside their namespace" >&2; exit 1
fi
if grep -q -- '--ambient-credentials-namespaces' "$out/defaults.yaml"; then
  echo "[chart] the defaults allow ambient cloud credentials" >&2; exit 1
fi
grep -q -- '- --network-policies$' "$out/defaults.yaml" ||
  { echo "[chart] the defaults give clusters no NetworkPolicy" >&2; exit 1; }
render no-policies --set networkPolicies.enabled=false --set 'networkPolicies.metricsNamespaces={monitoring}'
if grep -q -- '--network-polic' "$out/no-policies.yaml"; then
  echo "[chart] networkPolicies.enabled=false still passes --network-policies" >&2; exit 1
fi
# Every right granted to the operator is in the README's RBAC table with the code that needs
# it, and every right the table lists is granted (the defaults: cluster-wide, Nodes, the API
# servers' slice, the Lease, the CRDs).
python3 - "$out/defaults.yaml" "$here/../README.md" "$here/.." <<'PY' || { echo "[chart] the RBAC rules and the README's RBAC table differ" >&2; exit 1; }
import os, re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
granted = set()
for d in docs:
    if d["kind"] in ("Role", "ClusterRole"):
        for r in d.get("rules", []):
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    for v in r.get("verbs", []):
                        granted.add((g or "(core)", res, v))
readme = open(sys.argv[2]).read()
table = readme.split("<!-- rbac-table -->")[1].split("<!-- /rbac-table -->")[0]
listed, problems = set(), []
for line in table.strip().splitlines()[2:]:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    group, res, verbs, code = cells
    for v in verbs.split(","):
        listed.add((group, res, v.strip()))
    current = None
    for token in re.findall(r"`([^`]+)`", code):
        if token.startswith("src/"):
            current = token
            if not os.path.isfile(os.path.join(sys.argv[3], token)):
                problems.append(f"{res}: {token} does not exist")
        elif current is None or token not in open(os.path.join(sys.argv[3], current)).read():
            problems.append(f"{res} {verbs}: {token} is not in {current}")
for g in sorted(granted - listed):
    problems.append(f"granted but not in the table: {g}")
for g in sorted(listed - granted):
    problems.append(f"in the table but not granted: {g}")
for p in problems:
    print("[chart] rbac:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
render external --set 'tenancy.allowedExternalCIDRs={10.20.0.0/16,fd00::/8}'
grep -q -- '- --allowed-external-cidrs=10.20.0.0/16,fd00::/8$' "$out/external.yaml" ||
  { echo "[chart] tenancy.allowedExternalCIDRs is not passed to the operator" >&2; exit 1; }
render ambient --set 'backups.ambientCredentials.namespaces={team-a,team-b}'
grep -q -- '- --ambient-credentials-namespaces=team-a,team-b$' "$out/ambient.yaml" ||
  { echo "[chart] backups.ambientCredentials.namespaces is not passed to the operator" >&2; exit 1; }
render no-election --set replicas=1 --set leaderElection.enabled=false --set metrics.service.enabled=false \
  --set memberGate.enabled=false
schedule=(--set 'backupSchedules[0].name=nightly' --set 'backupSchedules[0].schedule=0 3 * * *'
  --set 'backupSchedules[0].cluster=example' --set 'backupSchedules[0].pathPrefix=bucket/etcd/nightly'
  --set 'backupSchedules[0].secret=aws' --set 'backupSchedules[0].keep=7'
  --set 'backupSchedules[0].timeZone=Europe/Paris' --set 'backupSchedules[0].namespace=team-a')
render schedules --set watchNamespaces='{team-a}' "${schedule[@]}"
render schedules-packed "${schedule[@]}" --set 'backupSchedules[0].compression.level=9' \
  --set 'backupSchedules[0].s3Encryption.mode=SSE-KMS' --set 'backupSchedules[0].s3Encryption.kmsKeyId=alias/etcd' \
  --set 'backupSchedules[0].s3Encryption.bucketKey=true'
for flag in --compression=zstd --compression-level=9 --s3-encryption=SSE-KMS --s3-kms-key-id=alias/etcd --s3-bucket-key; do
  grep -q -- "- $flag\$" "$out/schedules-packed.yaml" || { echo "[chart] backupSchedules compression/s3Encryption: $flag not passed" >&2; exit 1; }
done
if grep -q -- '--compression\|--s3-' "$out/schedules.yaml"; then
  echo "[chart] a schedule without compression or s3Encryption passes their flags" >&2; exit 1
fi
# examples/backup-cronjob.yaml, the same for users without Helm, against the same schemas.
python3 -m kubernetes_validate -k 1.34.0 --strict --quiet "$here/../examples/backup-cronjob.yaml" >&2 ||
  { echo "[chart] examples/backup-cronjob.yaml: invalid" >&2; exit 1; }

# What the modes must and must not grant.
kinds() { grep '^kind:' "$out/$1.yaml" | sort | uniq -c | tr -s ' ' | tr '\n' ';'; }
grep -q '^kind: ClusterRole$' "$out/defaults.yaml" || { echo "[chart] cluster-wide mode has no ClusterRole" >&2; exit 1; }
# Namespaced mode's only cluster-wide rights are its own CRDs (crds.install, on by default) and
# reading Nodes (readNodes, on by default); with readNodes=false, the CRDs only.
python3 - "$out/namespaced.yaml" "$out/namespaced-no-nodes.yaml" <<'PY' || { echo "[chart] namespaced mode must not grant cluster-wide rights beyond its CRDs and reading Nodes: $(kinds namespaced)" >&2; exit 1; }
import sys, yaml
for path, want in ((sys.argv[1], 2), (sys.argv[2], 1)):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    roles = [d for d in docs if d["kind"] == "ClusterRole"]
    rules = [r for role in roles for r in role["rules"]]
    assert len(roles) == want, (path, roles)
    for r in rules:
        assert r["resources"] == ["customresourcedefinitions"] or (
            r["resources"] == ["nodes"] and r["verbs"] == ["list", "watch"]), (path, r)
PY
grep -q -- '- --install-crds$' "$out/defaults.yaml" || { echo "[chart] crds.install (default) must pass --install-crds" >&2; exit 1; }
render no-crds --set crds.install=false
if grep -q -- '--install-crds\|customresourcedefinitions' "$out/no-crds.yaml"; then
  echo "[chart] crds.install=false must neither pass --install-crds nor grant CRD rights" >&2; exit 1
fi
[ "$(grep -c '^kind: Role$' "$out/namespaced.yaml")" = 4 ] || { echo "[chart] expected a Role per namespace plus the Lease's and the API server addresses': $(kinds namespaced)" >&2; exit 1; }
# The API servers' addresses: get of the kubernetes Service's EndpointSlice, nothing more.
python3 - "$out/defaults.yaml" <<'PY' || { echo "[chart] apiServerEndpoints must grant get of default/kubernetes's EndpointSlice only" >&2; exit 1; }
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-apiserver")]
assert len(roles) == 1 and roles[0]["metadata"]["namespace"] == "default", roles
assert roles[0]["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
    "resourceNames": ["kubernetes"], "verbs": ["get"]}], roles[0]["rules"]
PY
render no-apiserver-endpoints --set apiServerEndpoints=false
if grep -q 'resourceNames: \[kubernetes\]' "$out/no-apiserver-endpoints.yaml"; then
  echo "[chart] apiServerEndpoints=false must not grant reading the kubernetes Service's EndpointSlice" >&2; exit 1
fi
# Node loss: acted on (and Nodes readable) cluster-wide; off where Nodes cannot be read.
grep -q -- '--node-loss-grace=30' "$out/defaults.yaml" && grep -q 'resources: \[nodes\]' "$out/defaults.yaml" ||
  { echo "[chart] cluster-wide mode must read Nodes and pass --node-loss-grace=30" >&2; exit 1; }
grep -q -- '--node-loss-grace=30' "$out/namespaced.yaml" || { echo "[chart] namespaced mode reads Nodes by default and must pass --node-loss-grace=30" >&2; exit 1; }
grep -q -- '--node-loss-grace=0' "$out/namespaced-no-nodes.yaml" || { echo "[chart] readNodes=false must pass --node-loss-grace=0" >&2; exit 1; }
grep -q -- '--node-loss-grace=30' "$out/namespaced-nodes.yaml" && [ "$(grep -c '^kind: ClusterRole' "$out/namespaced-nodes.yaml")" = 4 ] &&
  grep -A3 '^rules:' "$out/namespaced-nodes.yaml" | grep -q 'resources: \[nodes\]' ||
  { echo "[chart] readNodes must grant list/watch of Nodes (only) and pass --node-loss-grace=30" >&2; exit 1; }
render extra-env --set-json 'extraEnv=[{"name":"RUST_LOG","value":"debug"}]'
grep -A1 -- '- name: RUST_LOG$' "$out/extra-env.yaml" | grep -q 'value: debug' ||
  { echo "[chart] extraEnv not passed to the operator's container" >&2; exit 1; }
grep -q 'topologyKey: kubernetes.io/hostname' "$out/ha.yaml" || { echo "[chart] replicas > 1 are not spread over nodes" >&2; exit 1; }
grep -q '^kind: PodDisruptionBudget' "$out/ha.yaml" || { echo "[chart] replicas > 1 renders no PodDisruptionBudget" >&2; exit 1; }
if grep -q '^kind: PodDisruptionBudget' "$out/single.yaml"; then echo "[chart] one replica must not get a PodDisruptionBudget" >&2; exit 1; fi
# The defaults survive the loss of any one node: two replicas over two nodes, out of a lost
# node in seconds.
grep -q '^  replicas: 2$' "$out/defaults.yaml" && grep -q 'topologyKey: kubernetes.io/hostname' "$out/defaults.yaml" &&
  grep -q '^kind: PodDisruptionBudget' "$out/defaults.yaml" &&
  grep -A3 'key: node.kubernetes.io/unreachable' "$out/single.yaml" | grep -q 'tolerationSeconds: 10' ||
  { echo "[chart] the defaults must run 2 replicas spread over nodes, and leave a lost node within 10 s" >&2; exit 1; }
if "$helm" template x "$chart" --set replicas=2 --set leaderElection.enabled=false >/dev/null 2>&1; then
  echo "[chart] replicas > 1 without leader election must be refused" >&2; exit 1
fi
grep -q -- '--member-gate-image=quay.io/etcd-operator/etcd-operator:v' "$out/defaults.yaml" || { echo "[chart] the operator does not pass its image for the member gate" >&2; exit 1; }
if grep -q -- '--member-gate-image' "$out/no-election.yaml"; then echo "[chart] memberGate.enabled=false still passes the gate image" >&2; exit 1; fi
# A schedule's Job may create, get, list and delete EtcdBackups in its namespace, and nothing else.
python3 - "$out/schedules.yaml" <<'PY' || exit 1
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
name = "eo-schedules-etcd-operator-backup-nightly"
roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == name]
assert len(roles) == 1 and roles[0]["metadata"]["namespace"] == "team-a", roles
assert roles[0]["rules"] == [{"apiGroups": ["etcd.database.coreos.com"],
    "resources": ["etcdbackups"], "verbs": ["create", "get", "list", "delete"]}], roles[0]["rules"]
operator_own = lambda d: all(r["resources"] == ["customresourcedefinitions"] or
    (r["resources"] == ["nodes"] and r["verbs"] == ["list", "watch"]) for r in d["rules"])
assert not [d for d in docs if d["kind"] == "ClusterRole" and not operator_own(d)], "a schedule must not add cluster-wide rights"
cj = [d for d in docs if d["kind"] == "CronJob"]
assert len(cj) == 1, cj
spec = cj[0]["spec"]
assert spec["concurrencyPolicy"] == "Forbid" and spec["timeZone"] == "Europe/Paris", spec
job = spec["jobTemplate"]["spec"]
assert job["backoffLimit"] <= 3 and job["ttlSecondsAfterFinished"] > 0, job
pod = job["template"]["spec"]
c = pod["containers"][0]
assert pod["securityContext"]["runAsNonRoot"] and c["securityContext"]["readOnlyRootFilesystem"], pod
assert c["args"][:2] == ["backup", "create"] and "--keep=7" in c["args"], c["args"]
labels = job["template"]["metadata"]["labels"]
assert "app.kubernetes.io/instance" not in labels, "the operator's Service must not select backup pods"
PY
if err=$("$helm" template x "$chart" "${schedule[@]}" --set 'backupSchedules[0].schedule=every day' 2>&1); then
  echo "[chart] an invalid cron expression was accepted" >&2; exit 1
fi
grep -q 'is not a cron expression' <<<"$err" || { echo "[chart] unclear refusal of a bad cron expression: $err" >&2; exit 1; }
for f in "$here"/../crds/*.yaml; do
  cmp -s "$f" "$chart/crds/$(basename "$f")" || { echo "[chart] $chart/crds differs from crds/; run make crds" >&2; exit 1; }
done
echo "[chart] lint, render, schema and mode checks passed" >&2
