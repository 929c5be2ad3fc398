"""The ``wire`` engine: roughnet-wire, the userspace link emulator, on a relayed link.

Owns turning a ``runspec.Link`` into roughnet-wire's LinkConfig JSON (both
directions, a named profile merged under the explicit values), starting one
roughnet-wire per link inside the link namespace (``Topology.link_ns(i)``,
between ``Topology.relay_ifaces(i)``; for a shared segment on all of
``Topology.relay_ports(i)``, each with its host's MAC), waiting for its ``ready`` line, asking
its control socket for counters, and turning its ``stats`` line into the
engine counters the runner records.  It does not decide which links get the
wire (``links.choose``), build the relayed topology (``topo.build``) or stop
the process at the end of a run (``Topology.teardown`` stops every ledgered
process; ``counters`` is called before that).

Direction mapping: ``forward`` (hosts[0] -> hosts[1]) is the wire's
``a_to_b``: ``--if-a`` is the relay interface towards hosts[0].  On a shared
segment ``forward`` (``a_to_b``) is every port's uplink (host into the
segment) and ``reverse`` (``b_to_a``) every port's downlink; the counters then
also have ``ports`` (per host: ``uplink`` and ``downlink``) and ``forwarding``.

Profiles: ``roughnet-wire --print-profile NAME`` prints the profile's
LinkConfig; a direction field the scenario sets to something other than its
default replaces the profile's value for that field (so "loss 0 %" cannot
switch off a profile's loss: leave the profile out instead).

The config goes to the wire on its stdin (``--config -``), so no file is left
behind; the control socket lives next to the run's ledger
(``<ledger dir>/../wire/<token>-l<i>.sock``, i.e. ``/run/roughnet/wire/``) and the wire removes it at exit.
When that path would be too long for a Unix socket (a ledger folder given deep in a test tree), the socket
goes to ``/run/roughnet/wire/`` (``PRIVATE_SOCKET_DIR``) instead, never to a shared temp folder: whoever can
write the socket's folder can replace the socket and answer the runner's commands (issue 26). Either folder
is created with mode 0700; one that exists already must be a real folder (not a symlink) owned by root or
the running user and not writable by group or others, else the run stops with a ``LinkError`` naming it.
"""

from __future__ import annotations

import collections
import json
import logging
import queue
import os
import socket
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..binaries import find_binary
from ..errors import LinkError
from ..runspec import Direction, Link
from ..topo.build import ROLE_A, ROLE_B, ROLE_MEMBER, ROLE_PORT, ROLE_RELAY_A, ROLE_RELAY_B, Topology
from ..topo.system import ns_exec, run_cmd
from .base import loss_randomness

log = logging.getLogger(__name__)

#: How long roughnet-wire may take from start to its ready line (it opens two sockets and binds one).
READY_TIMEOUT_S = 10.0
#: How long a control-socket request may take (the loop answers between frames, within a few ms).
CONTROL_TIMEOUT_S = 5.0
#: Drop reasons roughnet-wire counts (wire-core's DropReason, snake_case).
DROP_REASONS = ("loss", "frame_error", "queue_full", "too_large", "overrun", "link_down")
#: Unix socket paths are limited to 108 bytes (sun_path); past this we fall back to PRIVATE_SOCKET_DIR.
MAX_SOCKET_PATH = 100
#: The control sockets' folder when the one next to the ledger makes too long a path (root's, mode 0700).
PRIVATE_SOCKET_DIR = Path("/run/roughnet/wire")

#: ethtool features turned off on a relayed link's interfaces (see WireEngine._checksums_in_software).
CHECKSUM_OFFLOADS_OFF = ("tx", "off", "rx", "off")

_DEFAULT = Direction()


def wire_binary() -> Path:
    path = find_binary("roughnet-wire")
    if path is None:
        raise LinkError("roughnet-wire is not built; expected it in $ROUGHNET_WIRE, <repo>/bin, the cargo target "
                        "or PATH (run `make build`)")
    return path


@lru_cache(maxsize=None)
def _profile_json(binary: str, name: str) -> str:
    try:
        proc = subprocess.run([binary, "--print-profile", name], capture_output=True, text=True, timeout=10,
                              check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LinkError(f"{binary} --print-profile {name}: {e}") from e
    for line in proc.stdout.splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if obj.get("type") == "error":
            raise LinkError(f"wire profile {name!r}: {obj.get('message')}")
        if "a_to_b" in obj:
            return line
    raise LinkError(f"{binary} --print-profile {name} printed no profile (exit {proc.returncode}): "
                    f"{(proc.stderr or proc.stdout).strip()[-300:]}; expected a roughnet-wire with --print-profile")


def load_profile(name: str, binary: Path | None = None) -> dict[str, Any]:
    """The named profile's LinkConfig (a fresh dict), as roughnet-wire defines it."""
    return json.loads(_profile_json(str(binary or wire_binary()), name))


def direction_config(d: Direction) -> dict[str, Any]:
    """The explicit (non-default) fields of ``d`` as wire-core DirectionConfig keys."""
    out: dict[str, Any] = {}
    if d.rate_bps is not None:
        out["rate_bps"] = int(d.rate_bps)
    simple = ("delay_ns", "jitter_ns", "jitter_dist", "jitter_correlation", "allow_reorder", "reorder",
              "reorder_gap", "duplicate", "corrupt", "overhead_bytes")
    for key in simple:
        value = getattr(d, key)
        if value != getattr(_DEFAULT, key):
            out[key] = value
    if d.loss_model is not None:
        out["loss"] = dict(d.loss_model)
    elif d.loss:
        out["loss"] = {"model": "bernoulli", "p": float(d.loss)}
    if d.queue_packets is not None:
        out["queue_packets"] = int(d.queue_packets)
    if d.queue_bytes is not None:
        out["queue_bytes"] = int(d.queue_bytes)
    if d.capacity_trace is not None:  # Mahimahi's opportunities serialise instead of a rate (wire-models.md)
        from ..spec.capacity import read_mahimahi

        try:
            out["delivery_trace"] = {"opportunities_ms": read_mahimahi(Path(d.capacity_trace))}
        except ValueError as e:
            raise LinkError(f"capacity_trace: {e}") from None
    return out


def link_config(link: Link, profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """roughnet-wire's LinkConfig for ``link``: ``profile`` (a LinkConfig) under the explicit values.

    ``mtu`` is the link's MTU in both directions (the interfaces carry the same
    MTU, so only a frame the kernel would not send is refused).
    """
    base: dict[str, Any] = json.loads(json.dumps(profile)) if profile else {}
    cfg: dict[str, Any] = {}
    for wire_dir, d in (("a_to_b", link.forward), ("b_to_a", link.reverse)):
        merged = dict(base.get(wire_dir) or {})
        merged = {k: v for k, v in merged.items() if v is not None}
        merged.update(direction_config(d))
        if "delivery_trace" in merged:
            merged.pop("rate_bps", None)  # the trace is the direction's capacity (a profile's rate goes)
        merged["mtu"] = int(link.mtu)
        cfg[wire_dir] = merged
    if link.half_duplex is not None:  # key by key over the profile's medium, as the directions are
        under = {k: v for k, v in (base.get("half_duplex") or {}).items() if v is not None}
        cfg["half_duplex"] = {**under, **dict(link.half_duplex)}
    elif base.get("half_duplex") is not None:
        cfg["half_duplex"] = base["half_duplex"]
    if link.medium == "csma":  # ns-3's CSMA channel with ns-3's backoff defaults (wire-core csma.rs)
        cfg["csma"] = {}
    if link.schedule:
        # Each change replaces a direction's whole configuration: the profile goes under it as under the link.
        cfg["schedule"] = []
        for change in link.schedule:
            c = dict(change)
            for wire_dir in ("a_to_b", "b_to_a"):
                if isinstance(c.get(wire_dir), dict):
                    under = {k: v for k, v in (base.get(wire_dir) or {}).items() if v is not None}
                    c[wire_dir] = {**under, **c[wire_dir], "mtu": int(link.mtu)}
            cfg["schedule"].append(c)
    elif base.get("schedule"):
        cfg["schedule"] = base["schedule"]
    if link.positions:  # the hosts' positions give every distance (docs/wire-models.md "Per-pair links")
        cfg["positions"] = [[dict(p) for p in port] for port in link.positions]
    elif link.distance_trace:
        cfg["distance_trace"] = [dict(p) for p in link.distance_trace]
    elif base.get("distance_trace"):
        cfg["distance_trace"] = base["distance_trace"]
    return cfg


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def direction_counters(d: dict[str, Any], configured: dict[str, Any]) -> dict[str, Any]:
    """One direction of a ``stats`` line as engine counters (the keys every engine has, then the wire's own)."""
    drops = d.get("drops") or {}
    sched = d.get("sched_error") or {}
    io = d.get("io") or {}
    send_errors = io.get("send_errors") or {}
    out: dict[str, Any] = {f"drops_{reason}": int(drops.get(reason, 0)) for reason in DROP_REASONS}
    # The two every engine has (set after the per-reason keys: ``drops_loss`` is also the name of the
    # ``loss`` reason, which on its own would leave out the frame-error models' drops).
    # What a random decision of the link model dropped (loss models and frame-error models).
    out["drops_loss"] = int(drops.get("loss", 0)) + int(drops.get("frame_error", 0))
    # What a full buffer dropped (the drop-tail queue, the half-duplex modem's buffer).
    out["drops_queue"] = int(drops.get("queue_full", 0)) + int(drops.get("overrun", 0))
    out["tx_packets"] = int(d.get("packets_out", 0))
    out["tx_bytes"] = int(d.get("bytes_out", 0))
    out["rx_packets"] = int(d.get("packets_in", 0))
    out["rx_bytes"] = int(d.get("bytes_in", 0))
    for key in ("duplicated", "corrupted", "reordered", "queue_high_packets", "queue_high_bytes", "held_packets"):
        out[key] = int(d.get(key, 0))
    out["sched_error_count"] = int(sched.get("count", 0))
    for q in ("p50", "p99", "max"):
        out[f"sched_error_{q}_us"] = _num(sched.get(f"{q}_us"))
    out["sched_late_fraction"] = _num(sched.get("late_fraction"))
    out["rx_kernel_drops"] = int(io.get("rx_kernel_drops", 0))
    out["rx_truncated"] = int(io.get("rx_truncated", 0))
    out["send_errors"] = sum(int(v) for v in send_errors.values() if isinstance(v, int))
    out["up"] = bool(d.get("up", True))
    # What was asked, so the validity verdict can judge the scheduling error against it.
    out["configured_delay_ns"] = int(configured.get("delay_ns", 0) or 0)
    out["configured_jitter_ns"] = int(configured.get("jitter_ns", 0) or 0)
    return out


def counters_from_stats(stats: dict[str, Any], config: dict[str, Any],
                        hosts: tuple[str, ...] | list[str] | None = None) -> dict[str, Any]:
    """The engine counters of a whole ``stats`` line (``forward`` = a_to_b, ``reverse`` = b_to_a).

    A shared segment's line (``"segment": true``) also gives ``ports``: per
    host (``hosts`` in port order; ``port<i>`` without them) its ``uplink``
    (forward) and ``downlink`` (reverse) counters, and ``forwarding`` (frames
    sent to one port, flooded, filtered; copies made).  Its departures are all
    downlink departures, so its scheduling error is under ``reverse``.
    """
    out: dict[str, Any] = {
        "engine": "wire",
        "forward": direction_counters(stats.get("a_to_b") or {}, config.get("a_to_b") or {}),
        "reverse": direction_counters(stats.get("b_to_a") or {}, config.get("b_to_a") or {}),
        "half_duplex": config.get("half_duplex") is not None,
        "csma": config.get("csma") is not None,
        # the CSMA medium's backoffs (a ready frame found the channel busy) and aborted frames
        **{f"csma_{k}": int(v) for k, v in ((stats.get("link") or {}).get("csma") or {}).items()},
        "uptime_s": _num(stats.get("uptime_s")),
        "seed": stats.get("seed"),
        **loss_randomness("wire"),  # seeded: the same run id and seed lose the same frames
        "threads": int(stats.get("threads") or 1),  # forwarding threads (wire_threads)
    }
    ports = stats.get("ports")
    if stats.get("segment") and isinstance(ports, list):
        per_port: dict[str, Any] = {}
        for i, p in enumerate(ports):
            if not isinstance(p, dict):
                continue
            name = hosts[i] if hosts is not None and i < len(hosts) else f"port{i}"
            down = dict(p.get("downlink") or {})
            down["sched_error"] = p.get("sched_error") or {}
            down["io"] = p.get("io") or {}
            up = dict(p.get("uplink") or {})
            up["io"] = {"rx_kernel_drops": (p.get("io") or {}).get("rx_kernel_drops", 0),
                        "rx_truncated": (p.get("io") or {}).get("rx_truncated", 0)}
            per_port[name] = {"uplink": direction_counters(up, config.get("a_to_b") or {}),
                              "downlink": direction_counters(down, config.get("b_to_a") or {})}
        out["ports"] = per_port
        fwd = stats.get("forwarding") or {}
        out["forwarding"] = {k: int(v) for k, v in fwd.items() if isinstance(v, int)}
    return out


@dataclass
class WireProcess:
    """One running roughnet-wire: its process, config, control socket and output."""

    link: int
    proc: subprocess.Popen
    config: dict[str, Any]
    control: Path
    seed: int
    lines: queue.Queue = field(default_factory=queue.Queue)
    stderr_tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=40))
    ready: dict[str, Any] | None = None
    final_stats: dict[str, Any] | None = None

    def start_readers(self) -> None:
        def read_out() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError:
                    log.debug("roughnet-wire link %d: not JSON: %r", self.link, raw[:200])
                    continue
                if obj.get("type") == "stats":
                    self.final_stats = obj
                elif obj.get("type") == "ready":  # time 0 of its position traces (about when it starts forwarding)
                    obj["seen_mono_ns"] = time.monotonic_ns()
                self.lines.put(obj)
            self.proc.stdout.close()
            self.lines.put(None)

        def read_err() -> None:
            assert self.proc.stderr is not None
            for raw in self.proc.stderr:
                self.stderr_tail.append(raw.rstrip("\n"))
            self.proc.stderr.close()

        for target in (read_out, read_err):
            threading.Thread(target=target, name=f"wire-l{self.link}-{target.__name__}", daemon=True).start()

    def describe_exit(self) -> str:
        tail = " | ".join(list(self.stderr_tail)[-5:]) or "(no stderr)"
        return f"roughnet-wire of link {self.link} (pid {self.proc.pid}, exit {self.proc.poll()}): {tail}"

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LinkError(f"roughnet-wire of link {self.link} printed no ready line within {timeout_s:.0f} s; "
                                f"{self.describe_exit()}")
            try:
                obj = self.lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if obj is None:
                self.proc.wait(timeout=5)
                time.sleep(0.05)  # let the stderr reader catch up
                raise LinkError(f"roughnet-wire of link {self.link} exited before it was ready; {self.describe_exit()}")
            if obj.get("type") == "error":
                raise LinkError(f"roughnet-wire of link {self.link} refused to start ({obj.get('kind')}): "
                                f"{obj.get('message')}")
            if obj.get("type") == "ready":
                self.ready = obj
                return obj

    def request(self, cmd: dict[str, Any], timeout_s: float = CONTROL_TIMEOUT_S) -> dict[str, Any]:
        """One command on the control socket; its one-line JSON reply."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(str(self.control))
            s.sendall((json.dumps(cmd) + "\n").encode())
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
        try:
            reply = json.loads(buf)
        except json.JSONDecodeError as e:
            raise LinkError(f"roughnet-wire of link {self.link}: control reply is not JSON ({e}): {buf[:200]!r}") from e
        if reply.get("type") == "error":
            raise LinkError(f"roughnet-wire of link {self.link} refused {cmd}: {reply.get('message')}")
        return reply

    def stats(self) -> dict[str, Any]:
        """The current ``stats`` (from the control socket), or the final line if the wire has exited."""
        if self.proc.poll() is not None:
            self.proc.wait()
            deadline = time.monotonic() + 2
            while self.final_stats is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.final_stats is None:
                raise LinkError(f"roughnet-wire of link {self.link} exited without a stats line; {self.describe_exit()}")
            return self.final_stats
        try:
            return self.request({"cmd": "stats"})
        except OSError as e:
            raise LinkError(f"roughnet-wire of link {self.link}: control socket {self.control}: {e}; "
                            f"{self.describe_exit()}") from e

    def stop(self, timeout_s: float = 10.0) -> dict[str, Any] | None:
        """SIGTERM (our own child, by pid), wait, and return the final stats line."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("roughnet-wire of link %d ignored SIGTERM for %.0f s; killing pid %d", self.link,
                            timeout_s, self.proc.pid)
                self.proc.kill()
                self.proc.wait(timeout=5)
        deadline = time.monotonic() + 2
        while self.final_stats is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.final_stats


def private_folder(folder: Path) -> Path:
    """``folder`` for control sockets: created with mode 0700 if missing; if it exists, checked to be a
    folder (not a symlink) owned by root or the running user and not writable by group or others.
    ``LinkError`` naming the folder and what is wrong otherwise."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(folder)
    except OSError as e:
        raise LinkError(f"cannot create the control socket folder {folder} ({e.strerror or e}); expected a "
                        "folder root can create") from None
    owners = {0, os.geteuid()}
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        problem = "is a symlink" if stat.S_ISLNK(st.st_mode) else "is not a folder"
    elif st.st_uid not in owners:
        problem = f"is owned by uid {st.st_uid}"
    elif st.st_mode & 0o022:
        who = "group and others" if st.st_mode & 0o022 == 0o022 else "group" if st.st_mode & 0o020 else "others"
        problem = f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    else:
        return folder
    raise LinkError(f"refusing the control socket folder {folder}: it {problem}; expected a folder owned by "
                    f"{' or '.join(f'uid {u}' for u in sorted(owners))} and writable by its owner only (mode 0700; "
                    "remove it and roughnet creates it)")


def clean_entry(entry: dict[str, Any]) -> str | None:
    """A ledgered control socket of a dead or torn-down wire (topo.ledger.run_cleaner): removed if it is still
    there.  Only a socket named ``*.sock`` in a folder called ``wire`` (where ``control_path`` puts them)."""
    path = Path(str(entry.get("path", "")))
    if path.suffix != ".sock" or path.parent.name != "wire":
        log.warning("ledger names wire socket %s, not one of roughnet's; left alone", path)
        return None
    try:
        if not stat.S_ISSOCK(path.lstat().st_mode):
            log.warning("ledger names wire socket %s, which is not a socket; left alone", path)
            return None
        path.unlink()
    except FileNotFoundError:
        return None
    return f"wire socket {path}"


def control_path(topo: Topology, link: Link) -> Path:
    """Where link ``link``'s control socket goes: next to the run's ledger, else ``PRIVATE_SOCKET_DIR``; its
    folder created private or checked (``private_folder``)."""
    name = f"{topo.token}-l{link.index}.sock"
    candidates = [Path(topo.ledger.root).parent / "wire", PRIVATE_SOCKET_DIR]
    for folder in candidates:
        path = folder / name
        if len(str(path)) <= MAX_SOCKET_PATH:
            private_folder(folder)
            return path
    raise LinkError(f"no short enough folder for the control socket {name} (tried {candidates}); "
                    f"expected a path under {MAX_SOCKET_PATH} bytes")


class WireEngine:
    """roughnet-wire per relayed link; counters from its control socket."""

    name = "wire"

    def __init__(self, binary: Path | None = None, extra_args: list[str] | None = None):
        self._binary = binary
        self.extra_args = list(extra_args or [])
        self.processes: dict[int, WireProcess] = {}

    @property
    def binary(self) -> Path:
        if self._binary is None:
            self._binary = wire_binary()
        return self._binary

    def config_for(self, link: Link) -> dict[str, Any]:
        profile = load_profile(link.profile, self.binary) if link.profile else None
        return link_config(link, profile)

    def seed_for(self, topo: Topology, link: Link) -> int:
        """The run's seed plus the link index (two links of one run decide independently)."""
        return (int(topo.spec.seed) + link.index) % (1 << 64)

    def _checksums_in_software(self, topo: Topology, link: Link) -> None:
        """Checksum offload off on the link's interfaces (host ends and relay ends; a segment's ports).

        With tx checksumming on, a veth hands its peer frames whose TCP/UDP
        checksum is not filled in yet (CHECKSUM_PARTIAL); the relay reads them
        with AF_PACKET and sends them on as plain bytes, and the receiving host
        then drops every one as a checksum error.  So the senders compute them.
        """
        roles = (ROLE_MEMBER, ROLE_PORT) if link.shared else (ROLE_A, ROLE_B, ROLE_RELAY_A, ROLE_RELAY_B)
        for info in topo.interfaces():
            if info.link != link.index or info.role not in roles:
                continue
            run_cmd(ns_exec(info.ns, ["ethtool", "-K", info.ifname, *CHECKSUM_OFFLOADS_OFF]),
                    f"turning checksum offload off on {info.ns}/{info.ifname} (link {link.index})", error=LinkError)

    def apply(self, topo: Topology, link: Link) -> None:
        if link.index in self.processes and self.processes[link.index].proc.poll() is None:
            raise LinkError(f"link {link.index} already has a running roughnet-wire (pid "
                            f"{self.processes[link.index].proc.pid}); expected apply() once per link")
        config = self.config_for(link)
        self._checksums_in_software(topo, link)
        ns = topo.link_ns(link.index)
        if link.shared:
            ports = topo.relay_ports(link.index)
            where = [arg for ifname, mac in ports for arg in ("--port", f"{ifname}={mac}")]
            ifaces = ", ".join(f"{p[0]} ({h})" for p, h in zip(ports, link.hosts))
        else:
            if_a, if_b = topo.relay_ifaces(link.index)
            where = ["--if-a", if_a, "--if-b", if_b]
            ifaces = f"{if_a} <-> {if_b}"
        ctl = control_path(topo, link)
        # The wire removes its socket at exit, but not when it is killed: ledgered, teardown and `roughnet clean`
        # remove it then (clean_entry below; test_self_chaos found one left after a SIGINT).
        topo.ledger.add("wire-socket", path=str(ctl), cleaner=__name__)
        seed = self.seed_for(topo, link)
        argv = [str(self.binary), *where, "--config", "-", "--seed", str(seed), "--control", str(ctl),
                "--threads", str(link.wire_threads), *self.extra_args]
        proc = topo.popen_ns(ns, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, bufsize=1)
        wp = WireProcess(link=link.index, proc=proc, config=config, control=ctl, seed=seed)
        self.processes[link.index] = wp
        wp.start_readers()
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(config))
            proc.stdin.close()
        except OSError as e:  # it died before reading its config: wait_ready says why
            log.debug("writing the config of link %d: %s", link.index, e)
        wp.wait_ready(READY_TIMEOUT_S)
        log.info("wire engine on link %d: pid %d in %s (%s), seed %d, config %s", link.index, proc.pid, ns,
                 ifaces, seed, json.dumps(config))

    def process(self, link: Link) -> WireProcess:
        wp = self.processes.get(link.index)
        if wp is None:
            raise LinkError(f"link {link.index} has no roughnet-wire; expected apply() before counters()")
        return wp

    def stats(self, link: Link) -> dict[str, Any]:
        """The raw ``stats`` line of link ``link``'s wire."""
        return self.process(link).stats()

    def counters(self, topo: Topology, link: Link) -> dict[str, Any]:
        wp = self.process(link)
        out = counters_from_stats(wp.stats(), wp.config, link.hosts)
        if link.positions:  # when its time 0 was (CLOCK_MONOTONIC), for the distances of messages (mobility.distance)
            out["ready_mono_ns"] = (wp.ready or {}).get("seen_mono_ns")
        return out

    def control(self, link: Link, cmd: dict[str, Any]) -> dict[str, Any]:
        """Send a run-time command (``{"cmd": "down"}``, ``{"cmd": "set", "config": {...}}``) to a link's wire."""
        return self.process(link).request(cmd)

    def stop(self, link: Link) -> dict[str, Any] | None:
        """Stop link ``link``'s wire now and return its final stats line (teardown would stop it anyway)."""
        return self.process(link).stop()

