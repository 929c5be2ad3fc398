"""Rules of a link's overlay keys (``overlay``, ``overlay_mtu``); the overlay itself is ``topo.overlay``'s.

Owns the checks between those keys and the link's others: ``overlay_mtu`` only
with an overlay and at most ``mtu`` less the VXLAN headers, and an overlay only
on the first links (its subnet 198.19.<128+i>.0/24 must not meet another
link's).  Values still holding a placeholder are checked on every expanded run.
"""

from __future__ import annotations

from typing import Any

from ..runspec import VXLAN_OVERHEAD_BYTES
from ..topo.naming import MAX_OVERLAY_LINK
from .kinds import has_placeholder
from .problems import Problem

__all__ = ["check_overlay"]


def check_overlay(link: Any, index: int, path: str, problems: list[Problem]) -> None:
    """Problems of ``link`` (a ``LinkTable`` at ``[[link]]`` position ``index``) about its overlay."""
    overlay, omtu, mtu = link.overlay, link.overlay_mtu, link.mtu
    if any(has_placeholder(v) for v in (overlay, omtu, mtu)):
        return
    on = overlay not in (None, "none")
    if omtu is not None and not on:
        problems.append(Problem(f"{path}.overlay_mtu", "overlay_mtu given on a link without an overlay",
                                'overlay = "vxlan" on this link, or no overlay_mtu', omtu))  # fmt: skip
    if on and omtu is not None and omtu > mtu - VXLAN_OVERHEAD_BYTES:
        problems.append(Problem(f"{path}.overlay_mtu", f"above the link's mtu ({mtu}) less the "
                                f"{VXLAN_OVERHEAD_BYTES} bytes of VXLAN headers",
                                f"at most {mtu - VXLAN_OVERHEAD_BYTES}", omtu))  # fmt: skip
    if on and mtu - VXLAN_OVERHEAD_BYTES < 576 and omtu is None:
        problems.append(Problem(f"{path}.mtu", f"too small for an overlay: the overlay's MTU would be "
                                f"{mtu - VXLAN_OVERHEAD_BYTES}", f"an mtu of at least {576 + VXLAN_OVERHEAD_BYTES} "
                                "with an overlay", mtu))  # fmt: skip
    if on and index >= MAX_OVERLAY_LINK:
        problems.append(Problem(f"{path}.overlay", f"an overlay on link {index}: overlay subnets exist for the "
                                f"first {MAX_OVERLAY_LINK} links only", f"overlays on [[link]] entries 0 to "
                                f"{MAX_OVERLAY_LINK - 1}", overlay))  # fmt: skip
