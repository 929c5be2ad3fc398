"""A user's OCI image run under runc in a network namespace of ours (roughnet.apps.oci, apps.ocibundle).

Two namespaces made here (``rn-ocitest-<hex>`` and ``...-b``, a veth pair between them, 198.18.250.0/24),
busybox test images built here; the container joins namespace A. Checks: it sees only A's interfaces,
the image's Entrypoint/Cmd/Env/WorkingDir apply, /etc/hosts is ours, signals to runc reach the program and
the exit status comes back, iperf3 in the image serves a client in B, kill_container after SIGKILL of runc
leaves nothing, and unpack is cached (times printed; run with -s to see them).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from roughnet.apps import oci, ocibundle

RUNC = shutil.which("runc") or ("/usr/sbin/runc" if os.path.exists("/usr/sbin/runc") else None)
pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(RUNC is None, reason="runc is not installed (apt-get install -y runc, or make cluster)"),
    pytest.mark.skipif(not Path("/bin/busybox").is_file(), reason="busybox-static is not installed"),
]
A_ADDR, B_ADDR = "198.18.250.1", "198.18.250.2"
HOSTS = f"127.0.0.1 localhost\n{A_ADDR} cam\n{B_ADDR} viewer\n"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture(scope="module")
def nets():
    """(namespace A, namespace B, A's veth name); both namespaces removed at the end."""
    tag = secrets.token_hex(3)
    a, b = f"rn-ocitest-{tag}", f"rn-ocitest-{tag}-b"
    made = []
    try:
        for ns in (a, b):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("-n", a, "link", "add", "rnoci0", "type", "veth", "peer", "name", "rnoci1", "netns", b)
        for ns, dev, addr in ((a, "rnoci0", A_ADDR), (b, "rnoci1", B_ADDR)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield a, b, "rnoci0"
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=10, check=False)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("oci")
    yield d
    # containers of failed tests
    for cid in _runc_list(d / "runc"):
        ocibundle.kill_container(cid, d / "runc")


def _runc_list(root: Path) -> list[str]:
    if not root.exists():
        return []
    out = subprocess.run([RUNC, "--root", str(root), "list", "-q"], capture_output=True, text=True, check=False)
    return out.stdout.split()


@pytest.fixture(scope="module")
def shell_image(work):
    path = ocibundle.build_test_image(work / "shell.tar", name="roughnet.local/shell:1", entrypoint=["/bin/sh", "-c"],
                                cmd=['echo "$GREETING from $(pwd) as $(id -u)"; echo to-stderr >&2; exit 3'],
                                env={"GREETING": "hello"}, working_dir="/srv")
    image = oci.load_image(path)
    rootfs, _ = oci.unpack(image, work / "cache")
    return image, rootfs


class Box:
    """One container of a test: its bundle, id and runc process."""

    def __init__(self, work: Path, image, rootfs, netns: str, **kw):
        self.id = f"rn-ocitest-{secrets.token_hex(4)}"
        self.bundle = work / "bundles" / self.id
        self.root = work / "runc"
        args = dict(args=None, entrypoint=None, env={}, cwd=None, uid=None, gid=None, hosts=HOSTS,
                    resolv="options timeout:1 attempts:1\n", hostname="cam")
        args.update(kw)
        ocibundle.prepare_bundle(image, rootfs, self.bundle, netns=netns, **args)
        self.out, self.err = self.bundle / "stdout", self.bundle / "stderr"

    def start(self) -> subprocess.Popen:
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.t0 = time.monotonic()
            self.proc = subprocess.Popen(ocibundle.run_argv(self.bundle, self.id, self.root), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=err)
        return self.proc

    def wait_running(self, timeout: float = 10.0) -> float:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ocibundle.container_state(self.id, self.root) == "running":
                return time.monotonic() - self.t0
            assert self.proc.poll() is None, self.err.read_text()
            time.sleep(0.005)
        raise AssertionError(f"container {self.id} not running after {timeout} s")

    def run(self, timeout: float = 20.0) -> tuple[int, str, str]:
        self.start()
        rc = self.proc.wait(timeout=timeout)
        return rc, self.out.read_text(), self.err.read_text()

    def close(self) -> None:
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            ocibundle.kill_container(self.id, self.root, bundle=self.bundle)
            self.proc.wait(timeout=10)
        ocibundle.remove_bundle(self.bundle)


@pytest.fixture
def boxes(work):
    made: list[Box] = []

    def make(image, rootfs, netns, **kw) -> Box:
        made.append(Box(work, image, rootfs, netns, **kw))
        return made[-1]

    yield make
    for box in made:
        box.close()


def test_sees_only_its_namespace(nets, shell_image, boxes):
    a, _, veth = nets
    image, rootfs = shell_image
    box = boxes(image, rootfs, a, args=["cat /proc/net/dev; ip -o addr; ls /sys/class/net"])
    rc, out, err = box.run()
    assert rc == 0, err
    devs = {ln.split(":")[0].strip() for ln in out.splitlines() if ":" in ln and "|" not in ln and "inet" not in ln}
    assert {"lo", veth} <= devs
    host = {ln.split(":")[0].strip() for ln in Path("/proc/net/dev").read_text().splitlines()[2:]}
    assert not (host - {"lo"}) & devs, f"host interfaces seen inside: {(host - {'lo'}) & devs}"
    assert f"inet {A_ADDR}/24" in out
    assert out.split()[-2:] == sorted(["lo", veth])  # /sys/class/net is the namespace's (sysfs mounted in it)


def test_image_config_and_output_fds(nets, shell_image, boxes):
    image, rootfs = shell_image
    box = boxes(image, rootfs, nets[0])
    rc, out, err = box.run()
    assert (rc, out, err) == (3, "hello from /srv as 0\n", "to-stderr\n")
    cfg = json.loads((box.bundle / "config.json").read_text())
    assert cfg["process"]["args"][-3:-1] == ["/bin/sh", "-c"]  # the image's entrypoint (after the init, if any)
    box2 = boxes(image, rootfs, nets[0], args=['echo "$GREETING $EXTRA from $(pwd) as $(id -u):$(id -g)"'],
                 env={"GREETING": "hi", "EXTRA": "there"}, cwd="/tmp", uid=65534, gid=65534)
    rc, out, err = box2.run()
    assert (rc, out) == (0, "hi there from /tmp as 65534:65534\n"), err


def test_hosts_resolv_hostname_and_writable_rootfs(nets, shell_image, boxes):
    image, rootfs = shell_image
    box = boxes(image, rootfs, nets[0], args=[
        "cat /etc/hosts; echo ---; cat /etc/resolv.conf; echo ---; hostname; echo ---;"
        " echo new > /bin/made-here && cat /bin/made-here; rm /bin/ls && echo removed;"
        " echo x >> /etc/hosts 2>/dev/null || echo hosts-readonly"])
    rc, out, err = box.run()
    assert rc == 0, err
    hosts, resolv, name, rest = out.split("---\n")
    assert hosts == HOSTS and resolv == "options timeout:1 attempts:1\n" and name == "cam\n"
    assert rest == "new\nremoved\nhosts-readonly\n"
    # the container's changes went to the bundle's upper layer, not to the cached root filesystem
    assert (rootfs / "bin" / "ls").is_symlink() and not (rootfs / "bin" / "made-here").exists()
    assert (box.bundle / "overlay" / "upper" / "bin" / "made-here").read_text() == "new\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_reach_the_program_and_the_status_comes_back(nets, shell_image, boxes, sig):
    image, rootfs = shell_image
    # a program with a handler, without an init: PID 1 gets the signal runc forwards
    box = boxes(image, rootfs, nets[0], init=False,
                args=["trap 'echo caught; exit 42' TERM INT; echo ready; sleep 60 & wait"])
    box.start()
    box.wait_running()
    _wait_for(lambda: "ready" in box.out.read_text())
    box.proc.send_signal(sig)
    assert box.proc.wait(timeout=10) == 42 and box.out.read_text() == "ready\ncaught\n"
    assert ocibundle.container_state(box.id, box.root) is None  # runc run removed it on exit
    if ocibundle.find_init() is None:
        pytest.skip("tini-static not installed (apt-get install tini): no init for a handler-less program")
    # a program without a handler, behind the init (tini-static): it dies of the signal, 128+n comes back
    box2 = boxes(image, rootfs, nets[0], init=True, args=["exec sleep 60"])
    box2.start()
    box2.wait_running()
    time.sleep(0.2)
    box2.proc.send_signal(sig)
    assert box2.proc.wait(timeout=10) == 128 + sig


def test_without_init_a_handlerless_pid1_ignores_sigterm(nets, shell_image, boxes):
    image, rootfs = shell_image
    box = boxes(image, rootfs, nets[0], init=False, args=["exec sleep 60"])
    box.start()
    box.wait_running()
    box.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert box.proc.poll() is None and ocibundle.container_state(box.id, box.root) == "running"
    ocibundle.kill_container(box.id, box.root, bundle=box.bundle)
    assert box.proc.wait(timeout=10) == 128 + signal.SIGKILL


def _wait_for(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


@pytest.mark.skipif(not os.path.exists("/usr/bin/iperf3"), reason="iperf3 is not installed")
def test_iperf3_server_in_the_image_serves_a_client_in_the_other_namespace(nets, work, boxes):
    a, b, _ = nets
    path = ocibundle.build_test_image(work / "iperf3.tar", name="roughnet.local/iperf3:1", entrypoint=["/usr/bin/iperf3"],
                                cmd=["-s"], binaries=["/usr/bin/iperf3"])
    image = oci.load_image(path)
    cache = work / "cache-iperf3"
    t0 = time.monotonic()
    rootfs, now = oci.unpack(image, cache)
    first = time.monotonic() - t0
    t0 = time.monotonic()
    again, now2 = oci.unpack(image, cache)
    cached = time.monotonic() - t0
    assert now and not now2 and again == rootfs
    size = sum(p.stat().st_size for p in rootfs.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"\nunpack {image.source.name} ({len(image.layers)} layer, {size / 1e6:.1f} MB unpacked): "
          f"first {first * 1000:.1f} ms, cached {cached * 1000:.2f} ms")
    box = boxes(image, rootfs, a, args=["-s", "-1", "-B", A_ADDR, "--forceflush"])
    box.start()
    started = box.wait_running()
    _wait_for(lambda: "Server listening" in box.out.read_text())
    listening = time.monotonic() - box.t0
    print(f"iperf3 container: running after {started * 1000:.0f} ms, listening after {listening * 1000:.0f} ms")
    res = subprocess.run(["ip", "netns", "exec", b, "iperf3", "-c", A_ADDR, "-t", "1", "-J"], capture_output=True,
                         text=True, timeout=30, check=False)
    assert res.returncode == 0, res.stdout[-500:] + res.stderr
    bps = json.loads(res.stdout)["end"]["sum_received"]["bits_per_second"]
    print(f"iperf3 B -> container in A: {bps / 1e9:.2f} Gbit/s")
    assert bps > 1e6
    assert box.proc.wait(timeout=10) == 0  # -1: the server exits after its one client


def test_kill_container_after_runc_was_sigkilled_leaves_nothing(nets, shell_image, boxes):
    image, rootfs = shell_image
    box = boxes(image, rootfs, nets[0], args=["exec sleep 600"])
    box.start()
    box.wait_running()
    # the overlay lives in the wrapper's private mount namespace only, never in ours
    assert str(box.bundle) not in Path("/proc/self/mounts").read_text()
    state = json.loads(subprocess.run([RUNC, "--root", str(box.root), "state", box.id], capture_output=True,
                                      text=True, check=True).stdout)
    pid = state["pid"]
    box.proc.kill()  # as if roughnet and its runc were SIGKILLed
    box.proc.wait(timeout=10)
    assert ocibundle.container_state(box.id, box.root) == "running" and os.path.exists(f"/proc/{pid}")
    ocibundle.kill_container(box.id, box.root, bundle=box.bundle)
    assert ocibundle.container_state(box.id, box.root) is None and box.id not in _runc_list(box.root)
    assert str(box.bundle) not in Path("/proc/self/mounts").read_text()
    _wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=5)
    assert not any(str(box.bundle) in _cmdline(p) for p in os.listdir("/proc") if p.isdigit())
    ocibundle.kill_container(box.id, box.root, bundle=box.bundle)  # already gone: quiet


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_start_time(nets, shell_image, boxes):
    image, rootfs = shell_image
    times = []
    for _ in range(5):
        box = boxes(image, rootfs, nets[0], args=["exit 0"])
        t0 = time.monotonic()
        rc, _, err = box.run()
        times.append(time.monotonic() - t0)
        assert rc == 0, err
    print(f"\ncontainer start-to-exit ('exit 0', 5 runs): {', '.join(f'{t * 1000:.0f}' for t in times)} ms")
