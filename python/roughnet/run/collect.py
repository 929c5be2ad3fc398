"""Turning what the agents, the link engines and the kernel said into one run record.

Owns the run record's ``metrics``, ``receivers``, ``histograms`` and the
validity verdict (v1).  Inputs are plain dicts (agent result lines, counter
deltas), so this module is tested without namespaces.  The record's shape
is documented in docs/results-format.md.
"""

from __future__ import annotations

from typing import Any

#: A sender counts as behind schedule when more than this fraction of its
#: messages left more than 1 ms after their intended time.
LATE_FRACTION_LIMIT = 0.01
#: ... or when one message left this late.
BEHIND_MAX_LIMIT_US = 50_000.0
#: The machine counts as saturated when a CPU sample reached 95 % for more
#: than this fraction of the run.
SATURATED_FRACTION_LIMIT = 0.2

#: roughnet-wire fell behind when the p99 of its scheduling error (actual minus
#: intended departure) exceeds the larger of these: 1 ms is about 5x the p90
#: lateness of a kernel timer wakeup on these machines (clock_nanosleep wakes
#: 45 us late at p50, 180 us at p90; MEASUREMENTS.md, "A throwaway userspace L2
#: relay"), so only a loop that could not keep up (a queue inside the relay:
#: frames left 73 ms late under overload there) gets past it; 10 % of the
#: configured delay keeps long delays from being judged on a sub-ms scale.
WIRE_SCHED_P99_LIMIT_US = 1000.0
WIRE_SCHED_P99_DELAY_FRACTION = 0.10

_LAT_FIELDS = ("min", "mean", "std", "p50", "p90", "p99", "p999", "p9999", "p999999", "max")


def _lat_metrics(prefix: str, lat: dict[str, Any] | None, fields=_LAT_FIELDS) -> dict[str, float | None]:
    lat = lat or {}
    return {f"{prefix}_{f}_us": lat.get(f"{f}_us") for f in fields}


def receiver_metrics(pattern: str, res: dict[str, Any]) -> dict[str, Any]:
    """Per-receiver metrics from a receiver's (or pinger's) result line."""
    m: dict[str, Any] = {}
    for k in ("sent", "received", "lost", "duplicates", "reordered", "bytes", "throughput_bps"):
        if k in res:
            m[k] = res[k]
    rec, lost = res.get("received"), res.get("lost")
    if isinstance(rec, int) and isinstance(lost, int) and rec + lost > 0:
        m["loss_ratio"] = lost / (rec + lost)
    primary = res.get("rtt_intended") if pattern in ("ping", "ramp") else res.get("latency_intended")
    actual = res.get("rtt_actual") if pattern in ("ping", "ramp") else res.get("latency_actual")
    m.update(_lat_metrics("lat", primary))
    m.update(_lat_metrics("lat_actual", actual, ("p50", "p99", "mean", "max")))
    return m


def _sum(values: list[Any]) -> Any:
    nums = [v for v in values if isinstance(v, (int, float))]
    return sum(nums) if nums else None


def aggregate(pattern: str, per_receiver: list[dict[str, Any]], sender_res: dict[str, Any] | None) -> dict[str, Any]:
    """Run-level metrics: counts summed over receivers, latency of the worst receiver.

    Latency percentiles are taken from the receiver with the highest p50 (the
    merged distribution is in the histograms table); with one receiver that is
    simply its own.
    """
    m: dict[str, Any] = {}
    for k in ("received", "lost", "duplicates", "reordered", "bytes"):
        m[k] = _sum([r.get(k) for r in per_receiver])
    rec, lost = m.get("received"), m.get("lost")
    m["loss_ratio"] = lost / (rec + lost) if isinstance(rec, int) and isinstance(lost, int) and rec + lost else None
    tps = [r.get("throughput_bps") for r in per_receiver if r.get("throughput_bps") is not None]
    m["throughput_bps"] = min(tps) if tps else None
    with_lat = [r for r in per_receiver if r.get("lat_p50_us") is not None]
    worst = max(with_lat, key=lambda r: r["lat_p50_us"]) if with_lat else {}
    for k, v in worst.items():
        if k.startswith("lat"):
            m[k] = v
    sender_res = sender_res or {}
    m["sent"] = sender_res.get("sent", m.get("sent"))
    if pattern == "bulk" and m.get("throughput_bps") is None:
        m["throughput_bps"] = sender_res.get("throughput_bps")
    sched = sender_res.get("schedule") or {}
    m["sched_behind_max_us"] = sched.get("behind_max_us")
    m["sched_late_fraction"] = sched.get("late_fraction")
    for key in ("own_late_fraction", "own_behind_max_us", "held_fraction", "held_s"):
        if key in sched:  # agents that tell the machine's lag from the protocol's (columns since format 3)
            m[f"sched_{key}"] = sched[key]
    if "unacked" in sender_res:  # Kafka: messages its producer gave up on when the flush at the end timed out
        m["sender_unacked"] = sender_res["unacked"]
    if "finish_s" in sender_res:  # stream: the end marker and the driver's wait after it
        m["sender_finish_s"] = sender_res["finish_s"]
    if "transport_drops" in sender_res:  # zenoh: receivers' tokens that went with a transport zenoh closed
        m["sender_transport_drops"] = sender_res["transport_drops"]
    return m


def link_drop_metrics(link_counters: dict[int, dict[str, Any]]) -> dict[str, int | None]:
    loss = queue = 0
    seen = False
    for per_dir in link_counters.values():
        for d in per_dir.values():
            if not isinstance(d, dict):
                continue
            seen = True
            loss += int(d.get("drops_loss", 0) or 0)
            queue += int(d.get("drops_queue", 0) or 0)
    if not seen:
        return {"link_drops": None, "link_drops_loss": None, "link_drops_queue": None}
    return {"link_drops": loss + queue, "link_drops_loss": loss, "link_drops_queue": queue}


def tcp_metrics(tcp_deltas: dict[str, dict[str, int]]) -> dict[str, int]:
    return {
        "tcp_retrans_segs": sum(d.get("RetransSegs", 0) for d in tcp_deltas.values()),
        "tcp_out_segs": sum(d.get("OutSegs", 0) for d in tcp_deltas.values()),
        "tcp_in_segs": sum(d.get("InSegs", 0) for d in tcp_deltas.values()),
    }


def wire_sched_limit_us(configured_delay_ns: int) -> float:
    """The scheduling-error p99 above which a wire direction counts as fallen behind."""
    return max(WIRE_SCHED_P99_LIMIT_US, WIRE_SCHED_P99_DELAY_FRACTION * configured_delay_ns / 1000.0)


def wire_reasons(link_counters: dict[Any, dict[str, Any]] | None) -> list[str]:
    """Suspect reasons from the ``wire`` engine's counters (other engines' counters are ignored).

    - a direction whose departures were late by more than ``wire_sched_limit_us`` at p99;
    - frames dropped as ``overrun`` (the half-duplex modem's buffer) on a link that is
      not half duplex: that cannot happen, so the counters (or the engine) are wrong;
    - frames the kernel dropped at the emulator's own socket before it read them
      (``rx_kernel_drops``: the machine, not the emulated link, lost them).
    """
    reasons: list[str] = []
    for index, c in sorted((link_counters or {}).items(), key=lambda kv: str(kv[0])):
        if not isinstance(c, dict) or c.get("engine") != "wire":
            continue
        for direction in ("forward", "reverse"):
            d = c.get(direction)
            if not isinstance(d, dict):
                continue
            p99 = d.get("sched_error_p99_us")
            limit = wire_sched_limit_us(int(d.get("configured_delay_ns", 0) or 0))
            if isinstance(p99, (int, float)) and p99 > limit:
                reasons.append(
                    f"emulator fell behind on link {index} {direction}: departures late by {p99 / 1000:.2f} ms "
                    f"at p99 (max {float(d.get('sched_error_max_us') or 0) / 1000:.2f} ms; limit {limit / 1000:.2f} ms)"
                )
            overrun = int(d.get("drops_overrun", 0) or 0)
            if overrun and not c.get("half_duplex"):
                reasons.append(
                    f"link {index} {direction}: {overrun} frame(s) dropped as modem overrun on a link that is not "
                    f"half duplex (expected none)"
                )
            kernel = int(d.get("rx_kernel_drops", 0) or 0)
            if kernel:
                reasons.append(
                    f"link {index} {direction}: the kernel dropped {kernel} frame(s) at the emulator's socket before "
                    f"it read them (lost to the machine, not to the emulated link)"
                )
    return reasons


def udp_metrics(tcp_deltas: dict[str, dict[str, int]]) -> dict[str, int]:
    """UDP datagrams the hosts' kernels dropped at a full socket receive buffer, summed over hosts."""
    return {"udp_rcvbuf_errors": sum(int(d.get("UdpRcvbufErrors", 0) or 0) for d in tcp_deltas.values())}


def udp_host_reasons(protocol: str, hosts: list[str], ns_counters: dict[str, dict[str, int]] | None) -> list[str]:
    """Suspect reasons for a ``udp`` run whose receiving hosts dropped datagrams at a full socket buffer.

    Raw UDP has no recovery, so such drops are counted as the link's loss while the
    host (the receiving agent not reading fast enough) lost them.  Protocols that
    recover (DDS, Zenoh over UDP) pay them as retransmissions: real behaviour of
    the stack on this host, recorded (``udp_rcvbuf_errors``) but not a verdict.
    """
    if protocol != "udp":
        return []
    out = []
    for host in dict.fromkeys(hosts):  # a host's counter once, however many flows it received (timelines)
        n = int(((ns_counters or {}).get(host) or {}).get("UdpRcvbufErrors", 0) or 0)
        if n:
            out.append(f"receiver {host}: the kernel dropped {n} datagram(s) at its full socket receive buffer "
                       f"(counted as loss; the host's, not the link's)")
    return out


def schedule_reasons(sched: dict[str, Any]) -> list[str]:
    """A sender that fell behind its schedule through its own fault (the machine's) is suspect.

    An agent that tells the two apart reports ``own_*`` (the lag after its previous
    send had returned: a late timer, a descheduled thread) beside the whole lag; the
    rest (``held_*``) is the protocol holding the sender back (a blocking reliable
    publisher, a full TCP window): behaviour of what is measured, not a reason.
    Results of older agents have only the whole lag, judged as before.
    """
    own = "own_late_fraction" in sched
    late = sched.get("own_late_fraction" if own else "late_fraction")
    behind = sched.get("own_behind_max_us" if own else "behind_max_us")
    if (late is not None and late > LATE_FRACTION_LIMIT) or (behind is not None and behind > BEHIND_MAX_LIMIT_US):
        by = " after the previous send had returned" if own else ""
        return [f"sender behind schedule: {100 * (late or 0):.1f} % of messages left > 1 ms late{by} "
                f"(worst {((behind or 0) / 1000):.1f} ms)"]
    return []


#: A run's reasons name at most this many incomplete receivers (a fleet of 100 could name 9,900 flows).
MAX_RECEIVER_REASONS = 12


def verdict(
    pattern: str,
    receivers: list[tuple[str, dict[str, Any]]],
    sender_res: dict[str, Any] | None,
    cpu: dict[str, Any],
    link_counters: dict[Any, dict[str, Any]] | None = None,
    protocol: str = "",
    ns_counters: dict[str, dict[str, int]] | None = None,
    distance_loss: bool = False,
) -> tuple[str, list[str]]:
    """Validity v1: ``valid``, ``suspect`` (numbers usable with care) or ``invalid``, with reasons.

    ``link_counters`` (link index -> engine counters) adds the wire engine's reasons;
    ``ns_counters`` (host -> kernel counter deltas) the receiving hosts' UDP buffer drops.
    ``distance_loss``: the receivers' links lose by the hosts' distance (issue 16), so a receiver out of
    range when the stream ended never hears the end marker and ends at its timeout by design (its own, or the
    run's: the runner stops it, ``signal``): that end is not a reason (every message's fate is still known from
    the traces).
    """
    invalid: list[str] = []
    suspect: list[str] = []
    incomplete: dict[str, list[dict[str, Any]]] = {}  # host -> its receivers' results (a fleet: one per flow)
    for host, res in receivers:
        reason = res.get("end_reason")
        if reason in ("timeout", "signal") and distance_loss:
            continue
        if reason in ("timeout", "signal") and not res.get("complete", False):
            incomplete.setdefault(host, []).append(res)
    for host, results in list(incomplete.items())[:MAX_RECEIVER_REASONS]:
        got = sum(int(r.get("received") or 0) for r in results)
        exp = sum(int(r.get("expected") or 0) for r in results)
        known = all(r.get("expected") for r in results)
        count = f" ({got}/{exp} messages)" if known else ""
        flows = f" in {len(results)} flows" if len(results) > 1 else ""
        invalid.append(f"receiver {host} incomplete at timeout{flows}{count}")
    if len(incomplete) > MAX_RECEIVER_REASONS:
        invalid.append(f"and {len(incomplete) - MAX_RECEIVER_REASONS} more receivers incomplete at timeout")
    unacked = (sender_res or {}).get("unacked")
    if invalid and unacked:  # why they are missing: the producer's queue was dropped at its end
        invalid.append(f"the sender's producer gave up on {unacked} message(s) still queued or unacknowledged "
                       "when its flush at the end timed out")
    suspect.extend(schedule_reasons((sender_res or {}).get("schedule") or {}))
    sat = cpu.get("saturated_fraction") or 0.0
    if sat > SATURATED_FRACTION_LIMIT:
        suspect.append(f"machine CPU saturated during {100 * sat:.0f} % of the run (max {100 * (cpu.get('max') or 0):.0f} %)")
    suspect.extend(wire_reasons(link_counters))
    suspect.extend(udp_host_reasons(protocol, [h for h, _ in receivers], ns_counters))
    if invalid:
        return "invalid", invalid + suspect
    if suspect:
        return "suspect", suspect
    return "valid", []


def machine_verdict(cpu: dict[str, Any], link_counters: dict[Any, dict[str, Any]] | None = None) -> tuple[str, list[str]]:
    """The verdict of a run without agents (its [[process]] entries only): the machine's CPU and the emulator's
    reasons, as ``verdict`` judges them for agents."""
    return verdict("", [], None, cpu, link_counters)


HIST_KINDS = ("latency_intended", "latency_actual", "rtt_intended", "rtt_actual")


def histograms(host: str, res: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for kind in HIST_KINDS:
        h = res.get(kind)
        if isinstance(h, dict) and h.get("hdr"):
            out.append({"host": host, "kind": kind, "hdr": h["hdr"], "count": h.get("count", 0)})
    return out


# --- pattern sync (SEEDS S3): both agents are "syncers" and both measure ---

#: Per-side fields of a syncer's result kept in the record's ``receivers`` entries.
SYNC_SIDE_FIELDS = ("bundles_start", "bundles_held", "bundles_received", "bundles_sent", "duplicates",
                    "bad_bundles", "bad_messages", "messages_sent", "messages_received", "summaries_sent",
                    "summaries_received", "bytes_sent", "bytes_received", "goodput_bytes", "goodput_bps",
                    "elapsed_s", "overhead_ratio", "in_flight_max", "complete", "full_sync", "time_to_complete_s",
                    "time_to_full_sync_s", "end_reason")  # fmt: skip


def sync_side_metrics(res: dict[str, Any]) -> dict[str, Any]:
    """One syncer's metrics, from its result line (docs/agent-protocol.md, "sync")."""
    m = {k: res.get(k) for k in SYNC_SIDE_FIELDS}
    m.update(_lat_metrics("lat_actual", res.get("bundle_latency"), ("p50", "p99", "mean", "max")))
    return m


def sync_capacity_bps(run) -> int | None:
    """Application-independent channel capacity between the two syncers: the direct link's rate,
    counted once when the link is half duplex (one medium for both directions), else per direction."""
    w = run.workload
    pair = {w.sender, *w.receivers}
    for link in run.links:
        if set(link.hosts) == pair:
            fwd, rev = link.forward.rate_bps, link.reverse.rate_bps
            if fwd is None or rev is None:
                return None
            return max(fwd, rev) if link.half_duplex is not None else fwd + rev
    return None


def sync_metrics(run, sides: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Run-level metrics of a sync run: bundles per direction, goodput against the channel, time to sync.

    ``sides``: (host, result) of each syncer.  Direction ``from_to`` is what the ``to`` host received.
    """
    w = run.workload
    by_host = dict(sides)
    rx_to = by_host.get(w.receivers[0], {})
    rx_from = by_host.get(w.sender, {})
    results = [r for _, r in sides]
    m: dict[str, Any] = {
        "bundles_from_to": rx_to.get("bundles_received"),
        "bundles_to_from": rx_from.get("bundles_received"),
        "received": _sum([r.get("bundles_received") for r in results]),
        "sent": _sum([r.get("bundles_sent") for r in results]),
        "duplicates": _sum([r.get("duplicates") for r in results]),
        "bytes": _sum([r.get("bytes_received") for r in results]),
        "sync_messages": _sum([r.get("messages_sent") for r in results]),
        "sync_summaries": _sum([r.get("summaries_sent") for r in results]),
    }
    goodput = _sum([r.get("goodput_bytes") for r in results]) or 0
    elapsed = max([float(r.get("elapsed_s") or 0.0) for r in results] or [0.0])
    m["goodput_bytes"] = goodput
    m["sync_elapsed_s"] = elapsed
    m["goodput_bps"] = round(goodput * 8 / elapsed, 3) if elapsed > 0 else None
    m["throughput_bps"] = m["goodput_bps"]
    for key, res in (("from_to", rx_to), ("to_from", rx_from)):
        m[f"goodput_bps_{key}"] = res.get("goodput_bps")
    app_bytes = _sum([r.get("bytes_sent") for r in results])
    m["overhead_ratio"] = round(app_bytes / goodput, 4) if goodput and app_bytes is not None else None
    capacity = sync_capacity_bps(run)
    m["channel_capacity_bps"] = capacity
    m["goodput_fraction"] = round(m["goodput_bps"] / capacity, 4) if capacity and m["goodput_bps"] else None
    full = all(r.get("full_sync") for r in results) and len(results) == 2
    times = [r.get("time_to_full_sync_s") for r in results]
    m["full_sync"] = full
    m["time_to_full_sync_s"] = max(times) if full and all(isinstance(t, (int, float)) for t in times) else None
    return m


def sync_verdict(run, sides: list[tuple[str, dict[str, Any]]], cpu: dict[str, Any],
                 link_counters: dict[Any, dict[str, Any]] | None = None) -> tuple[str, list[str]]:  # fmt: skip
    """Validity of a sync run: corrupted or refused bundles and interrupted runs are invalid; a run
    that ran into the scenario timeout without a window of its own is suspect; plus the machine's
    and the emulator's reasons (``verdict``)."""
    invalid: list[str] = []
    suspect: list[str] = []
    for host, res in sides:
        bad = int(res.get("bad_bundles") or 0) + int(res.get("bad_messages") or 0)
        if bad:
            invalid.append(f"syncer {host}: {bad} corrupted or unreadable message(s)")
        reason = res.get("end_reason")
        if reason == "signal":
            invalid.append(f"syncer {host} was stopped before the end of its sync")
        elif reason == "timeout":
            suspect.append(f"syncer {host} reached the scenario timeout before full sync "
                           f"({res.get('bundles_held')} bundles held)")  # fmt: skip
    _, machine = verdict(run.workload.pattern, [], None, cpu, link_counters)
    suspect.extend(machine)
    if invalid:
        return "invalid", invalid + suspect
    if suspect:
        return "suspect", suspect
    return "valid", []
