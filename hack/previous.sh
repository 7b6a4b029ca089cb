#!/usr/bin/env bash
# The previous release, for the upgrade test (e2e/tests/upgrade.rs): the chart, the CRDs and the
# operator image of commit PREVIOUS (default: the last before the operator learned to install
# its own CRDs at start, the release users upgrade from), built once into a cache keyed by the
# commit, outside target/.
#
# The build shares this workspace's target directories, so only the old tree's own crates
# compile (the dependencies are the same), as a debug build stripped, like the chaos image (the
# profile changes nothing an upgrade meets, and a release build of the old crates alone takes
# minutes of link-time optimisation).
#
#   hack/previous.sh        builds it unless cached, imports the image into the local cluster
#                           when that runs, and prints the directory: chart/, crds/, image.tar, tag
#   hack/previous.sh dir    prints the directory, failing when it is not built
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
commit=${PREVIOUS:-5660ccafb7d27e40a4f96a736962258269a3b724}
short=${commit:0:7}
cache=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}/previous/$short

if [ "${1:-}" = dir ]; then
  [ -f "$cache/tag" ] || { echo "the previous release ($short) is not built: hack/previous.sh" >&2; exit 1; }
  echo "$cache"
  exit 0
fi

if [ ! -f "$cache/tag" ]; then
  git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null || {
    echo "commit $commit (the previous release) is not in this clone: git fetch --unshallow" >&2
    exit 1
  }
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  git -C "$root" archive "$commit" | tar -x -C "$src"
  # Renamed (the library keeps its crate name; the gate's package and binary both change), and
  # without the e2e crate that depends on it by name: cargo names its artifacts by package name
  # and relative path, so the old tree's would otherwise overwrite this tree's in the shared
  # target directory and pass for fresh.
  sed -i 's/^members = .*/members = [".", "gate"]/; 0,/^name = "etcd-operator"$/s//name = "etcd-operator-previous"/' \
    "$src/Cargo.toml"
  printf '[lib]\nname = "etcd_operator"\n' >>"$src/Cargo.toml"
  sed -i 's/^name = "etcd-gate"$/name = "etcd-gate-previous"/' "$src/gate/Cargo.toml"
  echo "building the previous release ($short)" >&2
  cargo build --offline --bin etcd-operator-previous --manifest-path "$src/Cargo.toml" \
    --target-dir "$root/target" >&2
  # As hack/gate.sh builds it, in its target directory.
  triple=$(rustc -vV | sed -n 's/^host: //p')
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --offline --release -p etcd-gate-previous \
    --target "$triple" --target-dir "$root/target/static" --manifest-path "$src/Cargo.toml" >&2
  tmp=$cache.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp"
  strip -o "$tmp/etcd-operator" "$root/target/debug/etcd-operator-previous"
  cp "$root/target/static/$triple/release/etcd-gate-previous" "$tmp/etcd-gate"
  cp -r "$src/charts/etcd-operator" "$tmp/chart"
  cp -r "$src/crds" "$tmp/crds"
  echo "quay.io/etcd-operator/etcd-operator:previous-$short" >"$tmp/tag"
  # Imported below, when a cluster runs.
  IMAGE=$(cat "$tmp/tag") IMAGE_BIN=$tmp/etcd-operator IMAGE_GATE=$tmp/etcd-gate \
    IMAGE_OUT=$tmp/image.tar ETCD_OPERATOR_NO_IMPORT=1 "$here/image.sh"
  rm "$tmp/etcd-operator" "$tmp/etcd-gate"
  rm -rf "$cache"
  mv "$tmp" "$cache"
fi
if "$here/cluster.sh" has-node; then
  "$here/cluster.sh" import "$cache/image.tar"
  echo "imported $(cat "$cache/tag")" >&2
fi
echo "$cache"
