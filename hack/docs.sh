#!/usr/bin/env bash
# The book in docs/: its checks (hack/docs.py: the reference matches the CRDs, every relative
# link and anchor resolves) and its build with mdbook into target/book. mdbook is built once, at
# the pinned version and without its server and watcher, into a cache outside target/ (like
# cargo-deny in hack/deny.sh), and reused after that.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}
version=0.5.4
dir=$cache/tools/mdbook
if [ "$("$dir/bin/mdbook" --version 2>/dev/null)" != "mdbook v$version" ]; then
  echo "building mdbook $version into $dir" >&2
  cargo install mdbook --locked --version "$version" --no-default-features --root "$dir" --force >&2
fi
python3 "$root/hack/docs.py" check
"$dir/bin/mdbook" build "$root/docs"
