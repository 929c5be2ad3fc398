"""Checks that involve several keys of a scenario (the model checks single values).

This module owns the rules between keys: unique host names, links naming known
and distinct hosts, jitter needing delay, what each workload pattern requires
and forbids, payload limits, knob tables matching the protocol (a swept
protocol: ``plan`` keeps each run's own table and checks that every table is
some run's), sender and
receivers connected through links, the run finishing within the timeout,
[[service]] rules (a known and connected host, one service per kind, the run's
protocol finding its service, MQTT TLS on both sides; a service no run uses is
``plan``'s) and [report] hints naming sweep keys.  A value still holding a placeholder is
skipped here; the same checks run again on every expanded run, where none is
left.  Machine-dependent checks (is there sch_netem?) are preflight's, not ours.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

from .. import units
from .kinds import has_placeholder
from .directions import merged_direction
from .model import DIRECTION_KEYS, KNOB_TABLES, DirectionTable, EventTable, Scenario, WorkloadTable
from .problems import Problem
from .processes import check_processes
from .receivers import receivers
from .services import needed_kind
from .syncspec import check_sync
from .sweep import axes_of
from .overlay import check_overlay
from .positions import check_positions
from .wirechecks import check_wire_link

HEADER_BYTES = 32  # the agent's message header (docs/agent-protocol.md)
UDP_MAX_PAYLOAD = 65507  # largest UDP datagram over IPv4
#: The largest message the agent's driver for each protocol carries (``max_message_bytes`` in
#: crates/agent/src/drivers/; docs/protocols.md, "Largest message"), and why.
MAX_PAYLOAD: dict[str, tuple[int, str]] = {
    "udp": (UDP_MAX_PAYLOAD, ""),  # "larger than a UDP datagram can carry" says why
    "kafka": (8 << 20, " (the agent's Kafka limit; the broker roughnet starts takes batches of 8 MiB + 64 KiB)"),
    "nats": (1 << 20, " (nats-server's default max_payload)"),
    **{p: (64 << 20, " (the agent's limit)") for p in ("tcp", "mqtt", "zenoh", "zmq", "dds")},
    "ros2": (64 << 20, " (the ROS 2 endpoint's limit)"),
}
#: Patterns of the protocols whose endpoints do not have every pattern yet (roughnet.ros2.endpoint).
PROTOCOL_PATTERNS: dict[str, tuple[str, ...]] = {"ros2": ("stream", "ping", "ramp", "bulk")}
MSS_MIN, MSS_MAX = 88, 65535


def _concrete(*values: Any) -> bool:
    return not any(has_placeholder(v) for v in values) and not any(
        isinstance(v, list) and any(has_placeholder(x) for x in v) for v in values
    )


def check_scenario(s: Scenario) -> list[Problem]:
    problems: list[Problem] = []
    hosts = _check_hosts(s, problems)
    _check_links(s, hosts, problems)
    check_positions(s, problems)
    for path, view in workload_views(s):
        found: list[Problem] = []
        _check_workload(view, hosts, found)
        _check_services(view, hosts, found)
        problems += [_at_path(p, path) for p in found]
    if s.workload is None and not s.process:
        problems.append(Problem("workload", "missing: a scenario needs a [workload] (roughnet's agents) or "
                                "[[process]] entries (your own programs)", "a [workload] table or [[process]] "
                                "tables"))
    _check_timeline(s, hosts, problems)
    _check_agents(s, problems)
    if s.process:
        check_processes(s.process, hosts, {svc.kind for svc in s.service}, problems, s.scenario.timeout)
    _check_report(s, problems)
    return problems


def workload_tables(s: Scenario) -> list[tuple[str, WorkloadTable]]:
    """(key path, table) of every workload: ``workload``, then ``workloads[i]`` (the later ``[[workload]]`` entries)."""
    if s.workload is None:  # a scenario of [[process]] entries only
        return []
    return [("workload", s.workload), *((f"workloads[{i}]", w) for i, w in enumerate(s.workloads or []))]


def workload_name(index: int, table: WorkloadTable) -> str:
    """A workload's name: its ``name``, else w1, w2, ... in file order."""
    return table.name if table.name is not None else f"w{index + 1}"


def senders_of(from_: Any) -> list[Any]:
    """The sending hosts ``from`` names (one name or a list)."""
    return list(from_) if isinstance(from_, list) else [from_]


def workload_views(s: Scenario) -> Iterator[tuple[str, Scenario]]:
    """Per workload and sender, the scenario as if it had only that workload with only that sender (the
    single-workload checks then apply unchanged), with the workload's key path."""
    for path, w in workload_tables(s):
        senders = senders_of(w.from_)
        for sender in senders:
            update: dict[str, Any] = {"from_": sender}
            to = receivers(w.to) if not isinstance(w.to, dict) else []
            if len(senders) > 1 and sender in to:  # each sender to the others (spec.groups)
                update["to"] = [h for h in to if h != sender]
            yield path, s.model_copy(update={"workload": w.model_copy(update=update)})


def _at_path(p: Problem, path: str) -> Problem:
    if path == "workload" or not (p.path == "workload" or p.path.startswith(("workload.", "workload["))):
        return p
    return dataclasses.replace(p, path=path + p.path[len("workload"):])


#: Event actions by what they act on, and the actions that end each interrupting one (``for``).
EVENT_KINDS = {"down": "link", "up": "link", "set": "link", "isolate": "host", "rejoin": "host", "kill": "service",
               "stop": "service", "start": "service", "pause": "service", "resume": "service",
               "restart": "service"}  # fmt: skip
UNDO = {"down": "up", "isolate": "rejoin", "kill": "start", "stop": "start", "pause": "resume"}


def event_kind(e: EventTable) -> str:
    """link, host, service, process (an action with ``process``) or agent (a kill with ``workload``)."""
    if e.process is not None and EVENT_KINDS[e.action] == "service":
        return "process"
    return "agent" if e.action == "kill" and e.workload is not None else EVENT_KINDS[e.action]


def _check_timeline(s: Scenario, hosts: set[str] | None, problems: list[Problem]) -> None:
    """Workload names, starts and senders; every event's target exists, its keys fit its action, it is in the run."""
    names: dict[str, int] = {}
    tables = workload_tables(s)
    timeout = units.parse_duration_ns(s.scenario.timeout)
    if s.scenario.series_interval is not None and units.parse_duration_ns(s.scenario.series_interval) < 10_000_000:
        problems.append(Problem("scenario.series_interval", "shorter than 10 ms", "an interval of at least 10 ms",
                                s.scenario.series_interval))  # fmt: skip
    for i, (path, w) in enumerate(tables):
        name = workload_name(i, w)
        if name in names:
            problems.append(Problem(f"{path}.name", f"a second workload named {name!r}", "distinct workload names",
                                    name))  # fmt: skip
        names.setdefault(name, i)
        senders = senders_of(w.from_)
        if len(senders) > 1 and _concrete(w.pattern) and w.pattern not in ("stream", "bulk"):
            problems.append(Problem(f"{path}.from", f"pattern \"{w.pattern}\" has one sender",
                                    "a single host name (several senders: stream or bulk)", w.from_))  # fmt: skip
        if len(set(map(str, senders))) != len(senders):
            problems.append(Problem(f"{path}.from", "sender listed twice", "distinct senders", w.from_))
        elif len(senders) > 1 and not isinstance(w.to, dict) and _concrete(w.from_, w.to):
            alone = [h for h in senders if not [r for r in receivers(w.to) if r != h]]
            if alone:
                problems.append(Problem(f"{path}.to", f"sender {alone[0]!r} has no receiver other than itself",
                                        "at least one receiver besides each sender", w.to))  # fmt: skip
        if w.start is not None and _concrete(w.start) and units.parse_duration_ns(w.start) >= timeout:
            problems.append(Problem(f"{path}.start", f"not before the end of the run ([scenario] timeout "
                                    f"{s.scenario.timeout})", "a start time within the run", w.start))  # fmt: skip
        if len(tables) > 1 and _concrete(w.pattern) and w.pattern in ("ping", "ramp", "sync"):
            problems.append(Problem(f"{path}.pattern", f"pattern \"{w.pattern}\" in a run of several workloads",
                                    "stream or bulk workloads (ping, ramp and sync run alone for now)",
                                    w.pattern))  # fmt: skip
    scheduled = {i for i, link in enumerate(s.link) if link.schedule}
    kinds_declared = {svc.kind for svc in s.service}
    for i, e in enumerate(s.event or []):
        path = f"event[{i}]"
        kind = event_kind(e)
        if _concrete(e.at) and units.parse_duration_ns(e.at) >= timeout:
            problems.append(Problem(f"{path}.at", f"after the end of the run ([scenario] timeout {s.scenario.timeout})",
                                    "a time within the run", e.at))  # fmt: skip
        if e.for_ is not None:
            if e.action not in UNDO:
                problems.append(Problem(f"{path}.for", f"action \"{e.action}\" has nothing to undo",
                                        "for with down, isolate, kill, stop or pause", e.for_))  # fmt: skip
            elif _concrete(e.at, e.for_) and (units.parse_duration_ns(e.at) + units.parse_duration_ns(e.for_)
                                                 >= timeout):
                problems.append(Problem(f"{path}.for", f"the {UNDO[e.action]} would come after the end of the run "
                                        f"([scenario] timeout {s.scenario.timeout})", "at + for within the run",
                                        e.for_))  # fmt: skip
        wanted = {"link": ("link",), "host": ("host",), "service": ("service",), "agent": ("workload", "host"),
                  "process": ("process",)}[kind]
        for key in ("link", "host", "service", "workload", "process"):
            value = getattr(e, key)
            if key in wanted and value is None:
                problems.append(Problem(f"{path}.{key}", f"missing key: a {kind} action ({e.action}) needs {key}",
                                        _EVENT_TARGET[key]))  # fmt: skip
            elif key not in wanted and value is not None:
                problems.append(Problem(f"{path}.{key}", f"not used by a {kind} action ({e.action})",
                                        f"only {', '.join(wanted)} for {e.action}", value))  # fmt: skip
        if e.link is not None and e.link >= len(s.link):
            problems.append(Problem(f"{path}.link", "no such link",
                                    f"a link's position from 0 to {len(s.link) - 1}", e.link))  # fmt: skip
        elif e.link is not None and e.link in scheduled:
            problems.append(Problem(f"{path}.link", "the link has a [[link.schedule]]",
                                    "events on links without a schedule (write the changes as events)", e.link))
        if e.host is not None and hosts is not None and _concrete(e.host) and e.host not in hosts:
            problems.append(Problem(f"{path}.host", "unknown host",
                                    "one of the [[host]] names (" + ", ".join(sorted(hosts)) + ")", e.host))
        if e.service is not None and _concrete(e.service) and e.service not in kinds_declared:
            problems.append(Problem(f"{path}.service", "no [[service]] of this kind",
                                    "a declared service kind (" + (", ".join(sorted(kinds_declared)) or "none") + ")",
                                    e.service))  # fmt: skip
        process_names = [p.name for p in s.process or []]
        if e.process is not None and _concrete(e.process) and e.process not in process_names:
            problems.append(Problem(f"{path}.process", "no [[process]] of this name",
                                    "one of " + (", ".join(process_names) or "(none)"), e.process))
        if e.workload is not None and _concrete(e.workload) and e.workload not in names:
            problems.append(Problem(f"{path}.workload", "no workload of this name",
                                    "one of " + ", ".join(names), e.workload))  # fmt: skip
        elif kind == "agent" and e.host is not None and _concrete(e.host, e.workload):
            w = tables[names[e.workload]][1]
            ends = [*senders_of(w.from_), *receivers(w.to)]
            if e.host not in ends:
                problems.append(Problem(f"{path}.host", f"workload {e.workload!r} has no agent on this host",
                                        "one of its senders or receivers (" + ", ".join(map(str, ends)) + ")",
                                        e.host))  # fmt: skip
        sets = [k for k in DIRECTION_KEYS if getattr(e, k) is not None]
        if e.action == "set" and not sets:
            problems.append(Problem(path, "action \"set\" changes nothing", "impairment keys (delay, loss, rate, ...)"))
        elif e.action != "set" and sets:
            problems.append(Problem(f"{path}.{sets[0]}", f"impairment keys only with action \"set\" (not "
                                    f"\"{e.action}\")", "action = \"set\"", getattr(e, sets[0])))  # fmt: skip
        if e.direction != "both" and kind != "link":
            problems.append(Problem(f"{path}.direction", f"not used by a {kind} action", "no direction",
                                    e.direction))  # fmt: skip


_EVENT_TARGET = {
    "link": "link = N, the link's position in the [[link]] list (from 0)",
    "host": "host = \"<a host name>\"",
    "service": "service = \"<a [[service]] kind>\"",
    "workload": "workload = \"<a workload name>\"",
    "process": "process = \"<a [[process]] name>\"",
}


def _check_hosts(s: Scenario, problems: list[Problem]) -> set[str] | None:
    """Host names; None when some are placeholders (then host references are not checked)."""
    seen: dict[str, int] = {}
    concrete = True
    for i, host in enumerate(s.host):
        if not _concrete(host.name):
            concrete = False
            continue
        if host.name in seen:
            problems.append(Problem(f"host[{i}].name", f"same name as host[{seen[host.name]}]",
                                    "a host name used once", host.name))  # fmt: skip
        seen.setdefault(host.name, i)
    return set(seen) if concrete else None


def _check_links(s: Scenario, hosts: set[str] | None, problems: list[Problem]) -> None:
    for i, link in enumerate(s.link):
        path = f"link[{i}]"
        seen: set[str] = set()
        for j, name in enumerate(link.between):
            if not _concrete(name):
                continue
            if hosts is not None and name not in hosts:
                problems.append(Problem(f"{path}.between[{j}]", "unknown host",
                                        "one of the [[host]] names (" + ", ".join(sorted(hosts)) + ")", name))  # fmt: skip
            elif name in seen:
                problems.append(Problem(f"{path}.between[{j}]", "host listed twice",
                                        "distinct host names", name))  # fmt: skip
            seen.add(name)
        for side in ("forward", "reverse"):
            _check_direction(link, getattr(link, side), path, side, problems)
        check_wire_link(link, path, problems)
        check_overlay(link, i, path, problems)


def _check_direction(link: DirectionTable, override: DirectionTable | None, path: str, side: str,
                     problems: list[Problem]) -> None:  # fmt: skip
    d = merged_direction(link, override)
    if d["jitter"] is None or not _concrete(d["jitter"], d["delay"]):
        return
    jitter = units.parse_duration_ns(d["jitter"])
    delay = units.parse_duration_ns(d["delay"]) if d["delay"] is not None else 0
    if jitter <= delay:
        return
    # Point at the key that is written in the file: the direction's own value if it has one.
    key = "jitter" if override is None or override.jitter is not None or override.delay is None else "delay"
    where = f"{path}.{side}.{key}" if override is not None and getattr(override, key) is not None else f"{path}.{key}"
    got = d[key] if d[key] is not None else "(unset: 0)"
    problems.append(Problem(where, "jitter larger than delay" + (f" ({side})" if override is not None else ""),
                            f"a delay at least as large as the jitter ({d['jitter']})", got))  # fmt: skip


# pattern -> (required keys, forbidden keys); "messages|duration" means exactly one of them.
PATTERN_RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "stream": (("messages|duration",), ("interval", "step", "reply_timeout")),
    "ping": (("messages",), ("duration", "rate", "step")),
    "ramp": (("messages", "step", "interval"), ("duration", "rate")),
    "bulk": (("duration",), ("messages", "rate", "interval", "step", "reply_timeout")),
    # sync: duration is optional (the window)
    "sync": (("sync",), ("messages", "rate", "interval", "step", "reply_timeout")),
}
SINGLE_RECEIVER = ("ping", "ramp", "sync")


def _check_workload(s: Scenario, hosts: set[str] | None, problems: list[Problem]) -> None:
    w = s.workload
    to = receivers(w.to)
    # Hosts: from, to, connectivity.
    if hosts is not None:
        if _concrete(w.from_) and w.from_ not in hosts:
            problems.append(Problem("workload.from", "unknown host",
                                    "one of the [[host]] names (" + ", ".join(sorted(hosts)) + ")", w.from_))  # fmt: skip
        for j, name in enumerate(to):
            tpath = (f"workload.to.of[{j}]" if isinstance(w.to, dict) else f"workload.to[{j}]"
                     if not isinstance(w.to, str) else "workload.to")
            if not _concrete(name):
                continue
            if name not in hosts:
                problems.append(Problem(tpath, "unknown host",
                                        "one of the [[host]] names (" + ", ".join(sorted(hosts)) + ")", name))  # fmt: skip
            elif name == w.from_:
                problems.append(Problem(tpath, "the sender is also a receiver",
                                        "receivers other than `from`", name))  # fmt: skip
            elif name in to[:j]:
                problems.append(Problem(tpath, "receiver listed twice", "distinct receivers", name))
        if isinstance(w.to, dict):  # hosts of `of` beyond the first n exist too (another run may use them)
            for j, name in enumerate(w.to.get("of") or []):
                if _concrete(name) and name not in hosts and name not in to:
                    problems.append(Problem(f"workload.to.of[{j}]", "unknown host",
                                            "one of the [[host]] names (" + ", ".join(sorted(hosts)) + ")", name))
        if _concrete(w.from_, to) and all(_concrete(link.between) for link in s.link):
            for name in to:
                if name in hosts and w.from_ in hosts and name != w.from_ and not _connected(s, w.from_, name):
                    problems.append(Problem("workload.to", f"no path through links from {w.from_!r} to {name!r}",
                                            "hosts connected by [[link]]s (directly or over several hops)",
                                            name))  # fmt: skip
    if not _concrete(w.pattern):
        return
    if _concrete(w.protocol) and w.pattern not in PROTOCOL_PATTERNS.get(w.protocol, (w.pattern,)):
        problems.append(Problem("workload.pattern", f"protocol \"{w.protocol}\" has no pattern \"{w.pattern}\" yet",
                                "one of " + ", ".join(f'"{p}"' for p in PROTOCOL_PATTERNS[w.protocol]),
                                w.pattern))  # fmt: skip
    required, forbidden = PATTERN_RULES[w.pattern]
    for req in required:
        options = req.split("|")
        given = [k for k in options if getattr(w, k) is not None]
        if len(options) > 1 and len(given) != 1:
            problems.append(Problem("workload", f"pattern \"{w.pattern}\" needs exactly one of "
                                    + " or ".join(options) + (" (both given)" if given else " (neither given)"),
                                    "either messages = N or duration = '10 s'"))  # fmt: skip
        elif len(options) == 1 and not given:
            problems.append(Problem(f"workload.{req}", f"missing key: pattern \"{w.pattern}\" needs {req}",
                                    _KEY_EXPECTED[req]))  # fmt: skip
    for key in forbidden:
        if key == "rate" and w.pattern == "bulk" and _is_max(w.rate):
            continue  # "max" is what bulk does: a file may sweep UDP streams against TCP bulk (SEEDS S1)
        if getattr(w, key) is not None:
            problems.append(Problem(f"workload.{key}", f"not used by pattern \"{w.pattern}\"",
                                    f"no {key} for {w.pattern} (it is for: "
                                    + ", ".join(p for p, (_, f) in PATTERN_RULES.items() if key not in f) + ")",
                                    getattr(w, key)))  # fmt: skip
    if w.pattern in SINGLE_RECEIVER and len(to) != 1 and _concrete(*(w.to.values() if isinstance(w.to, dict) else ())):
        problems.append(Problem("workload.to", f"pattern \"{w.pattern}\" has exactly one receiver",
                                "a single host name", w.to))  # fmt: skip
    _check_payload(s, problems)
    check_sync(w, _concrete, problems)
    _check_knobs(s, problems)
    _check_timeout(s, problems)
    _check_reply_timeout(s, problems)


def _check_reply_timeout(s: Scenario, problems: list[Problem]) -> None:
    """The agent counts the reply timeout in whole milliseconds, at least 1, and it cannot outlast the run."""
    value = s.workload.reply_timeout
    if value is None or not _concrete(value):
        return
    ns = units.parse_duration_ns(value)
    expected = "a duration of whole milliseconds from 1 ms to the [scenario] timeout, like '1 s' or '250 ms'"
    if ns < 1_000_000:
        problems.append(Problem("workload.reply_timeout", "shorter than 1 ms", expected, value))
    elif ns % 1_000_000:
        problems.append(Problem("workload.reply_timeout", "not a whole number of milliseconds", expected, value))
    elif ns > units.parse_duration_ns(s.scenario.timeout):
        problems.append(Problem("workload.reply_timeout", f"longer than the timeout ({s.scenario.timeout})",
                                expected, value))  # fmt: skip


def _is_max(rate: object) -> bool:
    return isinstance(rate, str) and rate.strip().lower() == "max"


_KEY_EXPECTED = {
    "messages": "an integer >= 1",
    "duration": "a duration like '10 s'",
    "interval": "a duration like '10 ms'",
    "step": "a size like '1 KiB'",
    "sync": "a [workload.sync] table with bundles = N",
}


def _check_payload(s: Scenario, problems: list[Problem]) -> None:
    w = s.workload
    if not _concrete(w.payload):
        return
    payload = units.parse_size_bytes(w.payload)
    if payload < HEADER_BYTES:
        problems.append(Problem("workload.payload", "smaller than the message header",
                                f"at least {HEADER_BYTES} B", w.payload))  # fmt: skip
    if not _concrete(w.protocol) or w.protocol not in MAX_PAYLOAD:
        return
    limit, why = MAX_PAYLOAD[w.protocol]
    name = "UDP" if w.protocol == "udp" else w.protocol
    what = "larger than a UDP datagram can carry" if w.protocol == "udp" else \
        f"larger than protocol {w.protocol} carries in one message"
    if payload > limit:
        problems.append(Problem("workload.payload", what, f"at most {limit} B for {name}{why}", w.payload))
    elif w.pattern == "ramp" and _concrete(w.step, w.messages) and w.step is not None and w.messages is not None:
        final = payload + units.parse_size_bytes(w.step) * (w.messages - 1)
        if final > limit:
            problems.append(Problem("workload.step", f"the last message of the ramp would be {final} B",
                                    f"payload + step * (messages - 1) at most {limit} B for {name}",
                                    w.step))  # fmt: skip


def _check_knobs(s: Scenario, problems: list[Problem]) -> None:
    w = s.workload
    for proto in KNOB_TABLES:
        table = getattr(w, proto, None)
        if table is None or not _concrete(w.protocol):
            continue
        if proto != w.protocol:
            problems.append(Problem(f"workload.{proto}", f"[workload.{proto}] knobs given for protocol "
                                    f"\"{w.protocol}\"", f"[workload.{w.protocol}] (or protocol = \"{proto}\")",
                                    table.model_dump(exclude_none=True)))  # fmt: skip
    tcp = w.tcp
    if tcp is not None and tcp.mss is not None and _concrete(tcp.mss):
        mss = units.parse_size_bytes(tcp.mss)
        if not MSS_MIN <= mss <= MSS_MAX:
            problems.append(Problem("workload.tcp.mss", "out of range",
                                    f"from {MSS_MIN} B to {MSS_MAX} B", tcp.mss))  # fmt: skip
    kafka = w.kafka
    if kafka is not None and kafka.idempotence is True and kafka.acks is not None and _concrete(kafka.acks) \
            and kafka.acks != "all":
        problems.append(Problem("workload.kafka.acks", "an idempotent producer needs acks = \"all\"",
                                "acks = \"all\" (or unset) with idempotence = true", kafka.acks))  # fmt: skip
    udp = w.udp
    if udp is not None and udp.broadcast is True and w.protocol == "udp":
        _check_broadcast(s, problems)
    for proto in KNOB_TABLES:
        table = getattr(w, proto, None)
        if table is None:
            continue
        for key in ("send_buffer", "recv_buffer", "send_size"):
            value = getattr(table, key, None)
            if value is not None and _concrete(value) and units.parse_size_bytes(value) < 1:
                problems.append(Problem(f"workload.{proto}.{key}", "zero", "a size above 0 B", value))


def _check_timeout(s: Scenario, problems: list[Problem]) -> None:
    """The sending must fit in the timeout, or every run ends incomplete."""
    w = s.workload
    timeout = units.parse_duration_ns(s.scenario.timeout)
    need, key = None, ""
    if w.duration is not None and _concrete(w.duration):
        need, key = units.parse_duration_ns(w.duration), "duration"
    elif w.messages is not None and _concrete(w.messages, w.warmup):
        count = w.messages + (w.warmup or 0)
        if w.pattern == "stream" and w.rate is not None and _concrete(w.rate):
            per_s = units.parse_msg_rate(w.rate)
            if per_s is not None:
                need, key = int(count / per_s * 1e9), "rate"
        elif w.pattern in ("ping", "ramp") and w.interval is not None and _concrete(w.interval):
            need, key = count * units.parse_duration_ns(w.interval), "interval"
    if need is not None and need >= timeout:
        problems.append(Problem(f"workload.{key}", f"sending takes {units.format_duration_ns(need)}, "
                                f"not less than the timeout ({s.scenario.timeout})",
                                "a workload that ends before [scenario] timeout (raise the timeout or send less)",
                                getattr(w, key)))  # fmt: skip


def _check_services(s: Scenario, hosts: set[str] | None, problems: list[Problem]) -> None:
    """Known hosts, one service per kind; the run's protocol finds its service (placeholders: later)."""
    first: dict[str, int] = {}
    for i, svc in enumerate(s.service):
        if svc.kind in first:
            problems.append(Problem(f"service[{i}].kind", f"a second service of kind \"{svc.kind}\" (service"
                                    f"[{first[svc.kind]}] is one)", "at most one [[service]] of each kind",
                                    svc.kind))  # fmt: skip
        first.setdefault(svc.kind, i)
        if hosts is not None and _concrete(svc.host) and svc.host not in hosts:
            problems.append(Problem(f"service[{i}].host", "unknown host",
                                    "one of the [[host]] names (" + ", ".join(sorted(hosts)) + ")", svc.host))
    w = s.workload
    mode = w.zenoh.mode if w.zenoh is not None else None
    if not _concrete(w.protocol, mode):
        return
    kind = needed_kind(w.protocol, mode)
    if kind is None:
        return
    if kind not in first:
        path, got = ("workload.zenoh.mode", mode) if w.protocol == "zenoh" else ("workload.protocol", w.protocol)
        who = f'protocol "{w.protocol}"' + (' with mode = "client"' if w.protocol == "zenoh" else "")
        declared = ", ".join(f'"{k}"' for k in first) or "none"
        problems.append(Problem(path, f"{who} needs a [[service]] of kind \"{kind}\" (declared: {declared})",
                                f'a [[service]] table with kind = "{kind}" and host = "<a host>"', got))  # fmt: skip
        return
    i = first[kind]
    svc = s.service[i]
    mqtt = w.mqtt
    if w.protocol == "mqtt" and mqtt is not None and mqtt.tls is True and _concrete(svc.tls) and svc.tls is not True:
        problems.append(Problem("workload.mqtt.tls", f"TLS asked, but the mosquitto service (service[{i}]) "
                                "listens without TLS", f"tls = true in service[{i}] too (or no tls here)",
                                True))  # fmt: skip
    nats = w.nats
    if w.protocol == "nats" and nats is not None and nats.jetstream is True and _concrete(svc.jetstream) \
            and svc.jetstream is not True:
        problems.append(Problem("workload.nats.jetstream", f"JetStream asked, but the nats service (service[{i}]) "
                                "runs without it", f"jetstream = true in service[{i}] too (or no jetstream here)",
                                True))  # fmt: skip
    if hosts is None or not _concrete(svc.host, w.from_, w.to) or svc.host not in hosts:
        return
    if not all(_concrete(link.between) for link in s.link):
        return
    for h in [w.from_, *receivers(w.to)]:
        if h in hosts and h != svc.host and not _connected(s, svc.host, h):
            problems.append(Problem(f"service[{i}].host", f"no path through links from the {kind} service's host "
                                    f"{svc.host!r} to {h!r}", "a service host connected by [[link]]s to the sender "
                                    "and every receiver (directly or over several hops)", svc.host))  # fmt: skip


def _check_agents(s: Scenario, problems: list[Problem]) -> None:
    """``[scenario] agents = "host"``: every workload's protocol is one a host agent carries (not ros2: its
    endpoints are rclpy nodes, one process per flow; run.hostagent.HOST_PROTOCOLS)."""
    if s.scenario.agents != "host":
        return
    for path, w in workload_tables(s):
        if _concrete(w.protocol) and w.protocol == "ros2":
            problems.append(Problem(f"{path}.protocol", 'not carried by host agents ([scenario] agents = "host"): '
                                    "its endpoints are rclpy nodes, one process per flow",
                                    'tcp, udp, zenoh, zmq, mqtt, kafka, nats or dds with agents = "host"; '
                                    'agents = "flow" or "auto" for ros2', w.protocol))


def _check_broadcast(s: Scenario, problems: list[Problem]) -> None:
    """``udp.broadcast``: one sender to receivers that its segment's broadcast reaches."""
    w = s.workload
    if _concrete(w.pattern) and w.pattern not in ("stream", "bulk"):
        problems.append(Problem("workload.udp.broadcast", f"not for pattern \"{w.pattern}\"",
                                "broadcast = true with pattern stream or bulk", True))  # fmt: skip
    to = receivers(w.to)
    if _concrete(w.from_, to) and all(_concrete(link.between) for link in s.link) and not any(
            w.from_ in link.between and all(r in link.between for r in to) for link in s.link):
        problems.append(Problem("workload.udp.broadcast", f"the receivers are not on one segment with {w.from_!r}",
                                f"every host of `to` on one [[link]] with {w.from_!r} (a broadcast stays on its "
                                "segment), or broadcast = false", True))  # fmt: skip


def _connected(s: Scenario, a: str, b: str) -> bool:
    """Whether a chain of links joins hosts ``a`` and ``b`` (union-find over the links' members, made once per set
    of links: a 100-car fleet asks for each of its 9,900 pairs)."""
    roots = _roots(tuple(tuple(link.between) for link in s.link))
    return a == b or (a in roots and b in roots and roots[a] == roots[b])


@functools.lru_cache(maxsize=8)
def _roots(links: tuple[tuple[str, ...], ...]) -> dict[str, str]:
    """Each linked host's component (a representative host) over ``links`` (each link's members)."""
    parent: dict[str, str] = {}

    def root(h: str) -> str:
        parent.setdefault(h, h)
        while parent[h] != h:
            parent[h] = parent[parent[h]]
            h = parent[h]
        return h

    for members in links:
        for h in members[1:]:
            ra, rb = root(members[0]), root(h)
            if ra != rb:
                parent[rb] = ra
    return {h: root(h) for h in list(parent)}


def _check_report(s: Scenario, problems: list[Problem]) -> None:
    r = s.report
    if r is None:
        return
    axes = axes_of(s.sweep)
    for key in ("x", "lines", "panels"):
        value = getattr(r, key)
        if value is not None and value not in axes:
            known = ", ".join(axes) if axes else "none: there is no [sweep] table"
            problems.append(Problem(f"report.{key}", "not a sweep key", f"one of the [sweep] keys ({known})", value))
    axes = [getattr(r, k) for k in ("x", "lines", "panels") if getattr(r, k) is not None]
    if len(set(axes)) != len(axes):
        problems.append(Problem("report", "the same sweep key on two axes", "x, lines and panels all different"))
