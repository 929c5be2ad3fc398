"""Protocol timeouts scaled to a run's slow links (an HF modem: seconds per round trip).

Owns the estimate of a run's worst round trip from its resolved links (the wire's
effective configuration: a named profile under the explicit values) and the Zenoh
session timeouts derived from it when the scenario does not set them.  It does not
apply impairments (``links``) nor start agents (``run.agents``); it only adds agent
options (docs/protocols.md, Zenoh ``open_timeout`` / ``lease``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ..runspec import Link, Run

log = logging.getLogger(__name__)

#: Bytes one handshake step puts on a link (a zenoh InitSyn/InitAck with its cookie, or a TCP
#: segment carrying it, with headers): what a round trip of the session open must serialise.
HANDSHAKE_BYTES = 512
#: zenoh 1.10's own open/accept timeout and lease (DEFAULT_CONFIG.json5): kept on ordinary links.
ZENOH_DEFAULT_NS = 10_000_000_000
#: Round trips a zenoh session open needs: the TCP (or QUIC) handshake, InitSyn/InitAck,
#: OpenSyn/OpenAck, and one more of margin; the lease gets as many so that a queue of the
#: modem's size in front of a keep-alive does not end the session.
ZENOH_ROUND_TRIPS = 4
#: Upper bound of the derived values (the agent refuses more than an hour).
MAX_NS = 3600 * 1_000_000_000


@lru_cache(maxsize=None)
def _profile(name: str) -> dict[str, Any]:
    from ..links.wire import load_profile  # the profile as roughnet-wire defines it (runs its binary)

    return load_profile(name)


def link_rtt_ns(link: Link, profile: Callable[[str], dict[str, Any]] = _profile) -> int:
    """A round trip over ``link`` for a handshake step each way: both delays and jitters, the
    serialisation of HANDSHAKE_BYTES at each direction's rate, and the half-duplex turnaround
    each way.  Taken from the link's effective wire configuration (its profile included)."""
    from ..links.wire import link_config

    cfg = link_config(link, profile(link.profile) if link.profile else None)
    turnaround = int((cfg.get("half_duplex") or {}).get("turnaround_ns") or 0)
    total = 0
    for key in ("a_to_b", "b_to_a"):
        d = cfg.get(key) or {}
        total += int(d.get("delay_ns") or 0) + int(d.get("jitter_ns") or 0) + turnaround
        rate = d.get("rate_bps")
        if rate:
            total += math.ceil(HANDSHAKE_BYTES * 8 * 1_000_000_000 / int(rate))
    return total


def path_rtt_ns(run: Run, profile: Callable[[str], dict[str, Any]] = _profile) -> int:
    """An upper bound of the round trip between any two hosts of ``run``: every link's, summed."""
    return sum(link_rtt_ns(link, profile) for link in run.links)


def zenoh_timing(run: Run, options: dict[str, Any],
                 profile: Callable[[str], dict[str, Any]] = _profile) -> dict[str, int]:
    """Zenoh ``open_timeout`` and ``lease`` (ns) for a run whose links are too slow for zenoh's
    10 s defaults, for the keys ``options`` does not set; empty on ordinary links."""
    wanted = min(MAX_NS, ZENOH_ROUND_TRIPS * path_rtt_ns(run, profile))
    if wanted <= ZENOH_DEFAULT_NS:
        return {}
    wanted = math.ceil(wanted / 1_000_000_000) * 1_000_000_000  # whole seconds
    out = {key: wanted for key in ("open_timeout", "lease") if options.get(key) is None}
    if out:
        log.info("zenoh over a slow path (round trip about %.1f s): %s", wanted / ZENOH_ROUND_TRIPS / 1e9,
                 {k: f"{v / 1e9:.0f} s" for k, v in out.items()})
    return out
