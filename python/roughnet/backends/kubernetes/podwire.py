"""roughnet's wire inside a pod: a scenario link's impairments on a cluster whose kernel has no sch_netem.

Owns which pods carry a wire (``plan``), what each can do (``WIRE_FEATURES``), and the inside of
such a pod (``PodWire``): the pod's programs move into an inner network namespace (held by a
``sleep`` started with ``unshare -n``), joined to the pod's own namespace by a veth pair
(``rnw0`` outside, ``rnw1`` inside).  The inner end takes the pod's MAC, address and routes; the
pod's ``eth0`` gives its address up; ``roughnet-wire`` relays every frame between ``eth0`` (the
cluster's network) and ``rnw0`` (the pod's programs) through the link's impairment pipeline.
Seen from the cluster nothing changed (same MAC, same IP); seen from the programs every frame in
and out of the pod crosses the wire.  Such a pod is privileged (a new network namespace needs
CAP_SYS_ADMIN); the others only turn checksum offload off (``ethtool -K eth0 tx off rx off``), as
the namespace backend's wire engine does, because a frame a veth hands over with its checksum
still to fill in reaches the other side of a relay as a bad one.

Which pod carries the wire: a two-host link's first host (``forward``, hosts[0] -> hosts[1], is its
egress, ``reverse`` its ingress); on a shared segment every member (``forward`` is each host's
uplink, ``reverse`` its downlink, as on the namespace backend's segment).  A wire impairs all of
its pod's traffic, so a pod that carries one must be on no other link (preflight refuses that).
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

from ...errors import LinkError, PreflightError
from ...links.base import register_engine
from ...links.wire import counters_from_stats, link_config
from ...runspec import Link, Run
from .kubectl import Kubectl
from .process import PodProcess

log = logging.getLogger(__name__)

#: What a wire in a pod can apply (Link.needs() vocabulary); half duplex, schedules and distance traces are
#: a medium's or a trace's, shared by hosts, which per-pod wires do not share.
WIRE_FEATURES = frozenset({"rate", "delay", "jitter", "loss", "queue", "jitter_shape", "reorder", "loss_model",
                           "duplicate", "corrupt", "overhead", "profile", "wire_threads"})
OUTER, INNER = "rnw0", "rnw1"
OFFLOADS_OFF = ("tx", "off", "rx", "off")
#: How long a pod's wire may take to print its ready line.
READY_TIMEOUT_S = 30.0


def plan(run: Run, where: str) -> dict[str, Link]:
    """Host -> the impaired link whose wire its pod carries; PreflightError for what a pod wire cannot do."""
    links_of: dict[str, list[int]] = {}
    for link in run.links:
        for h in link.hosts:
            links_of.setdefault(h, []).append(link.index)
    out: dict[str, Link] = {}
    for link in run.links:
        needs = link.needs()
        if not needs:
            continue
        desc = f"link {link.index} ({', '.join(link.hosts)})"
        beyond = sorted(needs - WIRE_FEATURES)
        if beyond:
            raise PreflightError(f"{where}: {desc} asks for {', '.join(beyond)}, which the kubernetes backend's "
                                 f"per-pod wire cannot do (it does {', '.join(sorted(WIRE_FEATURES))}); run it with "
                                 f"--backend namespace")
        carriers = list(link.hosts) if link.shared else [link.hosts[0]]
        for h in carriers:
            if len(links_of[h]) > 1:
                raise PreflightError(f"{where}: {desc} is impaired and host {h} is also on link(s) "
                                     f"{', '.join(str(i) for i in links_of[h] if i != link.index)}; on the kubernetes "
                                     f"backend a pod's wire impairs all of its traffic, so a host that carries one "
                                     f"must be on one link only")
            out[h] = link
    return out


def wire_config(link: Link, profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """The link's LinkConfig as the pod's wire sees it: a = eth0 (into the pod), b = rnw0 (out of it).

    ``forward`` is the carrier's egress (b_to_a) and ``reverse`` its ingress (a_to_b).
    """
    cfg = link_config(link, profile)
    cfg["a_to_b"], cfg["b_to_a"] = cfg["b_to_a"], cfg["a_to_b"]
    return cfg


def _ok(res: subprocess.CompletedProcess, what: str, pod: str) -> str:
    if res.returncode != 0:
        err = res.stderr if isinstance(res.stderr, str) else (res.stderr or b"").decode(errors="replace")
        raise LinkError(f"pod {pod}: {what} failed (exit {res.returncode}): {err.strip()[-300:]}")
    return res.stdout if isinstance(res.stdout, str) else res.stdout.decode()


@dataclass
class PodWire:
    """The wire of one pod, from setup to its final stats."""

    kubectl: Kubectl
    pod: str
    host: str
    link: Link
    seed: int
    config: dict[str, Any]
    holder: PodProcess | None = None
    inner_pid: int | None = None
    wire: PodProcess | None = None
    final: dict[str, Any] | None = None
    _lines: list[dict[str, Any]] | None = None

    def _sh(self, argv: list[str], what: str) -> str:
        return _ok(self.kubectl.exec(self.pod, argv, timeout=60, text=True), what, self.pod)

    def inner(self, argv: list[str]) -> list[str]:
        """``argv`` run in the inner namespace (where the pod's programs live once the wire is up)."""
        if self.inner_pid is None:
            raise LinkError(f"pod {self.pod} has no inner namespace yet")
        return ["nsenter", "-t", str(self.inner_pid), "-n", "--", *argv]

    def setup(self) -> None:
        """Inner namespace, veth pair, the pod's address moved inside, the wire started and ready."""
        addrs = json.loads(self._sh(["ip", "-j", "addr", "show", "dev", "eth0"], "reading eth0"))[0]
        routes = json.loads(self._sh(["ip", "-j", "route", "show", "dev", "eth0"], "reading routes"))
        mac, mtu = addrs["address"], int(addrs["mtu"])
        v4 = [f"{a['local']}/{a['prefixlen']}" for a in addrs.get("addr_info", []) if a.get("family") == "inet"]
        if not v4:
            raise LinkError(f"pod {self.pod}: eth0 has no IPv4 address")
        self.holder = PodProcess(self.kubectl, self.pod, ["unshare", "-n", "sleep", "2147483647"], "inner-holder",
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = self.holder.remote_pid(wait_s=15)
        if pid is None:
            raise LinkError(f"pod {self.pod}: the inner namespace's holder did not start (is the pod privileged?)")
        self.inner_pid = pid
        self._sh(["ip", "link", "add", OUTER, "mtu", str(mtu), "type", "veth", "peer", "name", INNER, "mtu", str(mtu),
                  "netns", str(pid)], "creating the veth pair")
        self._sh(self.inner(["ip", "link", "set", "lo", "up"]), "lo up inside")
        self._sh(self.inner(["ip", "link", "set", INNER, "address", mac, "up"]), "rnw1 up inside")
        for a in v4:
            self._sh(self.inner(["ip", "addr", "add", a, "dev", INNER]), "address inside")
        self._sh(["ip", "addr", "flush", "dev", "eth0"], "giving up eth0's address")
        ordered = [r for r in routes if r.get("dst") != "default"] + [r for r in routes if r.get("dst") == "default"]
        for r in ordered:
            argv = ["ip", "route", "replace", r["dst"]]
            if r.get("gateway"):
                argv += ["via", r["gateway"]]
            argv += ["dev", INNER]
            if "onlink" in (r.get("flags") or []):
                argv.append("onlink")
            self._sh(self.inner(argv), f"route {r['dst']} inside")
        self._sh(["ip", "link", "set", OUTER, "up"], "rnw0 up")
        self._sh(["ethtool", "-K", OUTER, *OFFLOADS_OFF], "checksum offload off on rnw0")
        self._sh(self.inner(["ethtool", "-K", INNER, *OFFLOADS_OFF]), "checksum offload off on rnw1")
        self._start_wire()

    def _start_wire(self) -> None:
        argv = ["/usr/local/bin/roughnet-wire", "--if-a", "eth0", "--if-b", OUTER, "--config", "-", "--seed",
                str(self.seed), "--threads", str(self.link.wire_threads)]
        self.wire = PodProcess(self.kubectl, self.pod, argv, "wire", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, bufsize=1)
        assert self.wire.stdin is not None
        self.wire.stdin.write(json.dumps(self.config))
        self.wire.stdin.close()
        self._lines = []
        ready = threading.Event()

        def read() -> None:
            assert self.wire is not None and self.wire.stdout is not None
            for line in self.wire.stdout:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                assert self._lines is not None
                self._lines.append(obj)
                if obj.get("type") in ("ready", "error"):
                    ready.set()
            ready.set()

        threading.Thread(target=read, name=f"podwire-{self.pod}", daemon=True).start()
        if not ready.wait(READY_TIMEOUT_S):
            raise LinkError(f"pod {self.pod}: roughnet-wire printed no ready line within {READY_TIMEOUT_S:.0f} s")
        err = next((x for x in self._lines if x.get("type") == "error"), None)
        if err is not None or not any(x.get("type") == "ready" for x in self._lines):
            tail = self.wire.stderr.read()[-400:] if self.wire.stderr and self.wire.poll() is not None else ""
            raise LinkError(f"pod {self.pod}: roughnet-wire failed: {err or 'exited'} {tail}")
        log.info("pod %s: wire up (link %d, seed %d, config %s)", self.pod, self.link.index, self.seed,
                 json.dumps(self.config))

    def stop(self) -> dict[str, Any] | None:
        """Stop the wire (it prints its final stats) and keep them; None if it never ran."""
        if self.wire is None:
            return self.final
        if self.wire.poll() is None:
            self.wire.terminate()
            try:
                self.wire.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.wire.kill()
        stats = [x for x in (self._lines or []) if x.get("type") == "stats"]
        self.final = stats[-1] if stats else self.final
        return self.final

    def counters(self) -> dict[str, Any]:
        """The link counters as the namespace wire engine gives them (forward = this pod's egress)."""
        stats = self.stop()
        if stats is None:
            return {"engine": "pod-wire", "error": "the pod's wire gave no stats"}
        swapped = dict(stats)
        for a, b in (("a_to_b", "b_to_a"),):
            if a in stats or b in stats:
                swapped[a], swapped[b] = stats.get(b), stats.get(a)
        config = dict(self.config)
        config["a_to_b"], config["b_to_a"] = self.config["b_to_a"], self.config["a_to_b"]
        out = counters_from_stats(swapped, config, self.link.hosts)
        out["engine"] = "pod-wire"
        out["carrier"] = self.host
        return out


#: Counter keys summed over the pods that carry one link's wires (the others are levels: their maximum).
_SUMMED = ("drops_", "tx_", "rx_", "send_errors", "sched_error_count", "duplicated", "corrupted", "reordered",
           "held_packets")


def merge_counters(per_pod: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One link's counters from its carriers' (a segment has a wire per member): sums and maxima per direction."""
    out: dict[str, Any] = {"engine": "pod-wire", "pods": per_pod}
    for side in ("forward", "reverse"):
        merged: dict[str, Any] = {}
        for c in per_pod.values():
            for k, v in (c.get(side) or {}).items():
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    merged.setdefault(k, v)
                elif k.startswith(_SUMMED):
                    merged[k] = merged.get(k, 0) + v
                else:
                    merged[k] = max(merged.get(k, v), v)
        out[side] = merged
    return out


class PodWireEngine:
    """The ``pod-wire`` engine: a link's impairments by roughnet-wire inside the pods that carry it."""

    name = "pod-wire"

    def apply(self, topo: Any, link: Link) -> None:
        topo.start_wires(link)

    def counters(self, topo: Any, link: Link) -> dict[str, Any]:
        return topo.wire_counters(link)


class ClusterNetwork:
    """The ``cluster`` engine: links without impairments, as the cluster's own network carries them.  It applies
    nothing and counts nothing; an impaired link gets ``pod-wire`` or is refused at preflight.
    """

    name = "cluster"

    def apply(self, topo: Any, link: Link) -> None:
        return None

    def counters(self, topo: Any, link: Link) -> dict[str, Any]:
        return {"engine": self.name}


register_engine(PodWireEngine.name, PodWireEngine)
register_engine(ClusterNetwork.name, ClusterNetwork)
