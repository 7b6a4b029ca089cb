#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine; a no-op when present.
#   protoc   - etcd-client's build script compiles etcd's protobuf API
#   openssl  - the local cluster's PKI
#   etcd     - Debian's etcd 3.4 serves the local control plane (and is a test etcd)
#   containerd, runc, CNI plugins, conntrack, iptables, iproute2 - the local cluster's node
#   gcc, libc6-dev - the static pause binary
#   patch          - kube-network-policies is built with a patch (hack/kube-network-policies)
#   moto (PyPI)    - a real S3 API server for the snapshot tests
#   PyYAML (PyPI)  - hack/chart-test.sh reads the rendered chart, hack/docs.py the CRDs
#   ca-certificates - the operator image's CA bundle (object storage clients need one)
#   Azurite (npm)  - a real Azure Blob API server, and Azure's JS client to prepare and read it
set -euo pipefail
missing=()
command -v protoc >/dev/null || missing+=(protobuf-compiler)
command -v openssl >/dev/null || missing+=(openssl)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v etcdctl >/dev/null || missing+=(etcd-client)
command -v curl >/dev/null || missing+=(curl)
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v conntrack >/dev/null || missing+=(conntrack)
command -v iptables >/dev/null || missing+=(iptables)
command -v ip >/dev/null || missing+=(iproute2)
command -v gcc >/dev/null || missing+=(gcc)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || missing+=(libc6-dev)
command -v patch >/dev/null || missing+=(patch)
command -v python3 >/dev/null || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  echo "[deps] installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# moto's S3 server: the real S3 API the snapshot tests write to (tests/snapshot_s3.rs).
python3 -c 'import moto.server, flask' 2>/dev/null || python3 -m pip install -q 'moto[server]'
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install -q pyyaml
# Azurite: the real Azure Blob API the ABS tests write to (e2e/tests/backup.rs), with Azure's
# own client for what the tests do besides the operator (create a container, read a blob back).
azurite_dir="${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}/azurite"
if [ ! -x "$azurite_dir/node_modules/.bin/azurite-blob" ] || [ ! -d "$azurite_dir/node_modules/@azure/storage-blob" ]; then
  command -v npm >/dev/null || { echo "[deps] npm is required for Azurite" >&2; exit 1; }
  mkdir -p "$azurite_dir"
  (cd "$azurite_dir" && npm install -q --no-audit --no-fund azurite@3 @azure/storage-blob@12 >/dev/null)
fi
command -v go >/dev/null || { echo "[deps] Go is required to build Kubernetes (hack/build-k8s.sh)" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
