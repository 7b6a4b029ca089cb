#!/usr/bin/env bash
# `make standby`: the standby scenario across two local Kubernetes clusters
# (e2e/tests/standby.rs, the test marked ignored in `make test`). The first cluster (a running
# one is used; otherwise one is started and stopped afterwards) holds the primary, its operator
# and the S3 server on its bridge; a second cluster (ETCD_OPERATOR_CLUSTER_INDEX=2, one node)
# holds the standby and its own operator. The operator image is built and imported into both.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
hack/with-cluster.sh sh -c '
  set -e
  IMAGE_PROFILE=dev hack/image.sh
  export KUBECONFIG_1=$KUBECONFIG
  ETCD_OPERATOR_CLUSTER_INDEX=2 NODES=1 hack/with-cluster.sh sh -c "
    set -e
    hack/cluster.sh import target/images/etcd-operator.tar
    export E2E_SECOND_KUBECONFIG=\$KUBECONFIG KUBECONFIG=\$KUBECONFIG_1
    unset ETCD_OPERATOR_CLUSTER_INDEX
    '"$cargo"' test -p e2e --test standby -- --ignored --nocapture
  "
'
