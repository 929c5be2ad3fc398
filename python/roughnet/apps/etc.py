"""The /etc files a host's programs see: its /etc/hosts (every host of the run by name) and a resolv.conf that
fails a lookup at once; as /etc/netns/<ns>/ files for a process (``ip netns exec`` binds them) or as text for an
image's bundle (``apps.images``)."""

from __future__ import annotations

from pathlib import Path

from ..errors import RoughnetError

ETC_NETNS = Path("/etc/netns")
#: A resolv.conf for the namespaces: no DNS server is reachable there, so a lookup of an unknown name
#: fails at once (connection refused on 127.0.0.1) instead of waiting for a timeout.
RESOLV_CONF = "# written by roughnet: no DNS inside the run's namespaces; names are in /etc/hosts\n" \
              "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"


def hosts_file(topology, run, host: str) -> str:
    """/etc/hosts for ``host``: every host of the run by the address it has as seen from ``host``."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    for h in run.host_names():
        try:
            addr = "127.0.1.1" if h == host else topology.address(h, host)
        except (RoughnetError, KeyError, ValueError):
            continue
        lines.append(f"{addr}\t{h}")
    return "# written by roughnet for host " + host + "\n" + "\n".join(lines) + "\n"


def write_etc(topology, run, host: str, ledger) -> Path:
    """/etc/netns/<ns>/{hosts,resolv.conf} for the commands of ``host`` (ledgered as a path to remove)."""
    ns = topology.ns(host)
    folder = ETC_NETNS / ns
    ledger.add("path", path=str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hosts").write_text(hosts_file(topology, run, host))
    (folder / "resolv.conf").write_text(RESOLV_CONF)
    return folder
