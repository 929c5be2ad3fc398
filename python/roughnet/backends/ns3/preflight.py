"""What the ns3 backend can express, checked before anything runs (no ns-3 import here).

Owns the refusals: every key of a run that the simulation cannot model is named, with
what the backend does model, as a PreflightError (exit code 2).  It does not build the
simulation (``sim``) nor judge results.

What is modelled: hosts as ns-3 nodes with the Internet stack; a two-host link as a
point-to-point channel (rate and MTU per direction, one propagation delay for both), or with
``medium = "csma"`` as a CSMA channel of two devices (one rate, one delay), a
shared segment as one CSMA channel (one rate and one delay for the medium); Bernoulli
loss and Gilbert-Elliott loss as receive error models; a drop-tail queue in packets or
bytes; TCP bulk (segment size, buffers, send size, congestion control), UDP streams
at a rate (open loop), and UDP bulk or streams without a rate, which keep the sending
queue full (back-pressure: apps.cc, ``saturate``).
"""

from __future__ import annotations

from typing import Any

from ...errors import PreflightError

#: Protocols the simulation speaks: the kernel's two transports, modelled by ns-3's Internet stack.
PROTOCOLS = ("tcp", "udp")
#: ns-3 TCP congestion controls by the kernel's names (``tcp.congestion``); ns-3 3.44 has these classes.
CONGESTION = {"cubic": "ns3::TcpCubic", "reno": "ns3::TcpNewReno", "newreno": "ns3::TcpNewReno",
              "bbr": "ns3::TcpBbr", "vegas": "ns3::TcpVegas", "westwood": "ns3::TcpWestwoodPlus",
              "htcp": "ns3::TcpHtcp", "highspeed": "ns3::TcpHighSpeed", "bic": "ns3::TcpBic",
              "illinois": "ns3::TcpIllinois", "hybla": "ns3::TcpHybla", "scalable": "ns3::TcpScalable",
              "veno": "ns3::TcpVeno", "yeah": "ns3::TcpYeah", "lp": "ns3::TcpLp", "dctcp": "ns3::TcpDctcp"}
#: Protocol knobs the simulation takes (docs/scenario-format.md, "TCP and UDP").
TCP_OPTIONS = ("nodelay", "mss", "send_buffer", "recv_buffer", "send_size", "congestion")
UDP_OPTIONS = ()
#: Direction keys (as written in the scenario) of impairments ns-3 channels here do not model.
_UNMODELLED = (
    ("jitter_ns", "jitter"), ("allow_reorder", "reorder_by_jitter"), ("reorder", "reorder"),
    ("duplicate", "duplicate"), ("corrupt", "corrupt"), ("overhead_bytes", "overhead"),
)

WHAT = ("the ns3 backend models rate, delay, loss (random or gilbert_elliott), queue and mtu of point-to-point "
        "and CSMA channels, and TCP bulk or UDP streams at a rate")


def _where(run: Any) -> str:
    params = ", ".join(f"{k}={v}" for k, v in run.params.items()) or "single run"
    return f"run {run.index} ({params})"


def refusals(run: Any) -> list[str]:
    """Every reason ``run`` cannot be simulated, each naming the scenario key; empty when it can."""
    out: list[str] = []
    w = run.workload
    if w.protocol not in PROTOCOLS:
        out.append(f"protocol {w.protocol!r}: ns-3 has no {w.protocol} (no broker, Zenoh or DDS stack runs in the "
                   f"simulation); the ns3 backend runs {' and '.join(PROTOCOLS)} only")
    if run.services:
        out.append(f"[[service]] {run.services[0].kind!r}: the ns3 backend runs no services")
    if run.has_timeline:
        out.append("[[workload]] / [[event]] / several senders / start: the ns3 backend runs one workload from t0")
    if w.protocol == "udp" and w.pattern not in ("stream", "bulk"):
        out.append(f"pattern {w.pattern!r}: over udp the ns3 backend runs streams (at a rate, or as fast as the "
                   "sending queue drains) and bulk")
    if w.protocol == "tcp" and w.pattern != "bulk":
        out.append(f"pattern {w.pattern!r}: over tcp the ns3 backend runs bulk only")
    if w.protocol == "tcp" and len(w.receivers) > 1:
        out.append(f"to = {list(w.receivers)}: over tcp the ns3 backend's bulk sender has one receiver")
    if w.protocol in PROTOCOLS:
        allowed = TCP_OPTIONS if w.protocol == "tcp" else UDP_OPTIONS
        for key in sorted(set(w.options) - set(allowed)):
            out.append(f"[workload.{w.protocol}] {key}: not modelled by the ns3 backend (it takes "
                       f"{', '.join(allowed) or 'no options'})")
        cc = w.options.get("congestion")
        if cc is not None and cc not in CONGESTION:
            out.append(f"[workload.tcp] congestion = {cc!r}: ns-3 has no such congestion control; expected one of "
                       f"{', '.join(sorted(CONGESTION))}")
    for link in run.links:
        out.extend(_link_refusals(link))
    return out


def _link_refusals(link: Any) -> list[str]:
    name = f"link {link.index} ({', '.join(link.hosts)})"
    out: list[str] = []
    for key, on in (("capture", link.capture), ("overlay", link.overlay != "none"),
                    ("half_duplex", link.half_duplex is not None), ("schedule", bool(link.schedule)),
                    ("distance_trace", bool(link.distance_trace)),
                    ("the hosts' positions (per-pair radio links)", bool(getattr(link, "positions", ())))):
        if on:
            out.append(f"{name}: {key} is not modelled by the ns3 backend")
    fwd, rev = link.forward, link.reverse
    for d_name, d in (("forward", fwd), ("reverse", rev)):
        for attr, key in _UNMODELLED:
            if getattr(d, attr):
                out.append(f"{name}: {key} ({d_name}) is not modelled by the ns3 backend; {WHAT}")
        if d.loss_model is not None and d.loss_model.get("model") != "gilbert_elliott":
            out.append(f"{name}: loss_model {d.loss_model.get('model')!r} ({d_name}) is not modelled by the ns3 "
                       "backend; it has random loss and gilbert_elliott")
        if d.rate_bps is None:
            out.append(f"{name}: rate ({d_name}) is unset; an ns-3 channel has a data rate, so the ns3 backend "
                       "needs one")
    if fwd.delay_ns != rev.delay_ns:
        out.append(f"{name}: delay differs by direction ({fwd.delay_ns} ns forward, {rev.delay_ns} ns reverse); "
                   "an ns-3 channel has one propagation delay")
    if link.shared and (fwd.loss_model is not None or rev.loss_model is not None):
        out.append(f"{name}: loss_model on a shared segment is not modelled by the ns3 backend (a frame passes "
                   "two chains there, the sender's and the receiver's; ns-3's CSMA receivers have one each)")
    if not link.shared and getattr(link, "medium", "plain") == "csma" and fwd.rate_bps != rev.rate_bps:
        out.append(f"{name}: rate differs by direction on medium = \"csma\"; an ns-3 CSMA channel has one data "
                   "rate, so forward and reverse must be equal")
    if link.shared:
        for attr, key in (("rate_bps", "rate"), ("queue_packets", "queue"), ("queue_bytes", "queue"),
                          ("loss", "loss"), ("loss_model", "loss_model")):
            if getattr(fwd, attr) != getattr(rev, attr):
                out.append(f"{name}: {key} differs by direction; a shared segment is one CSMA medium on the ns3 "
                           "backend, so forward and reverse must be equal")
    return out


def check(sweep: Any) -> None:
    """PreflightError for the first run that cannot be simulated, with all its reasons."""
    for run in sweep.runs:
        reasons = refusals(run)
        if reasons:
            raise PreflightError(f"{_where(run)}: cannot run on the ns3 backend: " + "; ".join(reasons))
