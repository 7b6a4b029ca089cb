#!/usr/bin/env bash
# Runs a command against a throwaway control plane (etcd + kube-apiserver + controller-manager)
# with KUBECONFIG and KUBECTL set, and stops the control plane afterwards, whatever the outcome.
# Its own state directory and ports keep it apart from a cluster a developer has running.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export ETCD_OPERATOR_CLUSTER_DIR=${ETCD_OPERATOR_TEST_CLUSTER_DIR:-/tmp/etcd-operator-test-cp}
export ETCD_OPERATOR_API_PORT=${ETCD_OPERATOR_TEST_API_PORT:-6444}
export ETCD_OPERATOR_API_ETCD_PORT=${ETCD_OPERATOR_TEST_API_ETCD_PORT:-2579}
trap '"$here/cluster.sh" down' EXIT
"$here/cluster.sh" down
"$here/cluster.sh" up --control-plane-only
bin=$("$here/build-k8s.sh" kubectl)
export KUBECONFIG=$ETCD_OPERATOR_CLUSTER_DIR/kubeconfig KUBECTL=$bin/kubectl PATH=$bin:$PATH
"$@"
