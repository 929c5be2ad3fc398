"""Host-name patterns in a workload's ``from`` and ``to`` and a link's ``between``: fleets in one stanza.

This module owns the patterns (issue 16, all-to-all vehicle messages): in ``from`` and ``to`` (a
string or entries of a list) a name holding ``*`` or ``?`` stands for every ``[[host]]`` whose name
matches it (shell-style, ``fnmatch``), in ``[[host]]`` order; ``"*"`` is every host. A fleet where
every car publishes to every other car and to the roadside units is then::

    [[workload]]
    pattern = "stream"
    protocol = "udp"
    from = "car*"       # every car sends
    to = "*"            # to every host other than itself

``between = ["*"]`` puts every host on one segment. The expansion happens on the file's data before the
model sees it (``expand``), so everything after works on plain host lists. With several senders ``to``
may name senders: each sender's flow goes to the hosts of ``to`` other than itself (``spec.checks``,
``run.timeline.plan_flows``). A pattern that matches no host is refused naming the key.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from .problems import Problem

__all__ = ["expand", "is_pattern"]

_KEYS = ("from", "to")


def is_pattern(value: Any) -> bool:
    """A string with a ``*`` or ``?`` (and no placeholder: ``${..}`` is the sweep's)."""
    return isinstance(value, str) and ("*" in value or "?" in value) and "${" not in value


def _hosts(data: dict[str, Any]) -> list[str]:
    hosts = data.get("host")
    if not isinstance(hosts, list):
        return []
    return [h["name"] for h in hosts if isinstance(h, dict) and isinstance(h.get("name"), str)]


def _expand_value(value: Any, hosts: list[str], path: str, problems: list[Problem]) -> Any:
    entries = value if isinstance(value, list) else [value]
    if not any(is_pattern(e) for e in entries):
        return value
    out: list[Any] = []
    for j, e in enumerate(entries):
        if not is_pattern(e):
            if e not in out:
                out.append(e)
            continue
        matched = [h for h in hosts if fnmatch.fnmatchcase(h, e)]
        if not matched:
            where = f"{path}[{j}]" if isinstance(value, list) else path
            problems.append(Problem(where, "the pattern matches no host",
                                    "a host name pattern ('*' any characters, '?' one) matching some [[host]] name ("
                                    + (", ".join(hosts) or "none declared") + ")", e))  # fmt: skip
        out.extend(h for h in matched if h not in out)
    return out


def expand(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """The data with every pattern of a link's ``between`` and a workload's ``from`` / ``to`` replaced by the
    host names it matches (``workload``, a table or a list of them; ``workloads``), and a problem per pattern
    matching nothing."""
    problems: list[Problem] = []
    hosts = _hosts(data)
    out = dict(data)

    def one(table: Any, path: str) -> Any:
        if not isinstance(table, dict):
            return table
        new = dict(table)
        for key in _KEYS:
            if key in new:
                new[key] = _expand_value(new[key], hosts, f"{path}.{key}", problems)
        return new

    links = data.get("link")
    if isinstance(links, list):
        out["link"] = [{**t, "between": _expand_value(t["between"], hosts, f"link[{i}].between", problems)}
                       if isinstance(t, dict) and "between" in t else t for i, t in enumerate(links)]  # fmt: skip
    for key in ("workload", "workloads"):
        value = data.get(key)
        if isinstance(value, list):
            base = "workloads" if key == "workloads" else "workload"
            out[key] = [one(t, f"{base}[{i}]") for i, t in enumerate(value)]
        elif value is not None:
            out[key] = one(value, key)
    return out, problems
