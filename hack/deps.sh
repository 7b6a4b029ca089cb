#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine; a no-op when present.
#   protoc   - etcd-client's build script compiles etcd's protobuf API
#   openssl  - the local cluster's PKI
#   etcd     - Debian's etcd 3.4 serves the local control plane (and is a test etcd)
set -euo pipefail
missing=()
command -v protoc >/dev/null || missing+=(protobuf-compiler)
command -v openssl >/dev/null || missing+=(openssl)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v etcdctl >/dev/null || missing+=(etcd-client)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "[deps] installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "[deps] Go is required to build Kubernetes (hack/build-k8s.sh)" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
