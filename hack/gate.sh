#!/usr/bin/env bash
# Builds etcd-gate statically linked (it runs inside the user's etcd image, which has no libc)
# and prints its path. A target directory of its own keeps the static flags from invalidating
# the operator's build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
triple=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -p etcd-gate \
  --target "$triple" --target-dir "$root/target/static" --manifest-path "$root/Cargo.toml" >&2
bin=$root/target/static/$triple/release/etcd-gate
# A dynamic binary would start on this machine and fail with "no such file" in an etcd image.
if readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
  echo "$bin is dynamically linked" >&2
  exit 1
fi
echo "$bin"
