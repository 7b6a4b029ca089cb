#!/usr/bin/env bash
# Installs the CRDs into the local cluster (make demo starts it first) and applies the examples.
# The operator that acts on them is not built yet (see README.md, Status), so the EtcdClusters
# stay without status.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$("$here/build-k8s.sh" kubectl)
export KUBECONFIG=$("$here/cluster.sh" kubeconfig)
k() { "$bin/kubectl" "$@"; }
k apply --server-side --force-conflicts -f "$here/../crds/"
k wait --for=condition=Established --timeout=60s -f "$here/../crds/"
k apply -f "$here/../examples/"
k get etcd,etcdbackup,etcdrestore
echo
echo "KUBECONFIG=$KUBECONFIG"
