"""The ``kernel`` engine: rate with tbf, random loss with nftables, per direction.

Owns the tbf and nftables settings (sizes and rules) and their counters, and
removing them again (``clear_link``: a link whose impairments change between
runs that share one topology, run.group; also used for netem's qdiscs).
Where each direction is shaped and lost is ``links.points``'s.  Works on any
kernel with sch_tbf and nftables netdev ingress (no sch_netem needed); does
no delay or jitter (``links.choose`` sends those elsewhere).

Sizing (every figure in bytes of Ethernet frames: MTU + 14 bytes of header,
which is what tbf meters on a veth):

- burst = max(rate / HZ, 2 frames) with HZ = 250.  tc-tbf(8): "you need a
  bucket of at least rate/HZ bytes" for the bucket to refill at the configured
  rate between timer ticks; and a frame larger than the bucket can never be
  sent, so at least two frames fit.
- limit (bytes queued waiting for tokens): ``queue_bytes`` if set, else
  ``queue_packets`` frames, the smaller of the two if both are set; when
  neither is set, 50 ms of queue at the rate (DEFAULT_QUEUE_S), at least 10
  frames.  50 ms is a typical router buffer well below a bandwidth-delay
  product that would hide the rate from TCP.
- queue without a rate: a plain drop-tail fifo (``pfifo limit N`` or
  ``bfifo limit B``) on the egress; it only fills when the interface is busy.

Loss: an nftables ``netdev`` table per namespace, one chain per receiving
interface on its ingress hook, ``numgen random mod 1000000 < loss*1e6 counter
drop`` (so loss has a resolution of 1e-6), after a plain counter of every frame
seen.  Loss applies to every frame of that direction, ARP included, as a real
link's would.  The kernel's numgen cannot be seeded (nftables has no seed for
it): the loss pattern differs between runs, its rate does not. Every run's
record says so (``link_counters``: ``loss_reproducible`` false, ``loss_random``
naming the wire engine, whose loss is seeded, for a reproducible pattern).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from typing import Any

from ..runspec import Direction, Link
from ..topo.build import Topology
from ..errors import LinkError
from ..topo.system import ns_exec, run_cmd
from . import stats
from .base import loss_randomness
from .points import DIRECTIONS, egress_points, ingress_points

log = logging.getLogger(__name__)

HZ = 250
ETH_HEADER = 14
DEFAULT_QUEUE_S = 0.050
MIN_QUEUE_FRAMES = 10
LOSS_SCALE = 1_000_000
NFT_PRIORITY = -500


def frame_bytes(mtu: int) -> int:
    return mtu + ETH_HEADER


def tbf_burst(rate_bps: int, mtu: int) -> int:
    """Bucket size in bytes: at least rate/HZ and two full frames (see the module docstring)."""
    return max(math.ceil(rate_bps / 8 / HZ), 2 * frame_bytes(mtu))


def queue_limit_bytes(d: Direction, mtu: int) -> int:
    """Bytes that may wait in the queue of a shaped direction."""
    frame = frame_bytes(mtu)
    limits = []
    if d.queue_bytes is not None:
        limits.append(d.queue_bytes)
    if d.queue_packets is not None:
        limits.append(d.queue_packets * frame)
    if limits:
        return max(1, min(limits))
    assert d.rate_bps is not None
    return max(math.ceil(d.rate_bps / 8 * DEFAULT_QUEUE_S), MIN_QUEUE_FRAMES * frame)


def shaping_argv(ns: str, ifname: str, d: Direction, mtu: int) -> list[str] | None:
    """The `tc qdisc replace` for one egress, or None when the direction has no rate and no queue."""
    base = ["tc", "-n", ns, "qdisc", "replace", "dev", ifname, "root"]
    if d.rate_bps is not None:
        if d.rate_bps <= 0:
            raise LinkError(f"rate {d.rate_bps} bit/s on {ns}/{ifname}; expected a positive rate")
        return [*base, "tbf", "rate", f"{d.rate_bps}bit", "burst", str(tbf_burst(d.rate_bps, mtu)),
                "limit", str(queue_limit_bytes(d, mtu))]
    if d.queue_packets is not None and d.queue_bytes is None:
        return [*base, "pfifo", "limit", str(d.queue_packets)]
    if d.queue_bytes is not None:
        limit = d.queue_bytes if d.queue_packets is None else min(d.queue_bytes, d.queue_packets * frame_bytes(mtu))
        return [*base, "bfifo", "limit", str(limit)]
    return None


def loss_threshold(loss: float) -> int:
    if not 0.0 <= loss <= 1.0:
        raise LinkError(f"loss {loss!r}; expected a fraction in [0, 1]")
    return round(loss * LOSS_SCALE)


def table_name(link: Link) -> str:
    return f"rn{link.index}"


def chain_name(direction: str, ifname: str) -> str:
    """nftables identifiers take no '-': ``forward_rn0_b`` for rn0-b."""
    return f"{direction}_{ifname.replace('-', '_')}"


def nft_ruleset(table: str, chains: list[tuple[str, str, float]]) -> str:
    """An ``nft -f`` script: one netdev table, a chain per (chain name, device, loss fraction)."""
    lines = [f"table netdev {table} {{"]
    for name, dev, loss in chains:
        threshold = loss_threshold(loss)
        # 100 %: every frame (numgen's `< 1000000` is out of its 0-999999 range and nft refuses it)
        draw = f"numgen random mod {LOSS_SCALE} < {threshold} " if threshold < LOSS_SCALE else ""
        lines += [
            f"  chain {name} {{",
            f'    type filter hook ingress device "{dev}" priority {NFT_PRIORITY}; policy accept;',
            '    counter comment "seen"',
            f'    {draw}counter drop comment "loss"',
            "  }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


#: What `tc qdisc del` / `nft delete table` print when there is nothing to delete (not an error for clear_link).
_NOTHING_TO_DELETE = ("no such file or directory", "cannot delete qdisc with handle of zero", "cannot find")


def _nothing_there(stderr: str) -> bool:
    low = stderr.lower()
    return any(m in low for m in _NOTHING_TO_DELETE)


def clear_argvs(ifaces, link: Link) -> list[list[str]]:
    """The commands that remove every qdisc and loss table the kernel (or netem) engine may have put on ``link``.

    Root qdiscs of every egress point of both directions (deleting the root puts the
    interface's default back) and the link's nftables table in every namespace of its
    ingress points.  Pure: reads ``Topology.interfaces()`` rows.
    """
    out: list[list[str]] = []
    egress: list[tuple[str, str]] = []
    tables: list[str] = []
    for direction in DIRECTIONS:
        egress += [(p.ns, p.ifname) for p in egress_points(ifaces, link, direction)]
        tables += [p.ns for p in ingress_points(ifaces, link, direction)]
    for ns, ifname in dict.fromkeys(egress):
        out.append(["tc", "-n", ns, "qdisc", "del", "dev", ifname, "root"])
    for ns in dict.fromkeys(tables):
        out.append(ns_exec(ns, ["nft", "delete", "table", "netdev", table_name(link)]))
    return out


def clear_link(topo: Topology, link: Link) -> None:
    """Remove ``link``'s shaping qdiscs and loss rules (and so their counters); absent ones are fine.

    After it the link carries traffic unimpaired until an engine's ``apply`` is called again.
    LinkError when a command fails for another reason than there being nothing to delete.
    """
    for argv in clear_argvs(topo.interfaces(), link):
        proc = run_cmd(argv, f"clearing link {link.index}", check=False, error=LinkError)
        if proc.returncode != 0 and not _nothing_there(proc.stderr):
            raise LinkError(f"clearing link {link.index} failed: `{' '.join(argv)}` exited {proc.returncode}: "
                            f"{proc.stderr.strip() or '(no message)'}; expected it to remove the link's "
                            f"impairments or find none")
    log.info("link %d cleared (qdiscs and loss rules removed)", link.index)


class KernelEngine:
    """tbf on the sending side, nftables random drop on the receiving side."""

    name = "kernel"

    def apply(self, topo: Topology, link: Link) -> None:
        ifaces = topo.interfaces()
        chains: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
        for direction in DIRECTIONS:
            d: Direction = getattr(link, direction)
            if "delay" in d.needs() or "jitter" in d.needs():
                raise LinkError(f"link {link.index} {direction}: the kernel engine has no delay or jitter; "
                                f"expected engine netem or wire (preflight should have chosen one)")
            for p in egress_points(ifaces, link, direction):
                argv = shaping_argv(p.ns, p.ifname, d, link.mtu)
                if argv:
                    run_cmd(argv, f"shaping link {link.index} {direction} on {p.ns}/{p.ifname}", error=LinkError)
            if d.loss:
                for p in ingress_points(ifaces, link, direction):
                    chains[p.ns].append((chain_name(direction, p.ifname), p.ifname, d.loss))
        for ns, ch in chains.items():
            run_cmd(ns_exec(ns, ["nft", "-f", "-"]), f"adding loss rules of link {link.index} in {ns}",
                    input=nft_ruleset(table_name(link), ch), error=LinkError)
        log.info("kernel engine applied to link %d: forward %s, reverse %s", link.index, link.forward, link.reverse)

    def reapply(self, topo: Topology, link: Link) -> None:
        """Replace whatever this link had with ``link``'s impairments; counters start from zero again."""
        clear_link(topo, link)
        self.apply(topo, link)

    def counters(self, topo: Topology, link: Link) -> dict[str, Any]:
        ifaces = topo.interfaces()
        snap = stats.Snapshot()
        egress = {p.ns for direction in DIRECTIONS for p in egress_points(ifaces, link, direction)}
        ingress = {p.ns for direction in DIRECTIONS for p in ingress_points(ifaces, link, direction)}
        snap.prefetch(links=egress | ingress, qdiscs=egress,
                      nft={(ns, "netdev", table_name(link)) for ns in ingress})
        out: dict[str, Any] = {"engine": self.name, **loss_randomness(self.name)}
        for direction in DIRECTIONS:
            c = {"drops_loss": 0, "drops_queue": 0, "overlimits": 0, "tx_packets": 0, "tx_bytes": 0,
                 "rx_packets": 0, "rx_bytes": 0, "seen_at_loss_hook": 0}
            for p in egress_points(ifaces, link, direction):
                q = snap.root_qdisc(p.ns, p.ifname)
                c["drops_queue"] += int(q.get("drops", 0))
                c["overlimits"] += int(q.get("overlimits", 0))
                s = snap.iface_stats(p.ns, p.ifname)
                c["tx_packets"] += s["tx_packets"]
                c["tx_bytes"] += s["tx_bytes"]
            for p in ingress_points(ifaces, link, direction):
                s = snap.iface_stats(p.ns, p.ifname)
                c["rx_packets"] += s["rx_packets"]
                c["rx_bytes"] += s["rx_bytes"]
                nft = snap.nft_comment_counters(p.ns, "netdev", table_name(link))
                name = chain_name(direction, p.ifname)
                c["drops_loss"] += nft.get((name, "loss"), 0)
                c["seen_at_loss_hook"] += nft.get((name, "seen"), 0)
            out[direction] = c
        return out

