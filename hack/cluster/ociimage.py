#!/usr/bin/env python3
"""Packs a directory tree as a single-layer OCI image archive (an OCI image layout in a tar), with
the Python standard library only, for `ctr -n k8s.io images import` on the real node (no Docker).

    ociimage.py --name docker.io/ddp-operator/pause:1 --rootfs DIR [--entrypoint JSON]
                [--cmd JSON] [--env K=V]... [--gzip] OUTPUT.tar

The layer holds DIR's content as the image's root: owners become root (uid/gid kept, names
dropped), device nodes and the content of dev/, proc/ and sys/ are left out (the runtime mounts
those), hard links stay hard links. Entries are sorted and the archive's own metadata carries no
time, so the same tree gives the same digests.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import tempfile

LAYER = "application/vnd.oci.image.layer.v1.tar"
SKIP_CONTENT = {"dev", "proc", "sys"}


class HashingWriter(io.RawIOBase):
    """A write-only stream that hashes (sha256) and counts what goes through to `out`."""

    def __init__(self, out):
        super().__init__()
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self):
        return True

    def write(self, b):
        self.sha.update(b)
        self.size += len(b)
        self.out.write(b)
        return len(b)


def walk(root):
    """Yields (path, arcname) for every entry of root, parents first, sorted by name."""

    def rec(path, arc):
        for name in sorted(os.listdir(path)):
            p, a = os.path.join(path, name), f"{arc}{name}"
            yield p, a
            top_special = arc == "" and name in SKIP_CONTENT
            if os.path.isdir(p) and not os.path.islink(p) and not top_special:
                yield from rec(p, a + "/")

    yield from rec(root, "")


def write_layer(rootfs, out):
    """Writes the layer tar of rootfs to the binary stream out."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path, arc in walk(rootfs):
            mode = os.lstat(path).st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
                continue
            info = tar.gettarinfo(path, arcname=arc)
            info.uname = info.gname = ""
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)


def add_blob(tar, data, media_type):
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def add_bytes(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True, help="image reference, e.g. docker.io/x/y:tag")
    ap.add_argument("--rootfs", required=True, help="directory that becomes the image's /")
    ap.add_argument("--entrypoint", type=json.loads, default=None, help="JSON list")
    ap.add_argument("--cmd", type=json.loads, default=None, help="JSON list")
    ap.add_argument("--env", action="append", default=[], help="K=V (repeatable)")
    ap.add_argument("--gzip", action="store_true", help="gzip the layer")
    ap.add_argument("output")
    args = ap.parse_args()

    out_dir = os.path.dirname(os.path.abspath(args.output))
    with tempfile.TemporaryFile(dir=out_dir) as blob:
        # The layer goes to a temporary file once, hashed on the way: uncompressed for the diff
        # id, as stored for the blob digest.
        stored = HashingWriter(blob)
        if args.gzip:
            gz = gzip.GzipFile(fileobj=stored, mode="wb", compresslevel=6, mtime=0)
            plain = HashingWriter(gz)
            write_layer(args.rootfs, plain)
            gz.close()
        else:
            plain = stored
            write_layer(args.rootfs, plain)
        diff_id = f"sha256:{plain.sha.hexdigest()}"
        layer = {
            "mediaType": LAYER + ("+gzip" if args.gzip else ""),
            "digest": f"sha256:{stored.sha.hexdigest()}",
            "size": stored.size,
        }

        env = args.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
        cfg = {"Env": env}
        if args.entrypoint is not None:
            cfg["Entrypoint"] = args.entrypoint
        if args.cmd is not None:
            cfg["Cmd"] = args.cmd
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            # One entry for the one layer: buildah's layer cache (bud --layers) refuses a base
            # whose history does not list its layers.
            "history": [{"created_by": "ociimage.py --rootfs"}],
        }

        tmp_out = args.output + ".tmp"
        with tarfile.open(tmp_out, "w", format=tarfile.PAX_FORMAT) as tar:
            add_bytes(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
            config_desc = add_blob(
                tar,
                json.dumps(config, sort_keys=True).encode(),
                "application/vnd.oci.image.config.v1+json",
            )
            blob.seek(0)
            info = tarfile.TarInfo(f"blobs/sha256/{layer['digest'].split(':', 1)[1]}")
            info.size, info.mode = layer["size"], 0o644
            tar.addfile(info, blob)
            manifest = {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc,
                "layers": [layer],
            }
            manifest_desc = add_blob(
                tar, json.dumps(manifest, sort_keys=True).encode(), manifest["mediaType"]
            )
            tag = args.name.rsplit(":", 1)[1] if ":" in args.name.rsplit("/", 1)[-1] else "latest"
            manifest_desc["annotations"] = {
                "io.containerd.image.name": args.name,
                "org.opencontainers.image.ref.name": tag,
            }
            index = {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [manifest_desc],
            }
            add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        os.replace(tmp_out, args.output)
    print(
        f"{args.output}: {args.name} layer {layer['digest']} ({layer['size']} bytes)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
