"""Names and addresses of everything a topology creates: pure functions, no I/O.

Owns the naming and addressing rules of docs/architecture.md (namespace and
interface names, subnets, host addresses, overlay devices and subnets) and the static routing plan
(shortest path by hop count).  It does not create anything; ``topo.build``
does, from what these functions return.
"""

from __future__ import annotations

import ipaddress
import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import TopologyError
from ..runspec import Link

#: Prefix of every namespace roughnet creates (cleanup tooling recognises it).
NS_PREFIX = "rn-"
#: Host names are checked again here (spec checks them first): they end up in
#: interface and namespace names, so nothing but this pattern may reach `ip`.
HOST_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")
TOKEN_RE = re.compile(r"^[a-z0-9]{1,16}$")
#: Linux limits interface names to IFNAMSIZ-1 = 15 characters.
IFNAME_MAX = 15
#: 198.18.0.0/24 .. 198.19.255.0/24: two /16s of /24s (RFC 2544 benchmarking range).
MAX_LINKS = 512
#: A /24 leaves .1 .. .254 for hosts.
MAX_HOSTS_PER_LINK = 254
#: Overlay subnets: link i's VXLAN overlay is 198.19.(128+i).0/24.  They share 198.19.0.0/16
#: with the subnets of links 256..511, so an overlay may only sit on a link with index below
#: MAX_OVERLAY_LINK and a run with an overlay has at most MAX_LINKS_WITH_OVERLAY links.
OVERLAY_BASE = 128
MAX_OVERLAY_LINK = 128
MAX_LINKS_WITH_OVERLAY = 256 + OVERLAY_BASE
#: VXLAN: the IANA port, and the VNI of link i is VNI_BASE + i.
VXLAN_PORT = 4789
VNI_BASE = 1


def run_token(run_id: str) -> str:
    """The run token: the first 8 characters of the run id (12 hex chars)."""
    token = run_id[:8].lower()
    check_token(token)
    return token


def check_token(token: str) -> None:
    if not TOKEN_RE.fullmatch(token):
        raise TopologyError(f"run token {token!r} is not usable in names; expected 1-16 of [a-z0-9]")


def check_host_name(name: str) -> None:
    if not HOST_NAME_RE.fullmatch(name):
        raise TopologyError(
            f"host name {name!r} cannot be used in namespace and interface names; "
            f"expected {HOST_NAME_RE.pattern} (a lowercase letter, then up to 7 lowercase letters or digits)"
        )


def _check_index(index: int) -> None:
    if not 0 <= index < MAX_LINKS:
        raise TopologyError(f"link index {index} is out of range; expected 0..{MAX_LINKS - 1}")


def host_ns(token: str, host: str) -> str:
    """Namespace of host ``host``: ``rn-<token>-<host>``."""
    check_host_name(host)
    return f"{NS_PREFIX}{token}-{host}"


def segment_ns(token: str, index: int) -> str:
    """Namespace holding the bridge of shared segment ``index``: ``rn-<token>-s<index>``."""
    _check_index(index)
    return f"{NS_PREFIX}{token}-s{index}"


def link_ns(token: str, index: int) -> str:
    """Namespace between the two ends of a relayed link: ``rn-<token>-l<index>``."""
    _check_index(index)
    return f"{NS_PREFIX}{token}-l{index}"


def host_ifname(link: Link, host: str) -> str:
    """Interface of ``link`` inside ``host``: ``rn<i>-<peer>`` (two hosts) or ``rn<i>`` (segment)."""
    _check_index(link.index)
    if link.shared:
        return f"rn{link.index}"
    if host not in link.hosts:
        raise TopologyError(f"host {host!r} is not on link {link.index} ({' <-> '.join(link.hosts)})")
    peer = link.hosts[1] if link.hosts[0] == host else link.hosts[0]
    check_host_name(peer)
    name = f"rn{link.index}-{peer}"
    assert len(name) <= IFNAME_MAX, name  # rn + 3 digits + - + 8 chars = 14
    return name


def bridge_name(index: int) -> str:
    """The bridge of shared segment ``index`` (in the segment namespace)."""
    _check_index(index)
    return f"rn{index}br"


def port_ifname(index: int, position: int) -> str:
    """Bridge port of the host at ``position`` in segment ``index``: ``rn<i>p<j>``."""
    _check_index(index)
    if not 0 <= position < MAX_HOSTS_PER_LINK:
        raise TopologyError(f"host position {position} on link {index} is out of range; expected 0..253")
    return f"rn{index}p{position}"


def relay_ifnames(index: int) -> tuple[str, str]:
    """The two interfaces of a relayed link's namespace: towards hosts[0] and towards hosts[1]."""
    _check_index(index)
    return f"rn{index}a", f"rn{index}b"


def overlay_ifname(index: int) -> str:
    """The overlay (VXLAN) device of link ``index`` inside each of its hosts: ``rnv<i>``."""
    _check_overlay_index(index)
    return f"rnv{index}"


def _check_overlay_index(index: int) -> None:
    if not 0 <= index < MAX_OVERLAY_LINK:
        raise TopologyError(f"link {index} cannot carry an overlay; expected a link index below {MAX_OVERLAY_LINK} "
                            f"(overlay subnets are 198.19.{OVERLAY_BASE}.0/24 .. 198.19.255.0/24)")


def overlay_subnet(index: int) -> ipaddress.IPv4Network:
    """``198.19.<128+i>.0/24``: the overlay subnet of link ``index``."""
    _check_overlay_index(index)
    return ipaddress.IPv4Network(f"198.19.{OVERLAY_BASE + index}.0/24")


def overlay_address(index: int, position: int) -> ipaddress.IPv4Address:
    """Overlay address of the host at ``position`` on link ``index``: ``.<position+1>``."""
    if not 0 <= position < MAX_HOSTS_PER_LINK:
        raise TopologyError(f"host position {position} on link {index} is out of range; expected 0..253")
    return overlay_subnet(index).network_address + position + 1


def has_overlay(link: Link) -> bool:
    return getattr(link, "overlay", "none") != "none"


def reach_address(link: Link, position: int) -> ipaddress.IPv4Address:
    """The address other hosts use for the host at ``position`` of ``link``: overlay if it has one."""
    if has_overlay(link):
        return overlay_address(link.index, position)
    return host_address(link.index, position)


def subnet(index: int) -> ipaddress.IPv4Network:
    """``198.18.<i>.0/24`` for i < 256, else ``198.19.<i-256>.0/24``."""
    _check_index(index)
    if index < 256:
        return ipaddress.IPv4Network(f"198.18.{index}.0/24")
    return ipaddress.IPv4Network(f"198.19.{index - 256}.0/24")


def host_address(index: int, position: int) -> ipaddress.IPv4Address:
    """Address of the host at ``position`` in link ``index``'s host list: ``.<position+1>``."""
    if not 0 <= position < MAX_HOSTS_PER_LINK:
        raise TopologyError(f"host position {position} on link {index} is out of range; expected 0..253")
    return subnet(index).network_address + position + 1


def check_names(token: str, hosts: Sequence[str], links: Sequence[Link]) -> None:
    """Reject what would give two objects the same name or an address clash."""
    check_token(token)
    seen: set[str] = set()
    for h in hosts:
        check_host_name(h)
        if h in seen:
            raise TopologyError(f"host {h!r} is declared twice; expected unique host names")
        seen.add(h)
    indices: set[int] = set()
    for link in links:
        _check_index(link.index)
        if link.index in indices:
            raise TopologyError(f"link index {link.index} appears twice; expected unique link indices")
        indices.add(link.index)
        if len(link.hosts) < 2 or len(link.hosts) > MAX_HOSTS_PER_LINK:
            raise TopologyError(
                f"link {link.index} has {len(link.hosts)} hosts; expected 2..{MAX_HOSTS_PER_LINK}"
            )
        if len(set(link.hosts)) != len(link.hosts):
            raise TopologyError(f"link {link.index} names a host twice: {list(link.hosts)}")
        for h in link.hosts:
            if h not in seen:
                raise TopologyError(f"link {link.index} names unknown host {h!r}; expected one of {sorted(seen)}")
    overlays = [lk.index for lk in links if has_overlay(lk)]
    if overlays:
        for i in overlays:
            _check_overlay_index(i)
        if max(lk.index for lk in links) >= MAX_LINKS_WITH_OVERLAY:
            raise TopologyError(
                f"a run with an overlay (links {overlays}) may have link indices up to {MAX_LINKS_WITH_OVERLAY - 1}; "
                f"expected fewer links (the overlay subnets use 198.19.{OVERLAY_BASE}.0/17)")
    # Host namespaces and the segment/link namespaces share the rn-<token>- prefix:
    # a host called "s0" or "l1" would collide with them.
    extra = {f"s{link.index}" for link in links} | {f"l{link.index}" for link in links}
    clash = sorted(seen & extra)
    if clash:
        raise TopologyError(
            f"host name(s) {clash} collide with the namespaces of segments/links (s<i>, l<i>); "
            f"expected host names that are not 's' or 'l' followed by a link index"
        )


@dataclass(frozen=True)
class Route:
    """A static route inside ``host``: ``dest`` via ``gateway`` out of ``ifname``."""

    host: str
    dest: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address
    ifname: str
    link: int  # the link the gateway is on


def _adjacency(hosts: Sequence[str], links: Sequence[Link]) -> dict[str, list[tuple[str, Link]]]:
    """host -> [(neighbour, link)] in link order, then host order (deterministic)."""
    adj: dict[str, list[tuple[str, Link]]] = {h: [] for h in hosts}
    for link in sorted(links, key=lambda lk: lk.index):
        for a in link.hosts:
            for b in link.hosts:
                if a != b:
                    adj[a].append((b, link))
    return adj


def _bfs(src: str, adj: dict[str, list[tuple[str, Link]]]) -> dict[str, tuple[str, Link] | None]:
    """For each host reachable from ``src``: (previous host, link used to arrive), src -> None."""
    prev: dict[str, tuple[str, Link] | None] = {src: None}
    todo = deque([src])
    while todo:
        h = todo.popleft()
        for n, link in adj[h]:
            if n not in prev:
                prev[n] = (h, link)
                todo.append(n)
    return prev


def _first_hop(src: str, dst: str, prev: dict[str, tuple[str, Link] | None]) -> tuple[str, Link]:
    """The neighbour of ``src`` on the shortest path to ``dst``, and the link to it."""
    node = dst
    while True:
        step = prev[node]
        assert step is not None
        before, link = step
        if before == src:
            return node, link
        node = before


def plan_routes(hosts: Sequence[str], links: Sequence[Link]) -> list[Route]:
    """Static routes so every host reaches every link's subnet over the fewest hops.

    For each host and each subnet it is not on: find the nearest host on that
    subnet (breadth-first, ties broken by link order then host order) and route
    via the first hop of the path to it.  Subnets in another connected component
    get no route (they are unreachable, as the scenario wrote them).
    """
    adj = _adjacency(hosts, links)
    routes: list[Route] = []
    for src in hosts:
        prev = _bfs(src, adj)
        order = list(prev)  # BFS order: nearest first
        for link in sorted(links, key=lambda lk: lk.index):
            if src in link.hosts:
                continue
            target = next((h for h in order if h in link.hosts), None)
            if target is None:
                continue
            hop, via = _first_hop(src, target, prev)
            # The next hop is reached over the link's overlay when it has one (as a CNI
            # routes pod traffic through its VXLAN device), else over the link itself.
            gateway = reach_address(via, via.hosts.index(hop))
            ifname = overlay_ifname(via.index) if has_overlay(via) else host_ifname(via, src)
            dests = [subnet(link.index)] + ([overlay_subnet(link.index)] if has_overlay(link) else [])
            for dest in dests:
                routes.append(Route(host=src, dest=dest, gateway=gateway, ifname=ifname, link=via.index))
    return routes


def address_seen_from(host: str, seen_from: str, hosts: Sequence[str], links: Sequence[Link],
                      paths: Callable[[str], dict[str, tuple[str, Link] | None]] | None = None
                      ) -> ipaddress.IPv4Address:
    """Address of ``host`` that ``seen_from`` should use: on the last link of the shortest path.

    For neighbours that is their address on the first link they share; for a
    host reaching itself, its address on its first link.  On a link with an
    overlay it is the overlay address (traffic then goes through the VXLAN device).
    ``paths(src)``: the breadth-first search from ``src`` if the caller keeps them (``Paths``).
    """
    mine = [lk for lk in sorted(links, key=lambda lk: lk.index) if host in lk.hosts]
    if not mine:
        raise TopologyError(f"host {host!r} is on no link, so it has no address")
    if host == seen_from:
        return reach_address(mine[0], mine[0].hosts.index(host))
    prev = paths(seen_from) if paths is not None else _bfs(seen_from, _adjacency(hosts, links))
    step = prev.get(host)
    if step is None:
        raise TopologyError(f"host {host!r} cannot be reached from {seen_from!r}: no chain of links joins them")
    _, link = step
    return reach_address(link, link.hosts.index(host))


def veth_mac(link_index: int, position: int, side: int) -> str:
    """The MAC of a veth end roughnet makes: locally administered, unicast, unique within a run.

    ``02:LL:LL:PP:PP:SS``: link index, the host's position on the link (for a two-host relayed
    link, the end: 0 or 1), and the side (0: the end made first, in the host; 1: its peer).
    Known without asking the kernel, so static neighbours need no lookups.
    """
    if not (0 <= link_index < 1 << 16 and 0 <= position < 1 << 16 and 0 <= side < 256):
        raise ValueError(f"veth_mac({link_index}, {position}, {side}): out of range")
    return (f"02:{link_index >> 8:02x}:{link_index & 0xff:02x}:{position >> 8:02x}:{position & 0xff:02x}:"
            f"{side:02x}")


class Paths:
    """Shortest paths of one topology, each source's search made once (a 100-host run asks for 99
    addresses from the same sender: one search instead of 99)."""

    def __init__(self, hosts: Sequence[str], links: Sequence[Link]):
        self._adj = _adjacency(hosts, links)
        self._prev: dict[str, dict[str, tuple[str, Link] | None]] = {}

    def __call__(self, src: str) -> dict[str, tuple[str, Link] | None]:
        if src not in self._prev:
            self._prev[src] = _bfs(src, self._adj)
        return self._prev[src]
