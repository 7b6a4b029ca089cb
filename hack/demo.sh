#!/usr/bin/env bash
# The main job on the local cluster (make demo starts it first): installs the CRDs, starts the
# operator as a host process (until the Helm chart runs it in-cluster), applies the basic example,
# waits until it is Available and prints it with etcd's own member list. Running it again reuses
# what runs. make demo-down stops the operator and the cluster.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$("$here/build-k8s.sh" kubectl)
export KUBECONFIG=$("$here/cluster.sh" kubeconfig)
k() { "$bin/kubectl" "$@"; }
k apply --server-side --force-conflicts -f "$here/../crds/" >/dev/null
k wait --for=condition=Established --timeout=60s -f "$here/../crds/" >/dev/null
state=$(dirname "$KUBECONFIG")
cargo build -q --bin etcd-operator --manifest-path "$here/../Cargo.toml"
if ! { [ -f "$state/pids/operator.pid" ] && kill -0 "$(cat "$state/pids/operator.pid")" 2>/dev/null; }; then
  setsid "$here/../target/debug/etcd-operator" run --namespace default \
    >"$state/logs/operator.log" 2>&1 </dev/null &
  echo $! > "$state/pids/operator.pid"
  echo "[demo] started the operator (pid $!, log $state/logs/operator.log)" >&2
fi
k apply -f "$here/../examples/basic-cluster.yaml"
echo "[demo] waiting for EtcdCluster example to be Available" >&2
k wait --for=condition=Available --timeout=300s etcdcluster/example >/dev/null
until [ "$(k get etcdcluster/example -o jsonpath='{.status.readyMembers}')" = 3 ]; do sleep 1; done
k get etcd,pods,svc -o wide
member=$(k get etcdcluster/example -o jsonpath='{.status.members.ready[0]}')
echo
echo "etcd member list (from $member):"
k exec "$member" -- /usr/local/bin/etcdctl member list -w table
echo
echo "KUBECONFIG=$KUBECONFIG"
