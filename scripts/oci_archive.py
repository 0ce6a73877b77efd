#!/usr/bin/env python3
"""Write an OCI image archive (what `podman load -i` takes) from a root tree.

usage: oci_archive.py --rootfs DIR --out FILE --epoch N --name NAME:TAG
                      [--label K=V]... [--entrypoint JSON] [--cmd JSON]
                      [--user U] [--port N/tcp]... [--env K=V]...

scripts/image's last step. One layer: DIR as a tar, every entry owned by
0:0 with mtime N (SOURCE_DATE_EPOCH), in name order, directories and
executables 0755 and other files 0644 (the tree's own modes would carry the
build host's umask), gzip'ed with no name and no time; then the image
config (created = N), the manifest, index.json (annotated with NAME:TAG, the
name podman gives the loaded image) and oci-layout, as a tar of the same
rules. The same tree and arguments give the same bytes, so the same image
digest (the manifest's sha256), printed on stdout with the config's (the
image ID podman shows)."""
import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import time


def tar_info(name, st, epoch):
    """A TarInfo for NAME with only what the image needs of ST."""
    ti = tarfile.TarInfo(name)
    ti.mtime = epoch
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    if stat.S_ISDIR(st.st_mode):
        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
    elif stat.S_ISLNK(st.st_mode):
        ti.type, ti.mode = tarfile.SYMTYPE, 0o777
    elif stat.S_ISREG(st.st_mode):
        ti.type, ti.size = tarfile.REGTYPE, st.st_size
        ti.mode = 0o755 if st.st_mode & 0o111 else 0o644
    else:
        sys.exit("oci_archive.py: %s: not a file, directory or symlink" % name)
    return ti


def layer_tar(rootfs, epoch):
    """The tar of ROOTFS, deterministic (see the file's comment)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for top, dirs, files in os.walk(rootfs):
            dirs.sort()
            rel = os.path.relpath(top, rootfs)
            names = sorted(dirs + files)
            for n in names:
                path = os.path.join(top, n)
                name = n if rel == "." else rel + "/" + n
                st = os.lstat(path)
                ti = tar_info(name, st, epoch)
                if ti.type == tarfile.SYMTYPE:
                    ti.linkname = os.readlink(path)
                if ti.type == tarfile.REGTYPE:
                    with open(path, "rb") as f:
                        tar.addfile(ti, f)
                else:
                    tar.addfile(ti)
            # symlinks to directories are listed in dirs but not walked
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
    return buf.getvalue()


def gz(data):
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as f:
        f.write(data)
    return out.getvalue()


def blob(blobs, data, media_type):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--label", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--port", action="append", default=[])
    ap.add_argument("--entrypoint", default="[]")
    ap.add_argument("--cmd", default="[]")
    ap.add_argument("--user", default="")
    a = ap.parse_args()

    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(a.epoch))
    raw = layer_tar(a.rootfs, a.epoch)
    blobs = {}
    layer = blob(blobs, gz(raw), "application/vnd.oci.image.layer.v1.tar+gzip")
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": a.user,
            "Env": a.env,
            "Entrypoint": json.loads(a.entrypoint),
            "Cmd": json.loads(a.cmd),
            "ExposedPorts": {p: {} for p in a.port},
            "Labels": dict(kv.split("=", 1) for kv in a.label),
            "StopSignal": "SIGTERM",
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        "history": [{"created": created, "created_by": "scripts/image"}],
    }
    cfg = blob(blobs, canonical(config), "application/vnd.oci.image.config.v1+json")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": cfg,
        "layers": [layer],
        "annotations": {"org.opencontainers.image.created": created},
    }
    man = blob(blobs, canonical(manifest), "application/vnd.oci.image.manifest.v1+json")
    man["annotations"] = {"org.opencontainers.image.ref.name": a.name}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [man]}

    files = {"oci-layout": canonical({"imageLayoutVersion": "1.0.0"}),
             "index.json": canonical(index)}
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, a.epoch
            tar.addfile(ti)
        for name in sorted(files):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(files[name]), 0o644, a.epoch
            tar.addfile(ti, io.BytesIO(files[name]))
    os.replace(tmp, a.out)
    print("image digest %s" % man["digest"])
    print("config digest %s" % cfg["digest"])
    print("layer %d bytes compressed, %d bytes uncompressed" % (layer["size"], len(raw)))


if __name__ == "__main__":
    main()
