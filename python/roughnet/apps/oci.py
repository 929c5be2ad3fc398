"""A user's OCI image, without a Docker daemon or a registry: reading it and unpacking its root filesystem.

This module owns the image side of ``[[process]] image = "..."``:

- :func:`load_image` reads an image from a file or folder, in any of the three forms images travel in
  when no registry is reachable: a docker-archive tar (``docker save``/``podman save``: ``manifest.json``,
  the config and the layer tars), an oci-archive tar (``oci-layout``, ``index.json``, ``blobs/``) or an
  OCI image-layout directory; layers gzip'd or not. Content-addressed blobs are verified at load (OCI:
  manifest, config, every layer; docker-archive: the config, and each layer's uncompressed digest, its
  ``diff_id``); every error is an :class:`ImageError` that names the path and what was expected.
- :func:`unpack` turns the layers into a root filesystem cached by config digest under
  ``/var/cache/roughnet/oci/<hex>/rootfs`` (atomic: unpacked next to it, then renamed), applying the OCI
  whiteouts and refusing entries that would land outside the root filesystem.

Running an unpacked image (the runtime bundle, runc, cleanup) and the small test image built here
(``build_test_image``) are :mod:`roughnet.apps.ocibundle`, which imports this module (never the reverse).
Library code: logs, raises :class:`ImageError`
(exit code 2: bad input), never prints.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import logging
import os
import shutil
import stat
import tarfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Iterator, Sequence
from zlib import error as zlib_error

from ..errors import PreflightError

log = logging.getLogger(__name__)

CACHE_ROOT = Path("/var/cache/roughnet/oci")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPES = {"application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"}
LAYER_TYPES = {
    "application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar", "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
}
_BIG_JSON = 16 << 20  # manifests, indexes and configs larger than this are refused


class ImageError(PreflightError):
    """An image is unreadable, malformed, unsupported, or cannot be unpacked or run (exit code 2)."""


@dataclass(frozen=True)
class Layer:
    """One layer: where its blob is in the image (``name``), its media type and digests.

    ``digest``: the blob's digest (OCI forms; None in a docker-archive, whose layers are named by path);
    ``diff_id``: the digest of the uncompressed tar, from the config (verified when unpacked).
    """

    name: str
    media_type: str
    diff_id: str
    digest: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class Image:
    """A loaded image: its source, config digest (the cache key), runtime config and layers."""

    source: Path
    digest: str  # config digest "sha256:..."
    entrypoint: list[str]
    cmd: list[str]
    env: list[str]  # "K=V"
    working_dir: str
    user: str
    layers: list[Layer]
    format: str = "oci-archive"  # "docker-archive" | "oci-archive" | "oci-layout"
    ref: str | None = None  # the name the archive gives it, if any

    @property
    def key(self) -> str:
        return self.digest.split(":", 1)[1]


# ---- reading archives and layout directories ------------------------------------------------------


def _safe_name(name: str, where: str) -> str:
    """A relative path inside an archive or layout, with no absolute or '..' parts."""
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        raise ImageError(f"{where}: path {name!r} leaves the image (absolute or '..')")
    return str(p)


class _Source:
    """Files of an image by their relative name: members of a tar, or files of a directory."""

    def __init__(self, path: Path):
        self.path = path
        self.tar: tarfile.TarFile | None = None
        self.members: dict[str, tarfile.TarInfo] = {}
        try:
            if path.is_dir():
                return
            if not path.exists():
                raise ImageError(f"{path}: no such file or directory (expected an image archive or OCI layout)")
            self.tar = tarfile.open(path, "r:*")
            for m in self.tar:
                if m.isfile() or m.issym() or m.islnk():
                    self.members[str(PurePosixPath(m.name))] = m
        except tarfile.TarError as exc:
            raise ImageError(f"{path}: not a tar archive or OCI layout directory ({exc})") from exc
        except OSError as exc:
            raise ImageError(f"{path}: unreadable ({exc})") from exc

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()

    def has(self, name: str) -> bool:
        if self.tar is None:
            return (self.path / _safe_name(name, str(self.path))).is_file()
        return name in self.members

    def open(self, name: str, what: str) -> IO[bytes]:
        safe = _safe_name(name, str(self.path))
        try:
            if self.tar is None:
                return open(self.path / safe, "rb")
            m = self.members.get(safe)
            f = self.tar.extractfile(m) if m is not None else None
            if f is None:
                raise FileNotFoundError(safe)
            return f
        except (OSError, KeyError, tarfile.TarError) as exc:
            raise ImageError(f"{self.path}: {what} {name} is missing or unreadable ({exc})") from exc

    def read(self, name: str, what: str, digest: str | None = None, size: int | None = None) -> bytes:
        with self.open(name, what) as f:
            data = f.read(_BIG_JSON + 1)
        if len(data) > _BIG_JSON:
            raise ImageError(f"{self.path}: {what} {name} is larger than {_BIG_JSON >> 20} MiB")
        if digest is not None:
            _check_digest(self.path, what, name, _sha256(data), digest, size, len(data))
        return data


@contextmanager
def _source(path: Path) -> Iterator[_Source]:
    src = _Source(path)
    try:
        yield src
    finally:
        src.close()


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _check_digest(path: Path, what: str, name: str, got: str, want: str, size: int | None, got_size: int) -> None:
    if got != want:
        raise ImageError(f"{path}: {what} {name}: digest mismatch (expected {want}, the content has {got})")
    if size is not None and size != got_size:
        raise ImageError(f"{path}: {what} {name}: size mismatch (expected {size} bytes, has {got_size})")


def _blob_name(path: Path, digest: str) -> str:
    algo, _, hexd = str(digest).partition(":")
    if algo != "sha256" or len(hexd) != 64 or not all(c in "0123456789abcdef" for c in hexd):
        raise ImageError(f"{path}: unsupported or malformed digest {digest!r} (expected sha256:<64 hex>)")
    return f"blobs/sha256/{hexd}"


def _json(path: Path, data: bytes, what: str) -> object:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ImageError(f"{path}: {what} is not valid JSON ({exc})") from exc


def _hash_blob(src: _Source, name: str, gunzip: bool = False) -> tuple[str, int]:
    """(sha256 digest, size) of blob ``name``, of its uncompressed content when ``gunzip``."""
    h, n = hashlib.sha256(), 0
    try:
        with src.open(name, "layer") as f:
            data: IO[bytes] = gzip.GzipFile(fileobj=f) if gunzip else f
            while chunk := data.read(1 << 20):
                h.update(chunk)
                n += len(chunk)
    except (OSError, EOFError, tarfile.TarError, zlib_error) as exc:
        raise ImageError(f"{src.path}: layer {name} is unreadable or not valid gzip ({exc})") from exc
    return "sha256:" + h.hexdigest(), n


def load_image(path: Path) -> Image:
    """Read the image at ``path`` (docker-archive, oci-archive or OCI layout directory); verify its blobs."""
    path = Path(path).absolute()
    with _source(path) as src:
        if src.has("index.json"):
            image = _load_oci(src)
        elif src.has("manifest.json"):
            image = _load_docker(src)
        else:
            raise ImageError(f"{path}: no manifest: neither index.json (OCI layout) nor manifest.json "
                             "(docker-archive) is in it")
    log.debug("image %s: %s, config %s, %d layer(s)", path, image.format, image.digest, len(image.layers))
    return image


def _platform_ok(p: object) -> bool:
    return not isinstance(p, dict) or (p.get("os", "linux") == "linux" and p.get("architecture", "amd64") == "amd64")


def _platform_str(p: object) -> str:
    return f"{p.get('os', '?')}/{p.get('architecture', '?')}" if isinstance(p, dict) else "?"


def _desc_name(d: dict) -> str:
    ann = d.get("annotations") or {}
    ref = ann.get("io.containerd.image.name") or ann.get("org.opencontainers.image.ref.name")
    return f"{ref} ({str(d.get('digest'))[:19]})" if ref else str(d.get("digest"))


def _manifests_of(src: _Source, index: object, where: str) -> list[dict]:
    if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
        raise ImageError(f"{src.path}: {where} has no 'manifests' list")
    return [d for d in index["manifests"] if isinstance(d, dict)]


def _load_oci(src: _Source) -> Image:
    path = src.path
    if src.has("oci-layout"):
        layout = _json(path, src.read("oci-layout", "file"), "oci-layout")
        if not isinstance(layout, dict) or layout.get("imageLayoutVersion") != "1.0.0":
            raise ImageError(f"{path}: oci-layout says {layout!r} (expected imageLayoutVersion 1.0.0)")
    top = _manifests_of(src, _json(path, src.read("index.json", "file"), "index.json"), "index.json")
    chosen: list[dict] = []
    other_platforms: list[str] = []
    for d in top:
        mt = d.get("mediaType")
        if mt in (OCI_INDEX, DOCKER_LIST):  # one multi-platform image: take its linux/amd64 manifest
            nested = _json(path, src.read(_blob_name(path, d.get("digest", "")), "index", d.get("digest"),
                                          d.get("size")), f"index {d.get('digest')}")
            subs = _manifests_of(src, nested, f"index {d.get('digest')}")
            ok = [s for s in subs if isinstance(s.get("platform"), dict) and _platform_ok(s["platform"])]
            if not ok:
                other_platforms += [_platform_str(s.get("platform")) for s in subs]
                continue
            chosen.append({**ok[0], "annotations": d.get("annotations") or ok[0].get("annotations")})
        elif mt in (OCI_MANIFEST, DOCKER_MANIFEST, None):
            if _platform_ok(d.get("platform")):
                chosen.append(d)
            else:
                other_platforms.append(_platform_str(d.get("platform")))
        else:
            raise ImageError(f"{path}: index.json entry {d.get('digest')} has unsupported media type {mt!r} "
                             f"(expected {OCI_MANIFEST} or an image index)")
    if not chosen:
        if other_platforms:
            raise ImageError(f"{path}: no linux/amd64 image (platforms: {', '.join(sorted(set(other_platforms)))})")
        raise ImageError(f"{path}: index.json lists no image manifest")
    if len(chosen) > 1:
        raise ImageError(f"{path}: holds {len(chosen)} images, expected one: "
                         f"{', '.join(_desc_name(d) for d in chosen)}")
    desc = chosen[0]
    manifest = _json(path, src.read(_blob_name(path, desc.get("digest", "")), "manifest", desc.get("digest"),
                                    desc.get("size")), "manifest")
    if not isinstance(manifest, dict):
        raise ImageError(f"{path}: manifest {desc.get('digest')} is not a JSON object")
    mt = manifest.get("mediaType", desc.get("mediaType"))
    if mt not in (OCI_MANIFEST, DOCKER_MANIFEST, None):
        raise ImageError(f"{path}: manifest {desc.get('digest')} has unsupported media type {mt!r}")
    cdesc = manifest.get("config") or {}
    if cdesc.get("mediaType") not in CONFIG_TYPES:
        raise ImageError(f"{path}: config of manifest {desc.get('digest')} has unsupported media type "
                         f"{cdesc.get('mediaType')!r} (expected an image config; is this an artifact?)")
    config_raw = src.read(_blob_name(path, cdesc.get("digest", "")), "config", cdesc.get("digest"),
                          cdesc.get("size"))
    config, diff_ids = _parse_config(path, config_raw)
    ldescs = manifest.get("layers") or []
    if len(ldescs) != len(diff_ids):
        raise ImageError(f"{path}: manifest lists {len(ldescs)} layers, the config {len(diff_ids)} diff_ids")
    layers = []
    for ld, diff_id in zip(ldescs, diff_ids):
        if not isinstance(ld, dict):
            raise ImageError(f"{path}: manifest {desc.get('digest')}: layer entry {ld!r} is not an object")
        lmt = ld.get("mediaType")
        if lmt not in LAYER_TYPES:
            hint = " (zstd: re-save the image with gzip or no compression)" if "zstd" in str(lmt) else ""
            raise ImageError(f"{path}: layer {ld.get('digest')} has unsupported media type {lmt!r}{hint}")
        name = _blob_name(path, ld.get("digest", ""))
        got, n = _hash_blob(src, name)
        _check_digest(path, "layer", name, got, ld["digest"], ld.get("size"), n)
        layers.append(Layer(name, lmt, diff_id, ld["digest"], n))
    ref = (desc.get("annotations") or {}).get("io.containerd.image.name") or \
        (desc.get("annotations") or {}).get("org.opencontainers.image.ref.name")
    return _image(src, config, cdesc["digest"], layers, ref, "oci-layout" if src.tar is None else "oci-archive")


def _load_docker(src: _Source) -> Image:
    path = src.path
    manifest = _json(path, src.read("manifest.json", "file"), "manifest.json")
    if not isinstance(manifest, list) or not manifest or not all(isinstance(m, dict) for m in manifest):
        raise ImageError(f"{path}: manifest.json is not a non-empty list of images (docker-archive)")
    if len(manifest) > 1:
        names = [", ".join(m.get("RepoTags") or []) or str(m.get("Config")) for m in manifest]
        raise ImageError(f"{path}: holds {len(manifest)} images, expected one: {'; '.join(names)}")
    entry = manifest[0]
    cname = entry.get("Config")
    if not isinstance(cname, str):
        raise ImageError(f"{path}: manifest.json has no Config entry")
    config_raw = src.read(cname, "config")
    digest = _sha256(config_raw)
    stem = PurePosixPath(cname).name.removesuffix(".json")
    if len(stem) == 64 and all(c in "0123456789abcdef" for c in stem):
        _check_digest(path, "config", cname, digest, "sha256:" + stem, None, 0)
    config, diff_ids = _parse_config(path, config_raw)
    lnames = _str_list(path, entry.get("Layers"), "manifest.json Layers")
    if len(lnames) != len(diff_ids):
        raise ImageError(f"{path}: manifest.json lists {len(lnames)} layers, the config {len(diff_ids)} diff_ids")
    layers = []
    for lname, diff_id in zip(lnames, diff_ids):
        with src.open(lname, "layer") as f:
            gz = f.read(2) == b"\x1f\x8b"
        got, n = _hash_blob(src, lname, gunzip=gz)
        _check_digest(path, "layer", lname, got, diff_id, None, n)
        layers.append(Layer(lname, "application/vnd.docker.image.rootfs.diff.tar" + (".gzip" if gz else ""),
                            diff_id))
    tags = entry.get("RepoTags") or []
    return _image(src, config, digest, layers, tags[0] if tags else None, "docker-archive")


def _parse_config(path: Path, raw: bytes) -> tuple[dict, list[str]]:
    config = _json(path, raw, "config")
    if not isinstance(config, dict):
        raise ImageError(f"{path}: the image config is not a JSON object")
    os_, arch = config.get("os", "linux"), config.get("architecture", "amd64")
    if (os_, arch) != ("linux", "amd64"):
        raise ImageError(f"{path}: image platform is {os_}/{arch}, expected linux/amd64")
    rootfs = config.get("rootfs") or {}
    diff_ids = rootfs.get("diff_ids")
    if rootfs.get("type") != "layers" or not isinstance(diff_ids, list) or \
            not all(isinstance(d, str) for d in diff_ids):
        raise ImageError(f"{path}: the image config has no rootfs.diff_ids list")
    return config, diff_ids


def _str_list(path: Path, v: object, key: str) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ImageError(f"{path}: {key} is {v!r}, expected a list of strings")
    return list(v)


def _image(src: _Source, config: dict, digest: str, layers: list[Layer], ref: str | None, fmt: str) -> Image:
    c = config.get("config") or {}
    if not isinstance(c, dict):
        raise ImageError(f"{src.path}: image config 'config' is not an object")
    return Image(source=src.path, digest=digest,
                 entrypoint=_str_list(src.path, c.get("Entrypoint"), "config Entrypoint"),
                 cmd=_str_list(src.path, c.get("Cmd"), "config Cmd"),
                 env=_str_list(src.path, c.get("Env"), "config Env"),
                 working_dir=str(c.get("WorkingDir") or ""), user=str(c.get("User") or ""), layers=layers,
                 format=fmt, ref=ref)


# ---- unpacking --------------------------------------------------------------------------------------


def resolve_in(root: str, rel: str | Sequence[str], create: bool = False) -> str | None:
    """``rel`` inside ``root`` with every symlink followed as the container would see it (absolute targets
    start at ``root``, '..' stops at ``root``): the host path never leaves ``root``. Missing components:
    made as directories (mode 0755) when ``create``, else None."""
    todo = [p for p in (rel.split("/") if isinstance(rel, str) else rel) if p not in ("", ".")]
    cur, hops = root, 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            cur = cur if cur == root else os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, part)
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(nxt, 0o755)
            cur = nxt
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                raise ImageError(f"too many symlinks resolving {'/'.join(rel) if not isinstance(rel, str) else rel}")
            target = os.readlink(nxt)
            if target.startswith("/"):
                cur = root
            todo = target.split("/") + todo
            continue
        if not stat.S_ISDIR(st.st_mode) and todo:
            if not create:
                return None
            raise ImageError(f"{nxt} is not a directory but a layer puts files under it")
        cur = nxt
    return cur


def _remove(p: str) -> None:
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(p)
    else:
        os.unlink(p)


def _opaque(d: str, created: set[str]) -> None:
    """Hide what lower layers put in directory ``d``: remove every entry this layer did not make."""
    for e in os.scandir(d):
        if e.path not in created:
            _remove(e.path)
        elif e.is_dir(follow_symlinks=False):
            _opaque(e.path, created)


class _HashReader(io.RawIOBase):
    """Reads through ``f`` while hashing and counting what passes."""

    def __init__(self, f: IO[bytes]):
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        data = self.f.read(len(b))
        b[: len(data)] = data
        self.h.update(data)
        self.n += len(data)
        return len(data)


_AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _owner(path: str, m: tarfile.TarInfo) -> None:
    if _AS_ROOT:
        os.chown(path, m.uid, m.gid, follow_symlinks=False)


def _apply_member(tar: tarfile.TarFile, m: tarfile.TarInfo, root: str, created: set[str], where: str) -> None:
    name = _member_name(m.name, where)
    if not name:
        if m.isdir():
            os.chmod(root, m.mode & 0o7777)
            _owner(root, m)
        return
    parent = resolve_in(root, name[:-1], create=True)
    assert parent is not None
    base = name[-1]
    if base.startswith(".wh."):
        if base == ".wh..wh..opq":
            _opaque(parent, created)
        elif not base.startswith(".wh..wh."):
            target = os.path.join(parent, base[4:])
            if target not in created:
                _remove(target)
        return
    dest = os.path.join(parent, base)
    p = parent
    while p != root and p not in created:
        created.add(p)
        p = os.path.dirname(p)
    created.add(dest)
    try:
        st: os.stat_result | None = os.lstat(dest)
    except FileNotFoundError:
        st = None
    mode = m.mode & 0o7777
    if m.isdir():
        if st is not None and not stat.S_ISDIR(st.st_mode):
            os.unlink(dest)
            st = None
        if st is None:
            os.mkdir(dest, 0o700)
        _owner(dest, m)
        os.chmod(dest, mode)
        return
    if st is not None:
        _remove(dest)
    if m.isreg():
        src = tar.extractfile(m)
        assert src is not None
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
            if _AS_ROOT:
                os.fchown(out.fileno(), m.uid, m.gid)
            os.fchmod(out.fileno(), mode)
        cap = m.pax_headers.get("SCHILY.xattr.security.capability")
        if cap is not None and _AS_ROOT:
            try:
                os.setxattr(dest, "security.capability", cap.encode("utf-8", "surrogateescape"))
            except OSError as exc:
                log.debug("%s: cannot set file capabilities on /%s: %s", where, "/".join(name), exc)
    elif m.issym():
        os.symlink(m.linkname, dest)
        _owner(dest, m)
    elif m.islnk():
        lname = _member_name(m.linkname, where)
        lparent = resolve_in(root, lname[:-1]) if lname else None
        src_path = os.path.join(lparent, lname[-1]) if lparent else None
        if src_path is None or not os.path.lexists(src_path):
            raise ImageError(f"{where}: hard link /{'/'.join(name)} points to /{m.linkname}, which is not there")
        os.link(src_path, dest, follow_symlinks=False)
        return
    elif m.ischr() or m.isblk() or m.isfifo():
        kind = stat.S_IFCHR if m.ischr() else stat.S_IFBLK if m.isblk() else stat.S_IFIFO
        try:
            os.mknod(dest, kind | mode, os.makedev(m.devmajor, m.devminor) if not m.isfifo() else 0)
        except PermissionError:
            log.debug("%s: cannot make device /%s (not root); skipped", where, "/".join(name))
            return
        _owner(dest, m)
        os.chmod(dest, mode)
    else:
        log.debug("%s: entry /%s of type %r skipped", where, "/".join(name), m.type)
        return
    os.utime(dest, (m.mtime, m.mtime), follow_symlinks=False)


def _member_name(name: str, where: str) -> tuple[str, ...]:
    if name.startswith("/"):
        raise ImageError(f"{where}: entry {name!r} has an absolute path (refused)")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise ImageError(f"{where}: entry {name!r} contains '..' (path traversal, refused)")
    return parts


def _apply_layer(f: IO[bytes], root: str, layer: Layer, where: str) -> None:
    raw = f
    head = f.peek(4)[:4] if hasattr(f, "peek") else b""
    if head[:4] == b"\x28\xb5\x2f\xfd":
        raise ImageError(f"{where}: zstd-compressed layer (unsupported: re-save the image with gzip or none)")
    data: IO[bytes] = gzip.GzipFile(fileobj=raw) if head[:2] == b"\x1f\x8b" else raw
    hashed = _HashReader(data)
    stream = io.BufferedReader(hashed, 1 << 20)
    created: set[str] = set()
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for m in tar:
                _apply_member(tar, m, root, created, where)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib_error) as exc:
        raise ImageError(f"{where}: not a valid layer tar ({exc})") from exc
    except ImageError as exc:
        if where in str(exc):
            raise
        raise ImageError(f"{where}: {exc}") from exc
    while stream.read(1 << 20):
        pass
    got = "sha256:" + hashed.h.hexdigest()
    if got != layer.diff_id:
        raise ImageError(f"{where}: digest mismatch of the uncompressed layer (expected {layer.diff_id}, has {got})")


def unpack(image: Image, cache_root: Path = CACHE_ROOT) -> tuple[Path, bool]:
    """The image's root filesystem, ``cache_root/<config hex>/rootfs``: ``(rootfs, unpacked_now)``.

    Unpacked into ``cache_root/.tmp-<hex>-<pid>`` (under a lock file per digest) and renamed into place
    only when complete, so a crash leaves a temporary folder (removed by the next unpack) and never a
    partial root filesystem. Layers apply in order with OCI whiteouts; owners and modes are kept when root.
    """
    cache_root = Path(cache_root)
    final = cache_root / image.key
    rootfs = final / "rootfs"
    if rootfs.is_dir():
        return rootfs, False
    try:
        cache_root.mkdir(parents=True, exist_ok=True)
        with open(cache_root / f".lock-{image.key}", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if rootfs.is_dir():
                return rootfs, False
            for stale in cache_root.glob(f".tmp-{image.key}-*"):
                log.info("removing %s (left by an interrupted unpack)", stale)
                shutil.rmtree(stale, ignore_errors=True)
            tmp = cache_root / f".tmp-{image.key}-{os.getpid()}"
            try:
                t0 = time.monotonic()
                _unpack_into(image, tmp)
                os.rename(tmp, final)
                log.info("unpacked %s (%s) into %s in %.2f s", image.source, image.digest, rootfs,
                         time.monotonic() - t0)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        raise ImageError(f"unpacking {image.source} into {cache_root} failed: {exc}") from exc
    return rootfs, True


def _unpack_into(image: Image, tmp: Path) -> None:
    tmp.mkdir(mode=0o755)
    root = tmp / "rootfs"
    root.mkdir(mode=0o755)
    with _source(image.source) as src:
        for i, layer in enumerate(image.layers):
            where = f"{image.source}: layer {i + 1}/{len(image.layers)} ({layer.name})"
            with src.open(layer.name, "layer") as f:
                buf = f if hasattr(f, "peek") else io.BufferedReader(f)  # type: ignore[arg-type]
                _apply_layer(buf, str(root), layer, where)
    meta = {"source": str(image.source), "ref": image.ref, "format": image.format, "digest": image.digest,
            "layers": [layer.diff_id for layer in image.layers]}
    (tmp / "image.json").write_text(json.dumps(meta, indent=1) + "\n")
