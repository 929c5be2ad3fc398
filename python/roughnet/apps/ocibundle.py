"""Running an unpacked OCI image under runc in a host's network namespace, and cleaning up after it.

This module owns the runtime side of ``[[process]] image = "..."`` (the image side is
:mod:`roughnet.apps.oci`):

- :func:`prepare_bundle` writes an OCI runtime bundle (``config.json``, runtime spec 1.0.2, as runc 1.1.5
  takes it): the process (entrypoint/cmd/env/cwd/user, no terminal), namespaces mount, pid, ipc, uts and
  the host's existing network namespace by path (``/run/netns/<ns>``: runc joins it, no new one), runc's
  default mounts, capabilities and masked paths, ``/etc/hosts`` and ``/etc/resolv.conf`` bind-mounted
  read-only from files of the bundle, the caller's bind mounts, and ``cgroupsPath`` ``/roughnet/<id>``.
- Capabilities: runc's default set (``runc spec``: AUDIT_WRITE, KILL, NET_BIND_SERVICE) plus
  CAP_NET_RAW, so ``ping`` and raw-socket tools work in the emulated network (Docker grants it too).
- A writable root filesystem without touching the cached one: an overlayfs (lower = the cached rootfs,
  upper and work in ``<bundle>/overlay``) mounted on ``<bundle>/rootfs`` by a small wrapper
  (``<bundle>/roughnet-run.py``, stdlib only) that first moves itself into a private mount namespace and
  then execs ``runc run``. The overlay exists only in that namespace (and the container's, cloned from
  it), so the kernel drops it when the last process in it exits: nothing is ever mounted in the root mount
  namespace, even when roughnet is SIGKILLed. The container's changes stay in ``overlay/upper`` until
  :func:`remove_bundle`.
- An init: when Debian's static tini (``tini-static``, package ``tini``) is installed it is bind-mounted
  as ``/dev/roughnet-init`` and runs as PID 1 in front of the program (as ``docker run --init``): a PID 1
  without a handler ignores SIGTERM and SIGINT, so without an init such programs end only by SIGKILL.
- :func:`run_argv`: the argv to start with ``subprocess.Popen`` (wrapper + ``runc run``, foreground):
  runc stays the process roughnet holds, forwards the signals it gets to the container's PID 1 and exits
  with the container's status (128+n after death by signal n); the container writes to the fds given to
  Popen. Wrapper failures (overlay mount) exit 125 with a message on stderr.
- :func:`container_state`, :func:`kill_container` (after roughnet was SIGKILLed: runc kill KILL, wait,
  runc delete --force, unmount leftovers under the bundle) and :func:`remove_bundle`.
- :func:`pack_image` (``roughnet image pack``; :func:`build_test_image` for tests): a small reproducible image
  made here (busybox-static plus host binaries and their libraries); it reuses the archive writer of
  :mod:`roughnet.kube.image`.

Library code: logs, raises :class:`~roughnet.apps.oci.ImageError`, never prints.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .oci import DEFAULT_PATH, Image, ImageError, load_image, resolve_in

log = logging.getLogger(__name__)

RUNC_ROOT = Path("/run/roughnet/runc")
#: runc 1.1.5's `runc spec` set, plus CAP_NET_RAW (ping, raw sockets, packet capture inside the container).
RUNC_DEFAULT_CAPS = ("CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE")
CAPABILITIES = RUNC_DEFAULT_CAPS + ("CAP_NET_RAW",)
INIT_IN_CONTAINER = "/dev/roughnet-init"
WRAPPER = "roughnet-run.py"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")

#: Runs as `python -I -S <bundle>/roughnet-run.py <bundle> <runc argv...>`: private mount namespace,
#: overlay on <bundle>/rootfs, exec runc. Standard library only (no roughnet import: starts in ~20 ms).
WRAPPER_SOURCE = r'''"""roughnet: this bundle's overlay in a private mount namespace, then exec runc (argv[2:])."""
import ctypes, json, os, sys
CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x00020000, 0x4000, 1 << 18
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def fail(what):
    err = ctypes.get_errno()
    sys.stderr.write("roughnet-run: %s: %s\n" % (what, os.strerror(err)))
    sys.exit(125)


bundle = sys.argv[1]
with open(os.path.join(bundle, "overlay.json")) as f:
    ov = json.load(f)
if libc.unshare(CLONE_NEWNS) != 0:
    fail("unshare(CLONE_NEWNS)")
if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
    fail("making the mount namespace private")
opts = "lowerdir=%s,upperdir=%s,workdir=%s" % (ov["lower"], ov["upper"], ov["work"])
if libc.mount(b"overlay", ov["target"].encode(), b"overlay", 0, opts.encode()) != 0:
    fail("mounting the overlay on %s (%s)" % (ov["target"], opts))
os.execv(sys.argv[2], sys.argv[2:])
'''

_MASKED = ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
           "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"]
_READONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
_DEFAULT_MOUNTS = [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
     "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
     "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
     "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
    {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
    {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
     "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
]


def runc_path() -> str:
    """runc's path, or an ImageError saying how to install it."""
    found = shutil.which("runc") or next((p for p in ("/usr/sbin/runc", "/usr/bin/runc")
                                          if os.access(p, os.X_OK)), None)
    if found is None:
        raise ImageError("runc is not installed (needed to run a process's image): apt-get install -y runc "
                         "(or `make cluster`, which installs it)")
    return found


def find_init() -> str | None:
    """A static init to run as the container's PID 1 (Debian's tini-static), or None."""
    for p in (shutil.which("tini-static"), "/usr/bin/tini-static"):
        if p and os.access(p, os.X_OK):
            return p
    return None


def _passwd(rootfs: Path, name: str) -> list[list[str]]:
    p = resolve_in(str(rootfs), f"etc/{name}")
    if p is None or not os.path.isfile(p):
        return []
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            return [ln.rstrip("\n").split(":") for ln in f if ln.strip() and not ln.startswith("#")]
    except OSError:
        return []


def resolve_user(image: Image, rootfs: Path, uid: int | None, gid: int | None) -> dict:
    """The runtime spec's ``process.user``: ``uid``/``gid`` when given, else the image's ``User``
    ("name", "uid", "name:group", "uid:gid"; names looked up in the rootfs' /etc/passwd and /etc/group)."""
    passwd = [e for e in _passwd(rootfs, "passwd") if len(e) >= 4]
    groups = [e for e in _passwd(rootfs, "group") if len(e) >= 3]
    where = f"{image.source}: image user {image.user!r}"
    user_name: str | None = None
    if uid is None:
        spec_user, _, spec_group = (image.user or "0").partition(":")
        if spec_user.isdigit():
            uid = int(spec_user)
        else:
            hit = next((e for e in passwd if e[0] == spec_user), None)
            if hit is None:
                raise ImageError(f"{where}: no user {spec_user!r} in the image's /etc/passwd")
            uid, user_name = int(hit[2]), spec_user
            if not spec_group and gid is None:
                gid = int(hit[3])
        if spec_group and gid is None:
            if spec_group.isdigit():
                gid = int(spec_group)
            else:
                ghit = next((g for g in groups if g[0] == spec_group), None)
                if ghit is None:
                    raise ImageError(f"{where}: no group {spec_group!r} in the image's /etc/group")
                gid = int(ghit[2])
    if gid is None:  # as Docker: the primary group of that uid in the image, else 0
        hit = next((e for e in passwd if e[2] == str(uid)), None)
        gid = int(hit[3]) if hit and hit[3].isdigit() else 0
    if user_name is None:
        hit = next((e for e in passwd if e[2] == str(uid)), None)
        user_name = hit[0] if hit else None
    user: dict = {"uid": uid, "gid": gid}
    extra = sorted({int(g[2]) for g in groups if user_name and len(g) >= 4 and user_name in g[3].split(",")
                    and g[2].isdigit() and int(g[2]) != gid})
    if extra:
        user["additionalGids"] = extra
    return user


def _env(image: Image, env: dict[str, str]) -> list[str]:
    merged: dict[str, str] = {}
    for e in image.env:
        k, _, v = e.partition("=")
        merged[k] = v
    merged.update(env)
    merged.setdefault("PATH", DEFAULT_PATH)
    return [f"{k}={v}" for k, v in merged.items()]


def _check_overlay_path(p: Path) -> str:
    s = str(p)
    if any(c in s for c in ",:\\\n"):
        raise ImageError(f"{s}: overlayfs cannot take a path with ',', ':' or '\\' (choose another place)")
    return s


def image_argv(image: Image, args: Sequence[str] | None, entrypoint: Sequence[str] | None) -> list[str]:
    """The program a container of ``image`` runs: ``args``/``entrypoint`` override the image's Cmd/Entrypoint as
    ``docker run`` does (a given entrypoint drops the image's Cmd); ImageError when there is nothing to run."""
    ep = list(entrypoint) if entrypoint is not None else list(image.entrypoint)
    if entrypoint is not None:
        tail = list(args) if args is not None else []
    else:
        tail = list(args) if args is not None else list(image.cmd)
    argv = ep + tail
    if not argv:
        raise ImageError(f"{image.source}: the image has no Entrypoint or Cmd, and no command was given")
    return argv


def prepare_bundle(image: Image, rootfs: Path, bundle: Path, *, netns: str, args: list[str] | None,
                   entrypoint: list[str] | None, env: dict[str, str], cwd: str | None, uid: int | None,
                   gid: int | None, hosts: str, resolv: str, binds: Sequence[tuple[str, str, bool]] = (),
                   hostname: str | None = None, init: bool | None = None, container_id: str | None = None) -> None:
    """Write the runtime bundle ``bundle`` for ``image`` unpacked at ``rootfs`` (see the module docstring).

    ``args``/``entrypoint`` override the image's Cmd/Entrypoint as ``docker run`` does: a given entrypoint
    drops the image's Cmd. ``init``: None = tini-static when installed, True = required, False = none.
    ``container_id``: names the cgroup ``/roughnet/<id>`` (default: the bundle folder's name).
    """
    rootfs, bundle = Path(rootfs).resolve(), Path(bundle).absolute()
    if not (rootfs / ".").is_dir():
        raise ImageError(f"{rootfs}: not an unpacked root filesystem (a directory was expected)")
    if not netns or "/" in netns or netns in (".", ".."):
        raise ImageError(f"network namespace name {netns!r}: expected a name under /run/netns")
    argv = image_argv(image, args, entrypoint)
    workdir = cwd or image.working_dir or "/"
    if not workdir.startswith("/"):
        raise ImageError(f"working directory {workdir!r}: expected an absolute path")
    init_path = find_init() if init is not False else None
    if init and init_path is None:
        raise ImageError("no static init for the container (tini-static): apt-get install -y tini")
    cid = container_id or bundle.name
    if not _ID.match(cid):
        raise ImageError(f"container id {cid!r}: expected letters, digits, '_', '.', '+', '-' (at most 128)")

    mounts = [dict(m) for m in _DEFAULT_MOUNTS]
    files = {"hosts": hosts, "resolv.conf": resolv}
    if hostname:
        files["hostname"] = hostname.rstrip("\n") + "\n"
    for name in files:
        mounts.append({"destination": f"/etc/{name}", "type": "bind", "source": str(bundle / name),
                       "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]})
    for src, dst, readonly in binds:
        if not str(dst).startswith("/"):
            raise ImageError(f"bind mount destination {dst!r}: expected an absolute path in the container")
        if not os.path.exists(src):
            raise ImageError(f"bind mount source {src}: no such file or directory")
        mounts.append({"destination": str(dst), "type": "bind", "source": os.path.abspath(src),
                       "options": ["rbind", "ro" if readonly else "rw"]})
    if init_path:
        mounts.append({"destination": INIT_IN_CONTAINER, "type": "bind", "source": init_path,
                       "options": ["bind", "ro", "nosuid", "nodev"]})
        argv = [INIT_IN_CONTAINER, "--"] + argv

    caps = list(CAPABILITIES)
    config = {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": resolve_user(image, rootfs, uid, gid),
            "args": argv,
            "env": _env(image, env),
            "cwd": workdir,
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps, "ambient": caps},
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": False},
        "mounts": mounts,
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "cgroupsPath": f"/roughnet/{cid}",
            "namespaces": [{"type": "pid"}, {"type": "network", "path": f"/run/netns/{netns}"}, {"type": "ipc"},
                           {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": list(_MASKED),
            "readonlyPaths": list(_READONLY),
        },
    }
    if hostname:
        config["hostname"] = hostname
    overlay = {"lower": _check_overlay_path(rootfs), "upper": _check_overlay_path(bundle / "overlay" / "upper"),
               "work": _check_overlay_path(bundle / "overlay" / "work"), "target": str(bundle / "rootfs")}
    try:
        for d in (bundle, bundle / "rootfs", bundle / "overlay" / "upper", bundle / "overlay" / "work"):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(bundle, 0o711)
        top = rootfs.stat()  # the merged "/" takes the upper directory's owner and mode: make them the image's
        os.chmod(bundle / "overlay" / "upper", top.st_mode & 0o7777)
        if os.geteuid() == 0:
            os.chown(bundle / "overlay" / "upper", top.st_uid, top.st_gid)
        for name, text in files.items():
            (bundle / name).write_text(text)
            os.chmod(bundle / name, 0o644)
        (bundle / "overlay.json").write_text(json.dumps(overlay, indent=1) + "\n")
        (bundle / WRAPPER).write_text(WRAPPER_SOURCE)
        (bundle / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    except OSError as exc:
        raise ImageError(f"cannot write the runtime bundle {bundle}: {exc}") from exc
    log.debug("bundle %s: %s in netns %s, args %s", bundle, image.source, netns, argv)


def run_argv(bundle: Path, container_id: str, runc_root: Path = RUNC_ROOT) -> list[str]:
    """The argv that runs the bundle's container in the foreground (start it with subprocess.Popen).

    Not via ``ip netns exec``: the spec joins the namespace. The wrapper execs runc, so the pid Popen
    returns is runc's: signals sent to it reach the container's PID 1, its exit status is the container's.
    A container id that runc still knows (e.g. after a crash) must go first: :func:`kill_container`.
    """
    if not _ID.match(container_id):
        raise ImageError(f"container id {container_id!r}: expected letters, digits, '_', '.', '+', '-'")
    bundle = Path(bundle).absolute()
    if not (bundle / "config.json").is_file() or not (bundle / WRAPPER).is_file():
        raise ImageError(f"{bundle}: not a runtime bundle (prepare_bundle writes config.json and {WRAPPER})")
    return [sys.executable, "-I", "-S", str(bundle / WRAPPER), str(bundle), runc_path(), "--root", str(runc_root),
            "run", "--bundle", str(bundle), container_id]


def _runc(runc_root: Path, *args: str, timeout: float = 15.0) -> subprocess.CompletedProcess:
    argv = [runc_path(), "--root", str(runc_root), *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"{' '.join(argv)} failed: {exc}") from exc


def _gone(res: subprocess.CompletedProcess) -> bool:
    err = (res.stderr or "").lower()
    return "does not exist" in err or "not exist" in err or "no such file" in err


def _state(container_id: str, runc_root: Path) -> dict | None:
    if not Path(runc_root, container_id).exists():
        return None
    res = _runc(runc_root, "state", container_id)
    if res.returncode != 0:
        if _gone(res):
            return None
        raise ImageError(f"runc state {container_id} failed: {res.stderr.strip()[-300:]}")
    try:
        return json.loads(res.stdout)
    except ValueError as exc:
        raise ImageError(f"runc state {container_id}: unreadable output ({exc})") from exc


def container_state(container_id: str, runc_root: Path = RUNC_ROOT) -> str | None:
    """runc's status of the container ("created", "running", "paused", "stopped"), None if runc does not know it."""
    st = _state(container_id, runc_root)
    return None if st is None else str(st.get("status"))


def _mounts_under(path: Path) -> list[str]:
    prefix = str(Path(path).absolute())
    out = []
    try:
        with open("/proc/self/mounts") as f:
            for ln in f:
                fields = ln.split()
                if len(fields) < 2:
                    continue
                mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
                if mp == prefix or mp.startswith(prefix + "/"):
                    out.append(mp)
    except OSError:
        pass
    return out


def _unmount_under(path: Path) -> None:
    for mp in sorted(_mounts_under(path), key=len, reverse=True):
        log.info("unmounting %s (left under %s)", mp, path)
        res = subprocess.run(["umount", "-l", mp], capture_output=True, text=True, check=False)
        if res.returncode != 0 and _mounts_under(Path(mp)):
            raise ImageError(f"cannot unmount {mp}: {res.stderr.strip()}")


def kill_container(container_id: str, runc_root: Path = RUNC_ROOT, *, bundle: Path | None = None,
                   timeout: float = 10.0) -> None:
    """End and forget the container (e.g. after roughnet was SIGKILLed): runc kill KILL, wait until it
    stopped, runc delete --force; then unmount anything left under its bundle. Quiet if already gone."""
    st = _state(container_id, runc_root)
    if st is not None:
        bundle = bundle or (Path(st["bundle"]) if st.get("bundle") else None)
        if st.get("status") in ("running", "created", "paused"):
            res = _runc(runc_root, "kill", container_id, "KILL")
            if res.returncode != 0 and not _gone(res):
                log.warning("runc kill %s KILL: %s", container_id, res.stderr.strip()[-300:])
        pid = int(st.get("pid") or 0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if container_state(container_id, runc_root) in (None, "stopped") and not _alive(pid):
                break
            time.sleep(0.05)
        res = _runc(runc_root, "delete", "--force", container_id)
        if res.returncode != 0 and not _gone(res):
            raise ImageError(f"runc delete --force {container_id} failed: {res.stderr.strip()[-300:]}")
    if bundle is not None:
        _unmount_under(Path(bundle))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` (the container's init) still exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def remove_bundle(bundle: Path) -> None:
    """Delete the bundle folder (the container's writable layer with it); unmounts leftovers first.
    The container must have ended (its runc process exited, or :func:`kill_container`)."""
    bundle = Path(bundle).absolute()
    if not bundle.exists():
        return
    if not (bundle / "config.json").exists() and not (bundle / "overlay.json").exists():
        raise ImageError(f"{bundle}: not a runtime bundle (no config.json); not removing it")
    _unmount_under(bundle)
    try:
        shutil.rmtree(bundle)
    except OSError as exc:
        raise ImageError(f"cannot remove the bundle {bundle}: {exc}") from exc


# ---- an image built here (roughnet image pack, tests) ----------------------------------------------------------------------

TEST_PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
TEST_GROUP = "root:x:0:\nnogroup:x:65534:\n"


@dataclass(frozen=True)
class PackedImage:
    """An image archive :func:`pack_image` wrote: where, which reference, how big, its digests."""

    path: Path
    ref: str
    size: int
    digest: str  # the manifest's digest (what a registry calls the image's digest)
    config_digest: str  # the config's digest: the unpack cache's key, the record's ``image_info.digest``


_REF = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
                  r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")


def image_name_ok(name: str) -> bool:
    """Whether ``name`` is a reference ``repo[:tag]`` as Docker and OCI tools take it (lowercase repository)."""
    return bool(_REF.match(name))


def pack_image(out: Path, *, name: str, entrypoint: Sequence[str], cmd: Sequence[str] = (),
               env: dict[str, str] | None = None, working_dir: str = "/",
               binaries: Sequence[str] = ()) -> PackedImage:
    """An OCI image archive at ``out`` built here, without a registry (``roughnet image pack``).

    Debian's busybox-static as /bin/busybox with its common applets as symlinks, each host binary of
    ``binaries`` at its host path with the shared libraries ``ldd`` lists (the dynamic loader too),
    /etc/passwd (root, nobody), /etc/group, /tmp (1777) and ``working_dir``; Env ``PATH`` plus ``env``.
    ``name``: "repo[:tag]" (tag default "latest"). Reproducible: the same inputs give the same bytes.
    ``entrypoint[0]`` must be in the image: one of ``binaries``, /bin/busybox or one of its applets (a
    name without '/' is looked up in the image's PATH).
    """
    from ..kube import image as kimg

    if not entrypoint:
        raise ImageError("an image needs an entrypoint (the program the container runs)")
    if not image_name_ok(name):
        raise ImageError(f"image name {name!r}: expected repo[:tag], e.g. roughnet.local/iperf3:1 "
                         "(lowercase letters, digits, '.', '_', '-', '/')")
    if not working_dir.startswith("/"):
        raise ImageError(f"working directory {working_dir!r}: expected an absolute path")
    busybox = Path("/bin/busybox")
    if not busybox.is_file():
        raise ImageError("/bin/busybox is missing (every image gets Debian's busybox-static): "
                         "apt-get install -y busybox-static (or `make cluster`, which installs it)")
    repo, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, ":", "latest")
    entries: list = [kimg.FileEntry(busybox, "/bin/busybox", 0o755)]
    entries += [kimg.Symlink(f"/bin/{a}", "busybox") for a in kimg.BUSYBOX_APPLETS]
    programs = {"/bin/busybox"} | {f"/bin/{a}" for a in kimg.BUSYBOX_APPLETS}
    try:
        libs: set[str] = set()
        for b in binaries:
            p = Path(b)
            if not p.is_absolute() or not p.is_file():
                raise ImageError(f"binary {b}: expected the absolute path of a file on this machine")
            if not os.access(p, os.X_OK):
                raise ImageError(f"binary {b}: not executable")
            entries.append(kimg.FileEntry(p, str(p), 0o755))
            programs.add(os.path.normpath(str(p)))
            libs.update(kimg.shared_libraries(p))
        entries += [kimg.FileEntry(Path(lib), lib, 0o755) for lib in sorted(libs)]
        entries += [kimg.DataEntry(TEST_PASSWD.encode(), "/etc/passwd"),
                    kimg.DataEntry(TEST_GROUP.encode(), "/etc/group"),
                    kimg.Directory("/tmp", 0o1777), kimg.Directory("/root", 0o700), kimg.Directory("/proc"),
                    kimg.Directory("/sys"), kimg.Directory("/dev"), kimg.Directory("/etc"), kimg.Directory("/run")]
        if working_dir.strip("/"):
            entries.append(kimg.Directory(working_dir))
        envs = {"PATH": DEFAULT_PATH}
        envs.update(env or {})
        first = entrypoint[0]
        path_dirs = envs["PATH"].split(":")
        found = (os.path.normpath(first) in programs if "/" in first
                 else any(os.path.join(d, first) in programs for d in path_dirs))
        if not found:
            raise ImageError(f"entrypoint {first!r} is not in the image (not one of its binaries, nor busybox or "
                             f"one of its applets{'' if '/' in first else ' in its PATH'})")
        spec = kimg.ImageSpec(name=repo, tag=tag, entries=entries, entrypoint=list(entrypoint),
                              cmd=list(cmd) or None, env=[f"{k}={v}" for k, v in envs.items()],
                              working_dir=working_dir)
        built = kimg.write_archive(spec, Path(out))
    except kimg.ImageError as exc:
        raise ImageError(str(exc)) from exc
    return PackedImage(built.path, built.ref, built.size, built.manifest_digest, load_image(built.path).digest)


def build_test_image(out: Path, *, name: str, entrypoint: Sequence[str], cmd: Sequence[str] = (),
                     env: dict[str, str] | None = None, working_dir: str = "/",
                     binaries: Sequence[str] = ()) -> Path:
    """:func:`pack_image` for tests: the archive's path."""
    return pack_image(out, name=name, entrypoint=entrypoint, cmd=cmd, env=env, working_dir=working_dir,
                      binaries=binaries).path
