"""Where each direction of a link is shaped and where its loss is applied.

Owns the mapping from (link, direction) to interfaces, shared by every kernel
based engine.  Pure: it reads ``Topology.interfaces()``.

- two hosts: ``forward`` (hosts[0] -> hosts[1]) is shaped on hosts[0]'s
  interface egress and loses at hosts[1]'s interface ingress; ``reverse`` the
  other way round.
- shared segment: ``forward`` (uplink, each host into the segment) is shaped
  on each host's interface egress and loses at the bridge port's ingress (in
  the segment namespace); ``reverse`` (downlink) is shaped on each bridge port's
  egress and loses at each host's interface ingress.

Loss is applied where frames are received: dropping on the sender's own
output makes UDP sendto() fail with EPERM (MEASUREMENTS.md), which a real
link never does.
"""

from __future__ import annotations

from ..errors import LinkError
from ..runspec import Link
from ..topo.build import ROLE_A, ROLE_B, ROLE_MEMBER, ROLE_PORT, IfaceInfo

DIRECTIONS = ("forward", "reverse")


def _roles(link: Link, direction: str) -> tuple[str, str]:
    """(egress role, ingress role) of ``direction``."""
    if direction not in DIRECTIONS:
        raise LinkError(f"unknown direction {direction!r}; expected forward or reverse")
    if link.shared:
        return (ROLE_MEMBER, ROLE_PORT) if direction == "forward" else (ROLE_PORT, ROLE_MEMBER)
    return (ROLE_A, ROLE_B) if direction == "forward" else (ROLE_B, ROLE_A)


def _pick(ifaces: list[IfaceInfo], link: Link, role: str) -> list[IfaceInfo]:
    out = [i for i in ifaces if i.link == link.index and i.role == role]
    if not out:
        raise LinkError(f"link {link.index} has no interface with role {role!r} in this topology")
    return sorted(out, key=lambda i: i.position)


def egress_points(ifaces: list[IfaceInfo], link: Link, direction: str) -> list[IfaceInfo]:
    """Interfaces whose egress carries ``direction`` of ``link`` (where rate and queue go)."""
    return _pick(ifaces, link, _roles(link, direction)[0])


def ingress_points(ifaces: list[IfaceInfo], link: Link, direction: str) -> list[IfaceInfo]:
    """Interfaces whose ingress receives ``direction`` of ``link`` (where random loss goes)."""
    return _pick(ifaces, link, _roles(link, direction)[1])
