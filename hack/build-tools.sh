#!/usr/bin/env bash
# Builds the other programs the local cluster and the tests run, each from a Go helper module
# that pins its release (hack/<tool>/go.mod), into a cache keyed by version (outside target/):
#   etcd-3.5, etcd-3.6  etcd, etcdctl, etcdutl   (go.etcd.io/etcd/{server,etcdctl,etcdutl}/v3)
#   coredns             coredns                  (github.com/coredns/coredns)
#   helm                helm                     (helm.sh/helm/v4/cmd/helm)
#   pause               pause                    (the pause.c of the pinned k8s.io/kubernetes)
#   local-path          local-path-provisioner   (github.com/rancher/local-path-provisioner)
#   promtool            promtool                 (github.com/prometheus/prometheus/cmd/promtool:
#                                                 checks and unit-tests the chart's alerts)
#   prometheus          prometheus               (the same module's server, Kubernetes discovery
#                                                 only: scrapes the local cluster in the e2e test
#                                                 of the alerts)
#   krew                krew, validate-krew-manifest (sigs.k8s.io/krew: the plugin manifest
#                                                 checked and the release archive installed by
#                                                 krew itself, hack/krew-release.sh)
#   versitygw           versitygw                (github.com/versity/versitygw: an S3 gateway on a
#                                                 directory, the fast S3 server of the backup
#                                                 benchmark and the snapshot tests)
#   kube-network-policies kube-network-policies  (sigs.k8s.io/kube-network-policies/cmd: the
#                                                 NetworkPolicy implementation kind ships,
#                                                 nftables and NFQUEUE, on every node of the
#                                                 local cluster; patched to queue through the
#                                                 xtables NFQUEUE target)
#   cert-manager        cert-manager-controller  (github.com/cert-manager/cert-manager/cmd/controller:
#                                                 the controller the e2e tests run as a host
#                                                 process; its CRDs go to ../crds, next to bin)
#   csi-hostdir         csi-hostdir, csi-provisioner, csi-resizer (hack/csi-hostdir: the local
#                                                 cluster's own CSI driver, whose volumes are
#                                                 directories of the host and can grow; with
#                                                 github.com/kubernetes-csi/external-provisioner
#                                                 and external-resizer, host processes too, pinned
#                                                 in its go.mod; the driver is keyed by a hash of
#                                                 its source, the other two by release, linked
#                                                 into the driver's bin)
# Usage: hack/build-tools.sh TOOL   prints the directory holding the tool's binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

modver() { awk -v m="$2" '$1==m && $2 ~ /^v/ {print $2} $1=="require" && $2==m {print $3}' "$1/go.mod" | head -n1; }

# gobuild MODULE_DIR OUT_DIR NAME PACKAGE [LDFLAGS]
gobuild() {
  local dir=$1 out=$2 name=$3 pkg=$4 ldflags="-s -w ${5:-}"
  [ -x "$out/$name" ] && return 0
  mkdir -p "$out"
  echo "building $name ($pkg)" >&2
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
}

tool=${1:?usage: hack/build-tools.sh etcd-3.5|etcd-3.6|cert-manager|coredns|csi-hostdir|helm|krew|kube-network-policies|local-path|pause|promtool|prometheus|versitygw}
case "$tool" in
  etcd-3.5|etcd-3.6)
    dir=$here/etcd/v${tool#etcd-}
    v=$(modver "$dir" go.etcd.io/etcd/server/v3)
    out=$cache/etcd/$v/bin
    for c in server:etcd etcdctl:etcdctl etcdutl:etcdutl; do
      gobuild "$dir" "$out" "${c#*:}" "go.etcd.io/etcd/${c%%:*}/v3"
    done ;;
  coredns)
    dir=$here/coredns; v=$(modver "$dir" github.com/coredns/coredns)
    out=$cache/coredns/$v/bin
    gobuild "$dir" "$out" coredns github.com/coredns/coredns ;;
  helm)
    dir=$here/helm; v=$(modver "$dir" helm.sh/helm/v4)
    out=$cache/helm/$v/bin
    gobuild "$dir" "$out" helm helm.sh/helm/v4/cmd/helm "-X helm.sh/helm/v4/internal/version.version=$v" ;;
  local-path)
    dir=$here/local-path; v=$(modver "$dir" github.com/rancher/local-path-provisioner)
    out=$cache/local-path/$v/bin
    gobuild "$dir" "$out" local-path-provisioner github.com/rancher/local-path-provisioner ;;
  pause)
    v=$(modver "$here/k8s" k8s.io/kubernetes)
    out=$cache/pause/$v/bin
    if [ ! -x "$out/pause" ]; then
      src=$(cd "$here/k8s" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
      mkdir -p "$out"
      gcc -Os -static -Wall -DVERSION="$v" -o "$out/pause" "$src"
      strip "$out/pause"
    fi ;;
  promtool)
    dir=$here/prometheus; v=$(modver "$dir" github.com/prometheus/prometheus)
    out=$cache/prometheus/$v/bin
    # Without service-discovery plugins: rules need none, and the build is much smaller.
    GOFLAGS="$GOFLAGS -tags=remove_all_sd" gobuild "$dir" "$out" promtool github.com/prometheus/prometheus/cmd/promtool ;;
  prometheus)
    dir=$here/prometheus; v=$(modver "$dir" github.com/prometheus/prometheus)
    out=$cache/prometheus/$v/bin
    # Kubernetes service discovery only (the e2e test of the alerts finds the pods with it).
    GOFLAGS="$GOFLAGS -tags=remove_all_sd,enable_kubernetes_sd" gobuild "$dir" "$out" prometheus github.com/prometheus/prometheus/cmd/prometheus ;;
  krew)
    dir=$here/krew; v=$(modver "$dir" sigs.k8s.io/krew)
    out=$cache/krew/$v/bin
    gobuild "$dir" "$out" krew sigs.k8s.io/krew/cmd/krew
    gobuild "$dir" "$out" validate-krew-manifest sigs.k8s.io/krew/cmd/validate-krew-manifest ;;
  versitygw)
    dir=$here/versitygw; v=$(modver "$dir" github.com/versity/versitygw)
    out=$cache/versitygw/$v/bin
    gobuild "$dir" "$out" versitygw github.com/versity/versitygw/cmd/versitygw ;;
  cert-manager)
    dir=$here/cert-manager; v=$(modver "$dir" github.com/cert-manager/cert-manager)
    out=$cache/cert-manager/$v/bin
    # The version is also the tag of the default ACME HTTP-01 solver image.
    gobuild "$dir" "$out" cert-manager-controller github.com/cert-manager/cert-manager/cmd/controller \
      "-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$v"
    # The release's CRDs (deploy/crds), without the labels the Helm chart templates in.
    crds=$cache/cert-manager/$v/crds
    if [ ! -d "$crds" ]; then
      src=$(cd "$dir" && go mod download github.com/cert-manager/cert-manager &&
        go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)/deploy/crds
      rm -rf "$crds.tmp"; mkdir -p "$crds.tmp"
      for f in "$src"/crd-*.yaml; do
        sed -e '/{{/d' -e '/^  labels:$/d' "$f" > "$crds.tmp/${f##*/}"
      done
      mv "$crds.tmp" "$crds"
    fi ;;
  kube-network-policies)
    # The release with one patch (xt-nfqueue.patch says why), built from a patched copy of the
    # module through a go.mod of its own (-modfile): the module cache and the helper module stay
    # as they are. The cache key names the patch too.
    dir=$here/kube-network-policies; v=$(modver "$dir" sigs.k8s.io/kube-network-policies)
    patch_=$dir/xt-nfqueue.patch
    out=$cache/kube-network-policies/$v-$(sha256sum "$patch_" | cut -c1-8)/bin
    if [ ! -x "$out/kube-network-policies" ]; then
      src=$(cd "$dir" && go mod download sigs.k8s.io/kube-network-policies && go list -m -f '{{.Dir}}' sigs.k8s.io/kube-network-policies)
      tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
      cp -r "$src" "$tmp/src"; chmod -R u+w "$tmp/src"
      patch -s -p1 -d "$tmp/src" < "$patch_"
      { cat "$dir/go.mod"; echo "replace sigs.k8s.io/kube-network-policies => $tmp/src"; } > "$tmp/go.mod"
      cp "$dir/go.sum" "$tmp/go.sum"
      # The module's one program is its cmd package (upstream builds cmd/main.go into this name).
      GOFLAGS="$GOFLAGS -modfile=$tmp/go.mod" \
        gobuild "$dir" "$out" kube-network-policies sigs.k8s.io/kube-network-policies/cmd
    fi ;;
  csi-hostdir)
    # The driver is this project's source, not a release: its key is a hash of the module (code
    # and pins), so an edited driver is never served from a stale build.
    dir=$here/csi-hostdir
    out=$cache/csi-hostdir/$(cd "$dir" && sha256sum go.mod go.sum ./*.go | sha256sum | cut -c1-12)/bin
    gobuild "$dir" "$out" csi-hostdir .
    # The sidecars by release (a driver edit does not rebuild them), linked in beside it.
    for s in external-provisioner/v6:csi-provisioner external-resizer/v2:csi-resizer; do
      m=github.com/kubernetes-csi/${s%%:*} name=${s#*:}
      v=$(modver "$dir" "$m")
      gobuild "$dir" "$cache/$name/$v/bin" "$name" "$m/cmd/$name" "-X main.version=$v"
      ln -sfn "$cache/$name/$v/bin/$name" "$out/$name"
    done ;;
  *) echo "unknown tool $tool" >&2; exit 2 ;;
esac
echo "$out"
