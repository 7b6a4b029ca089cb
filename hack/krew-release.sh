#!/usr/bin/env bash
# kubectl-etcd's release archive for krew, and its krew manifest filled for it.
#
#   hack/krew-release.sh TAG [OUT]   packs OUT/kubectl-etcd_<os>_<arch>.tar.gz (default OUT:
#                                    target/krew) from target/release/kubectl-etcd (built here; or
#                                    KUBECTL_ETCD_BIN), writes OUT/etcd.yaml from the template
#                                    plugin/krew/etcd.yaml: TAG, the archive's URI (under
#                                    RELEASE_URL, default the template's) and its sha256, for this
#                                    machine's platform only (it builds no other); then checks the
#                                    manifest with krew's own validator and installs the archive
#                                    with krew itself into a throwaway KREW_ROOT, where
#                                    `kubectl-etcd --help` must run.
#   hack/krew-release.sh --test      the same with the debug build (make unit runs it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/..
cd "$root"
if [ "${1:-}" = --test ]; then
  cargo build -q -p kubectl-etcd
  export KUBECTL_ETCD_BIN=${KUBECTL_ETCD_BIN:-target/debug/kubectl-etcd}
  set -- v0.0.0-test "$(mktemp -d)"
  trap 'rm -rf "$2"' EXIT
fi
tag=${1:?usage: hack/krew-release.sh TAG [OUT] | --test}
out=${2:-target/krew}
bin=${KUBECTL_ETCD_BIN:-}
if [ -z "$bin" ]; then
  cargo build -q --release -p kubectl-etcd
  bin=target/release/kubectl-etcd
fi
os=$(uname -s | tr '[:upper:]' '[:lower:]')
case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
archive=kubectl-etcd_${os}_${arch}.tar.gz
mkdir -p "$out"
stage=$(mktemp -d)
cp "$bin" "$stage/kubectl-etcd"
chmod 0755 "$stage/kubectl-etcd"
tar -C "$stage" --owner=0 --group=0 -czf "$out/$archive" kubectl-etcd
rm -rf "$stage"
sha=$(sha256sum "$out/$archive" | cut -d' ' -f1)

python3 - "$root/plugin/krew/etcd.yaml" "$out/etcd.yaml" "$tag" "$os" "$arch" "$sha" "${RELEASE_URL:-}" <<'PY'
import re, sys
template, dest, tag, os_, arch, sha, base = sys.argv[1:]
lines = [l for l in open(template).read().splitlines() if not l.startswith("#")]
out, block = [], []
def flush():
    # A platform's entry: kept, filled, for this machine's platform only.
    text = "\n".join(block)
    if block and f"os: {os_}, arch: {arch}" not in text:
        return
    for l in block:
        m = re.match(r'(\s*)\{\{addURIAndSha "([^"]+)" \.TagName \}\}', l)
        if m:
            uri = m.group(2).replace("{{ .TagName }}", tag)
            if base:
                uri = base.rstrip("/") + "/" + uri.rsplit("/", 1)[1]
            out.append(f"{m.group(1)}uri: {uri}")
            out.append(f"{m.group(1)}sha256: {sha}")
        else:
            out.append(l)
for l in lines:
    if l.strip().startswith("- selector:"):
        flush(); block = [l]
    elif block:
        block.append(l)
    else:
        out.append(l.replace("{{ .TagName }}", tag))
flush()
open(dest, "w").write("\n".join(out) + "\n")
PY

tools=$("$here/build-tools.sh" krew)
"$tools/validate-krew-manifest" -manifest "$out/etcd.yaml" -skip-install >&2
krew_root=$(mktemp -d)
KREW_ROOT=$krew_root "$tools/krew" install --manifest="$out/etcd.yaml" --archive="$out/$archive" >&2
"$krew_root/bin/kubectl-etcd" --help >/dev/null
rm -rf "$krew_root"
if [ "$tag" = v0.0.0-test ]; then
  # An archive that is not the one the manifest names is refused by krew.
  sed "s/sha256: $sha/sha256: $(printf '0%.0s' $(seq 64))/" "$out/etcd.yaml" >"$out/wrong.yaml"
  mkdir -p "$out/wrong" && mv "$out/wrong.yaml" "$out/wrong/etcd.yaml"
  krew_root=$(mktemp -d)
  if KREW_ROOT=$krew_root "$tools/krew" install --manifest="$out/wrong/etcd.yaml" --archive="$out/$archive" >/dev/null 2>&1; then
    echo "[krew] an archive with the wrong sha256 was installed" >&2; exit 1
  fi
  rm -rf "$krew_root"
fi
echo "[krew] $out/$archive (sha256 $sha) and $out/etcd.yaml: validated by krew and installed by it" >&2
