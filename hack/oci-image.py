#!/usr/bin/env python3
"""Builds a container image without a container engine: one layer holding the given files (and,
with --with-libs, the shared libraries they load), written as a docker-archive tar that
`ctr images import` reads. Deterministic: the same inputs give the same image ID.

  hack/oci-image.py --out etcd.tar --tag quay.io/coreos/etcd:v3.6.16 \
      --file /path/etcd:/usr/local/bin/etcd --entrypoint /usr/local/bin/etcd
"""
import argparse, hashlib, io, json, os, subprocess, tarfile


def shared_libs(path):
    """Absolute paths of the shared libraries a dynamically linked program loads (empty if static)."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True)
    libs = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) > parts.index("=>") + 1 and parts[parts.index("=>") + 1].startswith("/"):
            libs.append(parts[parts.index("=>") + 1])
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])  # the dynamic loader
    return libs


def add_dir(tar, seen, path):
    parts = path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d in seen:
            continue
        seen.add(d)
        info = tarfile.TarInfo(d)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
        tar.addfile(info)


def add_file(tar, seen, src, dest, mode=None):
    add_dir(tar, seen, dest)
    name = dest.strip("/")
    if name in seen:
        return
    seen.add(name)
    data = open(os.path.realpath(src), "rb").read()
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 0
    info.mode = mode if mode is not None else (os.stat(src).st_mode & 0o777)
    tar.addfile(info, io.BytesIO(data))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--tag", action="append", required=True)
    p.add_argument("--file", action="append", default=[], help="SRC:DEST")
    p.add_argument("--dir", action="append", default=[], help="an empty directory, e.g. /tmp:1777")
    p.add_argument("--entrypoint", nargs="*", default=[])
    p.add_argument("--cmd", nargs="*", default=[])
    p.add_argument("--user", default="")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--with-libs", action="store_true")
    a = p.parse_args()

    layer = io.BytesIO()
    seen = set()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in a.dir:
            path, _, mode = d.partition(":")
            add_dir(tar, seen, path.rstrip("/") + "/x")
            name = path.strip("/")
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, int(mode or "755", 8), 0
            if name not in seen:
                seen.add(name)
                tar.addfile(info)
        for f in a.file:
            src, dest = f.split(":", 1)
            add_file(tar, seen, src, dest)
            if a.with_libs:
                for lib in shared_libs(src):
                    add_file(tar, seen, lib, lib)
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + a.env,
            "Entrypoint": a.entrypoint or None,
            "Cmd": a.cmd or None,
            "User": a.user,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "hack/oci-image.py"}],
        "created": "1970-01-01T00:00:00Z",
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id[7:] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": a.tag, "Layers": [layer_name]}]
    with tarfile.open(a.out, "w") as out:
        for name, data in [(config_name, config_bytes), (layer_name, layer_bytes),
                           ("manifest.json", json.dumps(manifest).encode())]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            out.addfile(info, io.BytesIO(data))
    print(a.out)


if __name__ == "__main__":
    main()
