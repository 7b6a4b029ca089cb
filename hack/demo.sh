#!/usr/bin/env bash
# The main job on the local cluster (make demo starts it first): builds the operator image and
# imports it, installs the chart the way users do (namespace etcd-operator, watching `default`,
# where the example goes, so that a demo left running never acts on the e2e suite's namespaces),
# applies the basic example, waits until it is Available and prints it with etcd's own member
# list. Running it again upgrades in place. make demo-down stops the cluster.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=$("$here/build-k8s.sh" kubectl)
helm=$("$here/build-tools.sh" helm)/helm
export KUBECONFIG=$("$here/cluster.sh" kubeconfig)
k() { "$bin/kubectl" "$@"; }
"$here/image.sh"
# The archive is deterministic, so its digest names the build.
image_id=$(sha256sum "$root/target/images/etcd-operator.tar" | cut -c1-16)
# The annotation rolls the operator when a rebuilt image was imported under the same tag.
"$helm" upgrade --install etcd-operator "$root/charts/etcd-operator" \
  --namespace etcd-operator --create-namespace \
  --set 'watchNamespaces={default}' --set image.pullPolicy=Never \
  --set-string "podAnnotations.etcd-operator/image-id=$image_id" \
  --wait --timeout 2m >/dev/null
echo "[demo] the chart is installed (namespace etcd-operator)" >&2
k apply -f "$root/examples/basic-cluster.yaml"
echo "[demo] waiting for EtcdCluster example to be Available" >&2
k wait --for=condition=Available --timeout=300s etcdcluster/example >/dev/null
until [ "$(k get etcdcluster/example -o jsonpath='{.status.readyMembers}')" = 3 ]; do sleep 1; done
k wait --for=condition=Ready --timeout=120s pod -l etcd_cluster=example >/dev/null
k get -n etcd-operator deploy,pods
echo
k get etcd,pods,svc -o wide
member=$(k get etcdcluster/example -o jsonpath='{.status.members.ready[0]}')
echo
echo "etcd member list (from $member):"
k exec "$member" -c etcd -- /usr/local/bin/etcdctl member list -w table
echo
echo "KUBECONFIG=$KUBECONFIG"
