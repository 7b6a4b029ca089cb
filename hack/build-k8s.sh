#!/usr/bin/env bash
# Builds the Kubernetes components the local test cluster runs, from the official k8s.io/kubernetes
# Go module pinned in hack/k8s/go.mod, into a cache keyed by version (outside target/), so that a
# version is compiled once per machine. Usage: hack/build-k8s.sh [component...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/k8s/go.mod")
cache=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
out="$cache/k8s/$version/bin"
mkdir -p "$out"
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
minor=$(echo "$version" | cut -d. -f2)
pkgs=(k8s.io/component-base/version k8s.io/client-go/pkg/version)
ldflags="-s -w"
for p in "${pkgs[@]}"; do
  ldflags+=" -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z -X $p.gitCommit=0000000000000000000000000000000000000000"
done
cd "$here/k8s"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0
for c in "${components[@]}"; do
  if [ -x "$out/$c" ]; then continue; fi
  echo "building $c $version" >&2
  go build -trimpath -ldflags "$ldflags" -o "$out/$c.tmp" "k8s.io/kubernetes/cmd/$c"
  mv "$out/$c.tmp" "$out/$c"
done
echo "$out"
