#!/usr/bin/env bash
# Builds the operator image from the cargo-built release binary, without a container engine,
# as target/images/etcd-operator.tar, and imports it into the local cluster's containerd when
# that cluster runs. The tag is the Helm chart's default image.
#
# The chaos run's image instead (make chaos): IMAGE_FEATURES=failpoints IMAGE_PROFILE=dev, the
# binary stripped, as target/images/$IMAGE_ARCHIVE.tar under the tag $IMAGE.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
version=$(awk -F'"' '/^version = / {print $2; exit}' "$root/Cargo.toml")
tag=${IMAGE:-quay.io/etcd-operator/etcd-operator:v$version}
profile=${IMAGE_PROFILE:-release}
dir=$profile; [ "$profile" = dev ] && dir=debug
cargo build --profile "$profile" ${IMAGE_FEATURES:+--features "$IMAGE_FEATURES"} --bin etcd-operator \
  --manifest-path "$root/Cargo.toml" >&2
gate=$("$here/gate.sh")
mkdir -p "$root/target/images"
out=$root/target/images/${IMAGE_ARCHIVE:-etcd-operator}.tar
bin=$root/target/$dir/etcd-operator
if [ "$profile" != release ]; then
  # Without its debug information: the image stays small.
  strip -o "$root/target/images/${IMAGE_ARCHIVE:-etcd-operator}.bin" "$bin"
  bin=$root/target/images/${IMAGE_ARCHIVE:-etcd-operator}.bin
fi
# The binary links glibc dynamically; its libraries go into the image, as in a distroless base,
# and so do the CA certificates (object storage clients load them, and refuse to start without).
"$here/oci-image.py" --out "$out" --tag "$tag" --with-libs \
  --file "$bin:/usr/local/bin/etcd-operator" \
  --file "$gate:/usr/local/bin/etcd-gate" \
  --file /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt \
  --dir /tmp:1777 --user 65532:65532 --entrypoint /usr/local/bin/etcd-operator >/dev/null
echo "$tag $(du -h "$out" | cut -f1) $out" >&2
if "$here/cluster.sh" has-node; then "$here/cluster.sh" import "$out"; echo "imported $tag" >&2; fi
