"""The ``netem`` engine: one tc netem qdisc per sending interface (delay, jitter, loss, rate, limit).

Owns the netem command line and its counters.  Used only where the kernel has
sch_netem (``links.caps``); where it has not (the machines this project is
built on) ``links.choose`` never picks it.  netem drops lost packets silently
on the sender's egress (its enqueue reports success), so unlike an nftables
drop on output it does not make sendto() fail.

Queue (netem ``limit``, in packets; netem's queue also holds the packets
being delayed): ``queue_packets`` if set, else ``queue_bytes`` in frames, else
50 ms at the rate; plus the packets in flight during delay + jitter at the
rate (or at DEFAULT_LINE_BPS when there is no rate), and never below netem's
own default of 1000.  Jitter uses netem's default (uniform) distribution and
may reorder packets, as netem does.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from ..errors import LinkError
from ..runspec import Direction, Link
from ..topo.build import Topology
from ..topo.system import run_cmd
from . import stats
from .base import loss_randomness
from .kernel import DEFAULT_QUEUE_S, MIN_QUEUE_FRAMES, frame_bytes
from .points import DIRECTIONS, egress_points

log = logging.getLogger(__name__)

NETEM_DEFAULT_LIMIT = 1000
#: Assumed line rate of a link without a rate, to size the queue of delayed packets.
DEFAULT_LINE_BPS = 10_000_000_000


def _us(ns: int) -> str:
    return f"{ns / 1000:g}us"


def netem_limit(d: Direction, mtu: int) -> int:
    frame = frame_bytes(mtu)
    rate = d.rate_bps if d.rate_bps is not None else DEFAULT_LINE_BPS
    in_flight = math.ceil(rate / 8 * (d.delay_ns + d.jitter_ns) / 1e9 / frame)
    if d.queue_packets is not None or d.queue_bytes is not None:
        queue = min(x for x in (d.queue_packets, math.ceil((d.queue_bytes or 0) / frame) if d.queue_bytes else None)
                    if x is not None)
        return max(1, queue + in_flight)
    if d.rate_bps is not None:
        queue = max(math.ceil(d.rate_bps / 8 * DEFAULT_QUEUE_S / frame), MIN_QUEUE_FRAMES)
        return max(NETEM_DEFAULT_LIMIT, queue + in_flight)
    return max(NETEM_DEFAULT_LIMIT, in_flight + NETEM_DEFAULT_LIMIT)


def netem_argv(ns: str, ifname: str, d: Direction, mtu: int) -> list[str] | None:
    """The `tc qdisc replace ... netem ...` for one egress, or None for a clean direction."""
    if d.is_clean:
        return None
    argv = ["tc", "-n", ns, "qdisc", "replace", "dev", ifname, "root", "netem", "limit", str(netem_limit(d, mtu))]
    if d.delay_ns or d.jitter_ns:
        argv += ["delay", _us(d.delay_ns)]
        if d.jitter_ns:
            argv.append(_us(d.jitter_ns))
    if d.loss:
        if not 0.0 <= d.loss <= 1.0:
            raise LinkError(f"loss {d.loss!r} on {ns}/{ifname}; expected a fraction in [0, 1]")
        argv += ["loss", "random", f"{d.loss * 100:.6g}%"]
    if d.rate_bps is not None:
        argv += ["rate", f"{d.rate_bps}bit"]
    return argv


class NetemEngine:
    name = "netem"

    def apply(self, topo: Topology, link: Link) -> None:
        ifaces = topo.interfaces()
        for direction in DIRECTIONS:
            d: Direction = getattr(link, direction)
            for p in egress_points(ifaces, link, direction):
                argv = netem_argv(p.ns, p.ifname, d, link.mtu)
                if argv:
                    run_cmd(argv, f"netem on link {link.index} {direction} at {p.ns}/{p.ifname}", error=LinkError)

    def counters(self, topo: Topology, link: Link) -> dict[str, Any]:
        ifaces = topo.interfaces()
        out: dict[str, Any] = {"engine": self.name, **loss_randomness(self.name)}
        for direction in DIRECTIONS:
            # netem counts random loss and queue overflow together in "drops".
            c: dict[str, Any] = {"drops": 0, "drops_loss": 0, "drops_queue": None, "tx_packets": 0, "tx_bytes": 0,
                                 "note": "netem reports loss and queue drops together (as drops_loss)"}
            for p in egress_points(ifaces, link, direction):
                q = stats.root_qdisc(p.ns, p.ifname)
                c["drops"] += int(q.get("drops", 0))
                s = stats.iface_stats(p.ns, p.ifname)
                c["tx_packets"] += s["tx_packets"]
                c["tx_bytes"] += s["tx_bytes"]
            c["drops_loss"] = c["drops"]
            out[direction] = c
        return out
