"""Container images built here, without a registry: OCI image-layout tar archives.

No registry is reachable from the machines roughnet's cluster runs on, so the two images
its pods use are assembled from files of this machine and written as OCI image-layout
archives (``oci-layout``, ``index.json``, ``blobs/sha256/...``) that
``ctr -n k8s.io images import`` takes as they are (and skopeo/crane as ``oci-archive:``):

- ``roughnet.local/pause:3.10``: a static ``pause`` compiled from
  ``scripts/kubernetes/pause.c`` (``gcc -static -O2``), entrypoint ``/pause``.
- ``roughnet.local/roughnet:<version>``: ``/usr/local/bin/roughnet-agent`` and
  ``roughnet-wire`` (from ``bin/``, see :mod:`roughnet.binaries`; without debug sections), the host's
  ``mosquitto`` and ``nats-server`` (Debian packages) at their host paths, ``/usr/local/bin/rn-exec``
  (static, from ``scripts/kubernetes/rn-exec.c``: starts a user's program in a pod), busybox-static as
  ``/bin/busybox`` with symlinks for common applets (not ``wget``: Debian's segfaults; use
  ``nc``), every shared library the dynamic binaries load (from ``ldd``, with the dynamic
  loader), a minimal ``/etc/passwd``, ``/etc/group`` (root, mosquitto, nobody) and
  ``/etc/nsswitch.conf``, and ``/tmp`` (mode 1777). Kafka is not included: it needs a JVM
  (a JRE alone is some 200 MB); a Kafka broker for a cluster has to come from elsewhere.

Archives are reproducible: one layer per image, entries sorted, mtimes fixed, owner 0:0,
gzip without a timestamp, so the same inputs give the same bytes (and digests). Library
code: raises :class:`ImageError` (exit code 2 in the CLI) and never prints.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Sequence

from .. import __version__
from ..binaries import REPO_ROOT, find_binary
from ..errors import PreflightError

IMAGES_DIR = Path(os.environ.get("ROUGHNET_IMAGES_DIR", "/var/cache/roughnet/images"))
REGISTRY = "roughnet.local"
PAUSE_TAG = "3.10"
PAUSE_SOURCE = REPO_ROOT / "scripts" / "kubernetes" / "pause.c"
#: Starts a user's program in a pod (backends.kubernetes.apps): pid file, network namespace, user, exec.
RN_EXEC_SOURCE = REPO_ROOT / "scripts" / "kubernetes" / "rn-exec.c"
RN_EXEC = "/usr/local/bin/rn-exec"
# 2000-01-01T00:00:00Z: a fixed timestamp for every entry (some tools treat 0 as "unset").
EPOCH = 946684800
CREATED = "2000-01-01T00:00:00Z"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Debian 12's busybox-static applets linked into the roughnet image (its wget segfaults).
BUSYBOX_APPLETS = (
    "sh ash cat kill killall sleep mkdir nc ls ps rm rmdir tee ip ifconfig route netstat ping "
    "echo printf env grep egrep sed awk cp mv ln chmod chown head tail wc date hostname id sort "
    "uniq tr cut test true false top seq xargs find df du free uname which whoami touch readlink "
    "realpath pidof basename dirname expr vi less more tar gzip gunzip zcat timeout yes sync "
    "mktemp nproc stat tc nslookup telnet hexdump od usleep watch dd diff nsenter unshare setsid"
).split()

PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "mosquitto:x:100:101:mosquitto:/var/lib/mosquitto:/bin/false\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
)
GROUP = "root:x:0:\nmosquitto:x:101:\nnogroup:x:65534:\n"
NSSWITCH = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"


class ImageError(PreflightError):
    """An image could not be built (a missing input, a failed compile, an unwritable place)."""


@dataclass(frozen=True)
class FileEntry:
    """A regular file of the image: ``source`` on this machine (symlinks followed), ``path`` in the image.

    ``strip_debug``: the copy in the image loses its debug sections (``strip --strip-debug``;
    symbols stay, so backtraces keep their names).
    """

    source: Path
    path: str
    mode: int = 0o755
    strip_debug: bool = False


@dataclass(frozen=True)
class DataEntry:
    """A regular file of the image given by its content."""

    data: bytes
    path: str
    mode: int = 0o644


@dataclass(frozen=True)
class Symlink:
    path: str
    target: str


@dataclass(frozen=True)
class Directory:
    path: str
    mode: int = 0o755


Entry = FileEntry | DataEntry | Symlink | Directory


@dataclass
class ImageSpec:
    """What goes into one image: its reference, its entries and its runtime config."""

    name: str  # repository, e.g. "roughnet.local/pause"
    tag: str
    entries: list[Entry] = field(default_factory=list)
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    env: list[str] = field(default_factory=lambda: [f"PATH={DEFAULT_PATH}"])
    working_dir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)
    compress: bool = True

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.tag}"

    def inputs(self) -> list[Path]:
        return [e.source for e in self.entries if isinstance(e, FileEntry)]


@dataclass(frozen=True)
class BuiltImage:
    """An archive on disk: where, how big, which reference, its manifest digest."""

    ref: str
    path: Path
    size: int
    manifest_digest: str
    built: bool  # False when an up-to-date archive was kept


def _norm(path: str) -> str:
    p = PurePosixPath("/" + path.lstrip("/"))
    if ".." in p.parts:
        raise ImageError(f"image path {path!r}: '..' is not allowed")
    return str(p).lstrip("/")


def _tarinfo(name: str, kind: bytes, mode: int, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.size = size
    ti.linkname = linkname
    ti.mtime = EPOCH
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    return ti


def layer_tar(entries: Iterable[Entry]) -> bytes:
    """The uncompressed layer: every entry with its parent directories, sorted, owner 0:0, fixed mtime."""
    items: dict[str, Entry] = {}
    for e in entries:
        path = _norm(e.path)
        if not path:
            raise ImageError("an image entry needs a path other than /")
        if path in items and items[path] != e and not (isinstance(e, Directory) and isinstance(items[path], Directory)):
            raise ImageError(f"image path /{path} is given twice, differently")
        items[path] = e
        parts = PurePosixPath(path).parts
        for i in range(1, len(parts)):
            items.setdefault("/".join(parts[:i]), Directory("/".join(parts[:i])))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(items):
            e = items[path]
            if isinstance(e, Directory):
                tar.addfile(_tarinfo(path + "/", tarfile.DIRTYPE, e.mode))
            elif isinstance(e, Symlink):
                tar.addfile(_tarinfo(path, tarfile.SYMTYPE, 0o777, linkname=e.target))
            elif isinstance(e, DataEntry):
                tar.addfile(_tarinfo(path, tarfile.REGTYPE, e.mode, len(e.data)), io.BytesIO(e.data))
            else:
                data = _file_bytes(e, path)
                tar.addfile(_tarinfo(path, tarfile.REGTYPE, e.mode, len(data)), io.BytesIO(data))
    return buf.getvalue()


def _file_bytes(e: FileEntry, path: str) -> bytes:
    try:
        if not e.strip_debug:
            return Path(e.source).read_bytes()
        strip = shutil.which("strip")
        if strip is None:
            raise ImageError("strip is not installed (binutils; needed to shrink the binaries in the image)")
        with tempfile.TemporaryDirectory(prefix="roughnet-strip-") as d:
            out = Path(d) / "stripped"
            res = subprocess.run([strip, "--strip-debug", "-o", str(out), str(e.source)],
                                 capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise ImageError(f"strip --strip-debug {e.source} failed: {res.stderr.strip()[-300:]}")
            return out.read_bytes()
    except OSError as exc:
        raise ImageError(f"cannot read {e.source} (for /{path} in the image): {exc}") from exc


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _layer_type(spec: ImageSpec) -> str:
    return "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if spec.compress else "")


def image_config(spec: ImageSpec, diff_id: str) -> bytes:
    """The image's config blob for a layer whose uncompressed digest is ``diff_id``."""
    config_obj: dict = {"Env": list(spec.env), "WorkingDir": spec.working_dir}
    if spec.entrypoint:
        config_obj["Entrypoint"] = list(spec.entrypoint)
    if spec.cmd:
        config_obj["Cmd"] = list(spec.cmd)
    if spec.labels:
        config_obj["Labels"] = dict(spec.labels)
    return _json({
        "created": CREATED,
        "architecture": "amd64",
        "os": "linux",
        "config": config_obj,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": CREATED, "created_by": "roughnet image build"}],
    })


def write_archive(spec: ImageSpec, output: Path, layer: bytes | None = None) -> BuiltImage:
    """Write ``spec`` as an OCI image-layout tar archive at ``output`` (atomically).

    ``layer``: the uncompressed layer if already made with :func:`layer_tar`.
    """
    if layer is None:
        layer = layer_tar(spec.entries)
    if spec.compress:
        gz = io.BytesIO()
        with gzip.GzipFile(fileobj=gz, mode="wb", compresslevel=6, mtime=0) as f:
            f.write(layer)
        layer_blob = gz.getvalue()
    else:
        layer_blob = layer
    layer_type = _layer_type(spec)
    config = image_config(spec, _digest(layer))
    manifest = _json({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": layer_type, "digest": _digest(layer_blob), "size": len(layer_blob)}],
    })
    index = _json({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _digest(manifest),
            "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                # containerd names the image after this one ...
                "io.containerd.image.name": spec.ref,
                # ... OCI tools (skopeo oci-archive:FILE:TAG) after this one.
                "org.opencontainers.image.ref.name": spec.tag,
            },
        }],
    })
    blobs = {_digest(b).split(":", 1)[1]: b for b in (layer_blob, config, manifest)}
    files = [("oci-layout", _json({"imageLayoutVersion": "1.0.0"})), ("index.json", index)]
    files += [(f"blobs/sha256/{h}", blobs[h]) for h in sorted(blobs)]

    output = Path(output)
    tmp = None
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for d in ("blobs/", "blobs/sha256/"):
                tar.addfile(_tarinfo(d, tarfile.DIRTYPE, 0o755))
            for name, data in files:
                tar.addfile(_tarinfo(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
        os.chmod(tmp, 0o644)
        os.replace(tmp, output)
        tmp = None
    except OSError as exc:
        raise ImageError(f"cannot write the image archive {output}: {exc}") from exc
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return BuiltImage(spec.ref, output, output.stat().st_size, _digest(manifest), True)


# ---- the two images ----------------------------------------------------------------------


def image_ref(name: str) -> str:
    """The reference of one of roughnet's images: ``pause`` or ``roughnet``."""
    if name == "pause":
        return f"{REGISTRY}/pause:{PAUSE_TAG}"
    if name == "roughnet":
        return f"{REGISTRY}/roughnet:{__version__}"
    raise ImageError(f"unknown image {name!r}: expected pause or roughnet")


def image_archive(name: str, directory: Path | None = None) -> Path:
    """Where the archive of image ``name`` (``pause`` or ``roughnet``) is, or is written."""
    tag = image_ref(name).rsplit(":", 1)[1]
    return Path(directory or IMAGES_DIR) / f"{name}-{tag}.tar"


def static_binary(source: Path, directory: Path | None = None) -> Path:
    """A static program compiled from ``source`` (scripts/kubernetes/*.c) when missing or older than it."""
    name = source.stem
    out = Path(directory or IMAGES_DIR) / name / name
    if out.is_file() and out.stat().st_mtime >= source.stat().st_mtime:
        return out
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ImageError(f"gcc is not installed (needed for {name} in roughnet's images): apt-get install -y "
                         f"build-essential")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{name}.tmp")
    res = subprocess.run([gcc, "-static", "-O2", "-s", "-o", str(tmp), str(source)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise ImageError(f"gcc -static {source} failed (exit {res.returncode}): {res.stderr.strip()[-500:]}"
                         " (a static libc is in libc6-dev)")
    os.replace(tmp, out)
    return out


def pause_binary(directory: Path | None = None) -> Path:
    """The static pause, compiled from scripts/kubernetes/pause.c when missing or older than it."""
    return static_binary(PAUSE_SOURCE, directory)


def pause_spec(directory: Path | None = None) -> ImageSpec:
    return ImageSpec(
        name=f"{REGISTRY}/pause", tag=PAUSE_TAG,
        entries=[FileEntry(pause_binary(directory), "/pause", 0o755)],
        entrypoint=["/pause"], env=[f"PATH={DEFAULT_PATH}"],
        labels={"org.opencontainers.image.source": "roughnet scripts/kubernetes/pause.c"},
    )


_LDD_LINE = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)\s*$")


def shared_libraries(binary: Path) -> list[str]:
    """Absolute paths of the shared objects ``binary`` loads (the loader included); [] if static."""
    ldd = shutil.which("ldd")
    if ldd is None:
        raise ImageError("ldd is not installed (it comes with libc-bin)")
    res = subprocess.run([ldd, str(binary)], capture_output=True, text=True, check=False)
    out = res.stdout + res.stderr
    if "not a dynamic executable" in out or "statically linked" in out:
        return []
    if res.returncode != 0:
        raise ImageError(f"ldd {binary} failed (exit {res.returncode}): {out.strip()[-300:]}")
    missing = [ln.split()[0] for ln in out.splitlines() if "=> not found" in ln]
    if missing:
        raise ImageError(f"{binary} needs libraries this machine lacks: {', '.join(missing)}")
    return [m.group(1) for ln in out.splitlines() if (m := _LDD_LINE.match(ln))]


def _host_tool(name: str, package: str) -> Path:
    for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return p
    found = shutil.which(name)
    if found is None:
        raise ImageError(f"{name} is not installed (needed for the roughnet image): apt-get install -y {package}")
    return Path(found)


def roughnet_spec() -> ImageSpec:
    entries: list[Entry] = []
    dynamic: list[Path] = []
    for name in ("roughnet-agent", "roughnet-wire"):
        path = find_binary(name)
        if path is None:
            raise ImageError(f"{name} is not built (run `make build`); the roughnet image needs it")
        # Release builds keep debug info (200 MB for the agent): the image gets them without it.
        entries.append(FileEntry(path, f"/usr/local/bin/{name}", 0o755, strip_debug=True))
        dynamic.append(path)
    # iproute2's ip (veth pairs across namespaces, JSON output) and ethtool: the kubernetes backend's wire
    # inside a pod (backends.kubernetes.podwire) needs both; busybox's ip has no netns support.
    for name, package in (("mosquitto", "mosquitto"), ("nats-server", "nats-server"), ("ip", "iproute2"),
                          ("ethtool", "ethtool")):
        path = _host_tool(name, package)
        entries.append(FileEntry(path, str(path), 0o755))
        dynamic.append(path)
    entries.append(FileEntry(static_binary(RN_EXEC_SOURCE), RN_EXEC, 0o755))
    busybox = Path("/bin/busybox")
    if not busybox.is_file():
        raise ImageError("/bin/busybox is missing: apt-get install -y busybox-static")
    entries.append(FileEntry(busybox, "/bin/busybox", 0o755))
    entries += [Symlink(f"/bin/{a}", "busybox") for a in BUSYBOX_APPLETS]
    libs = sorted({lib for b in dynamic for lib in shared_libraries(b)})
    entries += [FileEntry(Path(lib), lib, 0o755) for lib in libs]
    entries += [
        DataEntry(PASSWD.encode(), "/etc/passwd"),
        DataEntry(GROUP.encode(), "/etc/group"),
        DataEntry(NSSWITCH.encode(), "/etc/nsswitch.conf"),
        Directory("/tmp", 0o1777),
        Directory("/root", 0o700),
        Directory("/var/lib/mosquitto"),
        Directory("/run"),
        Directory("/proc"), Directory("/sys"), Directory("/dev"),
    ]
    return ImageSpec(
        name=f"{REGISTRY}/roughnet", tag=__version__, entries=entries,
        cmd=["/usr/local/bin/roughnet-agent", "version"],
        labels={"org.opencontainers.image.version": __version__,
                "org.opencontainers.image.title": "roughnet agent, wire, mosquitto, nats-server"},
    )


def _newest_input(inputs: Sequence[Path]) -> float:
    return max([Path(__file__).stat().st_mtime] + [p.stat().st_mtime for p in inputs if p.exists()])


def _archive_manifest(archive: Path) -> tuple[str, dict]:
    """(manifest digest, manifest) of an archive this module wrote."""
    index = json.loads(_member(archive, "index.json"))
    digest = index["manifests"][0]["digest"]
    return digest, json.loads(_member(archive, "blobs/sha256/" + digest.split(":", 1)[1]))


def build_image(name: str, directory: Path | None = None, force: bool = False) -> BuiltImage:
    """Build image ``name`` (``pause`` or ``roughnet``) unless its archive is up to date.

    Up to date: newer than every input file (and this module); else, when an input only got a
    newer mtime (``make build`` reinstalls bin/ each time), the same config digest (which holds
    the layer's digest) with the same layer type: then the archive is only touched.
    """
    try:
        return _build_image(name, directory, force)
    except OSError as exc:
        raise ImageError(f"building the {name} image in {directory or IMAGES_DIR} failed: {exc}") from exc


def _build_image(name: str, directory: Path | None, force: bool) -> BuiltImage:
    archive = image_archive(name, directory)
    spec = pause_spec(directory) if name == "pause" else roughnet_spec()
    inputs = spec.inputs() + ([PAUSE_SOURCE] if name == "pause" else [RN_EXEC_SOURCE])
    layer = None
    if not force and archive.is_file():
        newest = _newest_input(inputs)
        if archive.stat().st_mtime >= newest:
            digest, _ = _archive_manifest(archive)
            return BuiltImage(spec.ref, archive, archive.stat().st_size, digest, False)
        layer = layer_tar(spec.entries)
        try:
            digest, manifest = _archive_manifest(archive)
            same = (manifest["config"]["digest"] == _digest(image_config(spec, _digest(layer)))
                    and manifest["layers"][0]["mediaType"] == _layer_type(spec))
        except (ImageError, KeyError, IndexError, ValueError):
            same = False
        if same:
            t = max(time.time(), newest)
            os.utime(archive, (t, t))
            return BuiltImage(spec.ref, archive, archive.stat().st_size, digest, False)
    return write_archive(spec, archive, layer)


def build_all(directory: Path | None = None, force: bool = False) -> list[BuiltImage]:
    """Both images (pause, roughnet), each skipped when its archive is newer than its inputs."""
    return [build_image(n, directory, force) for n in ("pause", "roughnet")]


def _member(archive: Path, name: str) -> bytes:
    try:
        with tarfile.open(archive) as tar:
            f = tar.extractfile(name)
            if f is None:
                raise KeyError(name)
            return f.read()
    except (OSError, KeyError, tarfile.TarError) as exc:
        raise ImageError(f"{archive} is not an image archive roughnet wrote ({exc})") from exc
