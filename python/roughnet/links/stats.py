"""Reading counters inside a namespace: tc qdisc stats, interface stats, nftables counters.

Owns parsing the JSON of ``tc -s -j``, ``ip -s -j link`` and ``nft -j``; the
engines decide what the numbers mean.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import LinkError
from ..topo.system import ns_exec, run_cmd


def _json(argv: list[str], what: str) -> Any:
    out = run_cmd(argv, what, error=LinkError).stdout
    try:
        return json.loads(out) if out.strip() else []
    except json.JSONDecodeError as e:
        raise LinkError(f"{what}: `{' '.join(argv)}` printed no JSON ({e}): {out[:200]!r}") from e


def root_qdisc(ns: str, ifname: str) -> dict[str, Any]:
    """The root qdisc of ``ifname`` with its stats (``drops``, ``packets``, ``overlimits``, ...)."""
    rows = _json(["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", ifname], f"reading qdisc stats of {ns}/{ifname}")
    for row in rows:
        if row.get("root"):
            return row
    return {}


def iface_stats(ns: str, ifname: str) -> dict[str, int]:
    """rx/tx packets and bytes of ``ifname`` (stats64)."""
    rows = _json(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", ifname], f"reading stats of {ns}/{ifname}")
    s = rows[0].get("stats64", {}) if rows else {}
    rx, tx = s.get("rx", {}), s.get("tx", {})
    return {
        "rx_packets": int(rx.get("packets", 0)),
        "rx_bytes": int(rx.get("bytes", 0)),
        "tx_packets": int(tx.get("packets", 0)),
        "tx_bytes": int(tx.get("bytes", 0)),
    }


def nft_comment_counters(ns: str, family: str, table: str) -> dict[tuple[str, str], int]:
    """(chain, rule comment) -> packet count of every counter in ``table`` (empty if no table)."""
    proc = run_cmd(ns_exec(ns, ["nft", "-j", "list", "table", family, table]), f"reading nftables counters in {ns}",
                   check=False, error=LinkError)
    if proc.returncode != 0:
        if "No such file" in proc.stderr or "does not exist" in proc.stderr:
            return {}
        raise LinkError(f"reading nftables table {family} {table} in {ns} failed: {proc.stderr.strip()}")
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise LinkError(f"nft -j printed no JSON in {ns}: {e}") from e
    out: dict[tuple[str, str], int] = {}
    for item in doc.get("nftables", []):
        rule = item.get("rule")
        if not rule:
            continue
        packets = next((e["counter"]["packets"] for e in rule.get("expr", []) if "counter" in e), None)
        if packets is not None:
            out[(rule.get("chain", ""), rule.get("comment", ""))] = int(packets)
    return out


def _iface_row_stats(row: dict[str, Any]) -> dict[str, int]:
    s = row.get("stats64", {})
    rx, tx = s.get("rx", {}), s.get("tx", {})
    return {"rx_packets": int(rx.get("packets", 0)), "rx_bytes": int(rx.get("bytes", 0)),
            "tx_packets": int(tx.get("packets", 0)), "tx_bytes": int(tx.get("bytes", 0))}


class Snapshot:
    """The counters of many namespaces read together: one ``ip -s -j link``, one ``tc -s -j qdisc`` and one
    ``nft -j list table`` per namespace (not per interface), several namespaces at a time (``prefetch``);
    then ``iface_stats``, ``root_qdisc`` and ``nft_comment_counters`` answer from what was read, as the
    functions of the same names would."""

    def __init__(self) -> None:
        self._links: dict[str, dict[str, dict[str, int]]] = {}
        self._qdiscs: dict[str, dict[str, dict[str, Any]]] = {}
        self._nft: dict[tuple[str, str, str], dict[tuple[str, str], int]] = {}

    def prefetch(self, links: set[str] = frozenset(), qdiscs: set[str] = frozenset(),
                 nft: set[tuple[str, str, str]] = frozenset()) -> None:
        """Read interface stats of the namespaces ``links``, root qdiscs of ``qdiscs`` and the nftables
        tables ``nft`` ((ns, family, table)), a few at a time."""
        from ..topo.system import run_all

        jobs = [lambda ns=ns: self._read_links(ns) for ns in sorted(links) if ns not in self._links]
        jobs += [lambda ns=ns: self._read_qdiscs(ns) for ns in sorted(qdiscs) if ns not in self._qdiscs]
        jobs += [lambda key=key: self._read_nft(*key) for key in sorted(nft) if key not in self._nft]
        run_all(jobs)

    def _read_links(self, ns: str) -> None:
        rows = _json(["ip", "-n", ns, "-s", "-j", "link", "show"], f"reading interface stats in {ns}")
        self._links[ns] = {row.get("ifname", ""): _iface_row_stats(row) for row in rows}

    def _read_qdiscs(self, ns: str) -> None:
        rows = _json(["tc", "-n", ns, "-s", "-j", "qdisc", "show"], f"reading qdisc stats in {ns}")
        self._qdiscs[ns] = {row.get("dev", ""): row for row in rows if row.get("root")}

    def _read_nft(self, ns: str, family: str, table: str) -> None:
        self._nft[(ns, family, table)] = nft_comment_counters(ns, family, table)

    def iface_stats(self, ns: str, ifname: str) -> dict[str, int]:
        if ns not in self._links:
            self._read_links(ns)
        try:
            return self._links[ns][ifname]
        except KeyError:
            raise LinkError(f"reading stats of {ns}/{ifname}: no such interface in {ns}") from None

    def root_qdisc(self, ns: str, ifname: str) -> dict[str, Any]:
        if ns not in self._qdiscs:
            self._read_qdiscs(ns)
        return self._qdiscs[ns].get(ifname, {})

    def nft_comment_counters(self, ns: str, family: str, table: str) -> dict[tuple[str, str], int]:
        if (ns, family, table) not in self._nft:
            self._read_nft(ns, family, table)
        return self._nft[(ns, family, table)]
