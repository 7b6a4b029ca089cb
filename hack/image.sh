#!/usr/bin/env bash
# Builds the operator image from the cargo-built release binary, without a container engine,
# as target/images/etcd-operator.tar, and imports it into the local cluster's containerd when
# that cluster runs. The tag is the Helm chart's default image.
#
# The chaos run's image instead (make chaos): IMAGE_FEATURES=failpoints IMAGE_PROFILE=dev, the
# binary stripped, as target/images/$IMAGE_ARCHIVE.tar under the tag $IMAGE. Binaries built
# elsewhere: IMAGE_BIN and IMAGE_GATE, the archive at IMAGE_OUT (hack/previous.sh);
# ETCD_OPERATOR_NO_IMPORT=1: not imported.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
version=$(awk -F'"' '/^version = / {print $2; exit}' "$root/Cargo.toml")
tag=${IMAGE:-quay.io/etcd-operator/etcd-operator:v$version}
profile=${IMAGE_PROFILE:-release}
dir=$profile; [ "$profile" = dev ] && dir=debug
mkdir -p "$root/target/images"
out=${IMAGE_OUT:-$root/target/images/${IMAGE_ARCHIVE:-etcd-operator}.tar}
if [ -n "${IMAGE_BIN:-}" ]; then
  # Binaries built already (hack/previous.sh: another release's).
  bin=$IMAGE_BIN gate=${IMAGE_GATE:?IMAGE_GATE: the etcd-gate beside IMAGE_BIN}
else
  cargo build --profile "$profile" ${IMAGE_FEATURES:+--features "$IMAGE_FEATURES"} --bin etcd-operator \
    --manifest-path "$root/Cargo.toml" >&2
  gate=$("$here/gate.sh")
  bin=$root/target/$dir/etcd-operator
  if [ "$profile" != release ]; then
    # Without its debug information: the image stays small.
    strip -o "$root/target/images/${IMAGE_ARCHIVE:-etcd-operator}.bin" "$bin"
    bin=$root/target/images/${IMAGE_ARCHIVE:-etcd-operator}.bin
  fi
fi
# The binary links glibc dynamically; its libraries go into the image, as in a distroless base,
# and so do the CA certificates (object storage clients load them, and refuse to start without).
"$here/oci-image.py" --out "$out" --tag "$tag" --with-libs \
  --file "$bin:/usr/local/bin/etcd-operator" \
  --file "$gate:/usr/local/bin/etcd-gate" \
  --file /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt \
  --dir /tmp:1777 --user 65532:65532 --entrypoint /usr/local/bin/etcd-operator >/dev/null
echo "$tag $(du -h "$out" | cut -f1) $out" >&2
if [ -z "${ETCD_OPERATOR_NO_IMPORT:-}" ] && "$here/cluster.sh" has-node; then
  "$here/cluster.sh" import "$out"; echo "imported $tag" >&2
fi
