#!/usr/bin/env bash
# Runs a command against the local cluster with KUBECONFIG, KUBECTL and PATH set.
#
#   hack/with-cluster.sh --control-plane-only CMD...   a throwaway control plane (own state directory
#                                                      and ports, apart from any running cluster),
#                                                      stopped afterwards whatever the outcome
#   hack/with-cluster.sh CMD...                        the local cluster (NODES nodes): a running one is used
#                                                      as it is; otherwise one is started for CMD and
#                                                      stopped afterwards
#
# ETCD_OPERATOR_CLUSTER_INDEX=2 picks the second local cluster (hack/cluster.sh) instead of the
# first, the same way. Both at once, KUBECONFIG the second's and the first's in KUBECONFIG_1:
#   hack/with-cluster.sh sh -c 'KUBECONFIG_1=$KUBECONFIG ETCD_OPERATOR_CLUSTER_INDEX=2 hack/with-cluster.sh CMD...'
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = --control-plane-only ]; then
  shift
  export ETCD_OPERATOR_CLUSTER_DIR=${ETCD_OPERATOR_TEST_CLUSTER_DIR:-/tmp/etcd-operator-test-cp}
  export ETCD_OPERATOR_API_PORT=${ETCD_OPERATOR_TEST_API_PORT:-6444}
  export ETCD_OPERATOR_API_ETCD_PORT=${ETCD_OPERATOR_TEST_API_ETCD_PORT:-2579}
  export ETCD_OPERATOR_CONTROLLER_MANAGER_PORT=${ETCD_OPERATOR_TEST_CONTROLLER_MANAGER_PORT:-10357}
  # `down --control-plane-only`: the node's network, if any, belongs to the running cluster.
  trap '"$here/cluster.sh" down --control-plane-only' EXIT
  "$here/cluster.sh" down --control-plane-only
  "$here/cluster.sh" up --control-plane-only
else
  bin=$("$here/build-k8s.sh" kubectl)
  if "$bin/kubectl" --kubeconfig "$("$here/cluster.sh" kubeconfig)" get --raw /readyz >/dev/null 2>&1 &&
     "$here/cluster.sh" has-node; then
    echo "[with-cluster] using the running cluster" >&2
  else
    trap '"$here/cluster.sh" down' EXIT
    "$here/cluster.sh" down
    "$here/cluster.sh" up
  fi
fi
bin=$("$here/build-k8s.sh" kubectl)
helm=$("$here/build-tools.sh" helm)
KUBECONFIG=$("$here/cluster.sh" kubeconfig)
export KUBECONFIG KUBECTL=$bin/kubectl HELM=$helm/helm PATH=$bin:$helm:$PATH
"$@"
