"""``roughnet calibrate``: configured against realised link behaviour, measured through the wire engine.

Owns the calibration of one link (a 2-host relayed topology with the link's
settings, probe traffic from host ``cala`` to host ``calb``, i.e. the link's
``forward`` direction), what is expected of each setting (``expected_*``,
pure and unit-tested), the tolerances, and a small UDP probe (sequence
numbers and send times; run as ``python -m roughnet.calibrate probe-recv|
probe-send`` inside the namespaces) for what the agent does not report: which
sequence numbers were lost, hence the loss burst lengths.  The CLI renders the
rows; nothing here prints except the probe processes (their stdout is their
JSON result).

Phases, each only when the link has what it measures:

1. delay and jitter: the agent's UDP stream at a moderate rate (at most a third of
   the link's capacity in frames, at most 1000 msg/s, gaps of at least 3x the jitter
   so that the no-reorder rule barely stretches it); realised one-way delay from the
   agent's ``latency_actual``;
2. loss and burst length (a loss model): the UDP probe; bursts are runs of
   consecutive missing sequence numbers;
3. rate: TCP bulk for a lossless link (goodput against rate x MSS / frame), or,
   with loss, a UDP stream offered at 1.3 / (1 - loss) of the link's capacity, so the
   queue stays full and the received rate is the link rate x payload / frame.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import secrets
import socket
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import LinkError, RoughnetError
from .runspec import Host, Link, Run, Workload

log = logging.getLogger(__name__)

#: Profiles calibrated in CI (`make test`): moderate rates and delays, a jittered and a bursty-loss one.
CI_PROFILES = ("lte", "wifi-noisy")
SENDER, RECEIVER = "cala", "calb"
#: IPv4 (20) + UDP (8) + Ethernet (14) bytes around a UDP payload; IPv4 + TCP with timestamps = 52.
UDP_FRAME_EXTRA = 42
TCP_HEADERS = 52
ETH_HEADER = 14
#: z of a two-sided 99.9 % interval.
Z999 = 3.2905
#: Tolerances (stated in the output): see each check.
DELAY_TOL_US = 250.0  # the veth path and wakeups: ~10-80 us each way, 45-180 us timer lateness (MEASUREMENTS.md)
DELAY_TOL_FRACTION = 0.01
JITTER_NONE_TOL_US = 300.0  # one-way p99 - p50 of a plain veth path under load (sockperf p99 65-460 us)
JITTER_TOL_FRACTION = 0.35
BURST_TOL_FRACTION = 0.10
RATE_TOL_FRACTION = 0.05
PROBE_PORT = 7301


@dataclass
class Check:
    """One row of the calibration table."""

    target: str  # profile name or "link <i>"
    metric: str
    configured: float | None
    realised: float | None
    unit: str
    tolerance: str
    passed: bool | None  # None: not judged (stated why in ``note``)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---- what to expect (pure) -------------------------------------------------------------------


def _hmm(states: list[str], trans: dict[str, dict[str, float]], lossy: dict[str, float]) -> tuple[float, float]:
    """(mean loss, mean loss-run length) of a stationary hidden Markov loss process.

    ``trans[s][t]``: transition probabilities; ``lossy[s]``: loss probability of a
    frame decided in state ``s``.  A run starts where a lost frame follows a
    delivered one: mean run = P(loss) / P(delivered, then lost).
    """
    n = len(states)
    idx = {s: i for i, s in enumerate(states)}
    # Stationary distribution reached from the first state (where wire-core starts), by power iteration on the
    # lazy chain (P + I) / 2: same stationary distribution, never periodic.
    pi = [1.0] + [0.0] * (n - 1)
    for _ in range(200_000):
        nxt = [0.5 * x for x in pi]
        for s in states:
            for t, p in trans[s].items():
                nxt[idx[t]] += 0.5 * pi[idx[s]] * p
        if max(abs(a - b) for a, b in zip(nxt, pi)) < 1e-15:
            pi = nxt
            break
        pi = nxt
    p_loss = sum(pi[idx[s]] * lossy[s] for s in states)
    p_start = sum(pi[idx[s]] * (1 - lossy[s]) * p * lossy[t] for s in states for t, p in trans[s].items())
    return p_loss, (p_loss / p_start if p_start > 0 else math.inf)


def expected_loss(model: dict[str, Any] | None, frame_bytes: int) -> tuple[float, float] | None:
    """(mean loss fraction, mean loss-burst length in frames) of wire-core's loss model, or None if not modelled here.

    Models as in crates/wire-core/src/loss.rs: Gilbert-Elliott decides the frame
    with the state it arrived in, then moves; Markov4 (netem's 4-state model)
    loses the frames that land in states 3 and 4; size_dependent loses a frame
    of ``frame_bytes`` with 1 - (1 - ber)^(8 len).  ieee80211p depends on the
    distance and its constants: None (not judged).
    """
    if model is None or model.get("model") in (None, "none"):
        return 0.0, 0.0
    kind = model["model"]
    if kind == "bernoulli":
        p = float(model["p"])
        return p, (1 / (1 - p) if p < 1 else math.inf)
    if kind == "size_dependent":
        per = 1 - (1 - float(model["ber"])) ** (8 * frame_bytes)
        return per, (1 / (1 - per) if per < 1 else math.inf)
    if kind == "gilbert_elliott":
        p, r = float(model["p"]), float(model["r"])
        h, k = float(model.get("h", 0.0)), float(model.get("k", 1.0))
        return _hmm(["g", "b"], {"g": {"g": 1 - p, "b": p}, "b": {"b": 1 - r, "g": r}}, {"g": 1 - k, "b": 1 - h})
    if kind == "markov4":
        p13, p14 = float(model.get("p13", 0.0)), float(model.get("p14", 0.0))
        p31 = model.get("p31")
        p31 = 1 - p13 if p31 is None else float(p31)
        p32, p23 = float(model.get("p32", 0.0)), float(model.get("p23", 0.0))
        trans = {
            "1": {"1": 1 - p13 - p14, "3": p13, "4": p14},
            "2": {"2": 1 - p23, "3": p23},
            "3": {"3": 1 - p31 - p32, "1": p31, "2": p32},
            "4": {"1": 1.0},
        }
        return _hmm(["1", "2", "3", "4"], trans, {"1": 0.0, "2": 0.0, "3": 1.0, "4": 1.0})
    return None


def jitter_std_ns(jitter_ns: int, dist: str) -> float:
    """Standard deviation of wire-core's jitter draw: uniform in [-j, j] has j / sqrt(3), the others j."""
    return jitter_ns / math.sqrt(3) if dist == "uniform" else float(jitter_ns)


def serialisation_ns(frame_bytes: int, overhead: int, rate_bps: int | None) -> float:
    return 0.0 if not rate_bps else (frame_bytes + overhead) * 8e9 / rate_bps


def loss_runs(seqs: list[int], count: int) -> list[int]:
    """Lengths of the runs of sequence numbers in [0, count) that never arrived."""
    got = bytearray(count)
    for s in seqs:
        if 0 <= s < count:
            got[s] = 1
    runs, cur = [], 0
    for g in got:
        if g:
            if cur:
                runs.append(cur)
            cur = 0
        else:
            cur += 1
    if cur:
        runs.append(cur)
    return runs


# ---- the UDP probe (child processes) ---------------------------------------------------------

_HDR = struct.Struct("<4sIQQ")
_TIMESPEC = struct.Struct("@qq")
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_MAGIC = b"RNCP"


def probe_recv(bind: str, count: int, timeout_s: float, linger_s: float, times: bool = False) -> dict[str, Any]:
    host, _, port = bind.rpartition(":")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((host, int(port)))
    if times:  # the kernel's receive time (CLOCK_REALTIME), free of this process's wakeup latency
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sys.stdout.write(json.dumps({"type": "ready"}) + "\n")
    sys.stdout.flush()
    seqs: list[int] = []
    arrivals: list[int] = []
    deadline = time.monotonic() + timeout_s
    got_any = False
    while len(seqs) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        s.settimeout(min(left, linger_s) if got_any else left)
        try:
            data, anc, _flags, _addr = s.recvmsg(65536, 256)
        except socket.timeout:
            if got_any:
                break
            continue
        if len(data) >= _HDR.size:
            magic, _, seq, _sent = _HDR.unpack_from(data)
            if magic == _MAGIC:
                got_any = True
                seqs.append(seq)
                if times:
                    stamp = [c for c in anc if c[0] == socket.SOL_SOCKET and c[1] == SO_TIMESTAMPNS]
                    sec, nsec = _TIMESPEC.unpack_from(stamp[0][2]) if stamp else divmod(time.time_ns(), 10**9)
                    arrivals.append(sec * 1_000_000_000 + nsec)
    out: dict[str, Any] = {"type": "result", "received": len(seqs), "seqs": seqs}
    if times:
        out["arrivals_ns"] = arrivals
    return out


def probe_send(to: str, count: int, rate: float, size: int) -> dict[str, Any]:
    host, _, port = to.rpartition(":")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    filler = b"\0" * max(0, size - _HDR.size)
    start, errors = time.monotonic_ns(), 0
    for seq in range(count):
        due = start + int(seq * 1e9 / rate)
        while (now := time.monotonic_ns()) < due:
            if due - now > 200_000:
                time.sleep((due - now - 100_000) / 1e9)
        try:
            s.sendto(_HDR.pack(_MAGIC, 0, seq, time.monotonic_ns()) + filler, (host, int(port)))
        except OSError:
            errors += 1
    return {"type": "result", "sent": count, "errors": errors}


def _probe_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m roughnet.calibrate", description="roughnet's UDP loss probe")
    sub = p.add_subparsers(dest="role", required=True)
    r = sub.add_parser("probe-recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--count", type=int, required=True)
    r.add_argument("--timeout", type=float, required=True)
    r.add_argument("--linger", type=float, default=2.0)
    r.add_argument("--times", action="store_true", help="also report each kernel receive time (CLOCK_REALTIME ns)")
    t = sub.add_parser("probe-send")
    t.add_argument("--to", required=True)
    t.add_argument("--count", type=int, required=True)
    t.add_argument("--rate", type=float, required=True)
    t.add_argument("--size", type=int, default=200)
    a = p.parse_args(argv)
    if a.role == "probe-recv":
        out = probe_recv(a.bind, a.count, a.timeout, a.linger, a.times)
    else:
        out = probe_send(a.to, a.count, a.rate, a.size)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def run_probe(topo: Any, src: str, dst: str, count: int, rate: float, size: int, extra_s: float = 20.0) -> dict:
    """Send ``count`` numbered datagrams ``src`` -> ``dst`` at ``rate``/s; the receiver's result (with ``seqs``)."""
    import subprocess

    addr = topo.address(dst, src)
    py = [sys.executable, "-m", "roughnet.calibrate"]
    rx = topo.popen(dst, [*py, "probe-recv", "--bind", f"{addr}:{PROBE_PORT}", "--count", str(count),
                          "--timeout", str(count / rate + extra_s), "--linger", "2"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = rx.stdout.readline()
        if not first or json.loads(first).get("type") != "ready":
            raise LinkError(f"the calibration probe receiver did not start: {first!r} {rx.stderr.read()[-500:]}")
        tx = topo.run(src, [*py, "probe-send", "--to", f"{addr}:{PROBE_PORT}", "--count", str(count),
                            "--rate", str(rate), "--size", str(size)],
                      capture_output=True, text=True, timeout=count / rate + 60)
        if tx.returncode != 0:
            raise LinkError(f"the calibration probe sender failed (exit {tx.returncode}): {tx.stderr[-500:]}")
        out, err = rx.communicate(timeout=count / rate + extra_s + 30)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if rx.returncode != 0 or not lines:
        raise LinkError(f"the calibration probe receiver failed (exit {rx.returncode}): {err[-500:]}")
    return json.loads(lines[-1])


# ---- one link --------------------------------------------------------------------------------


def _run_for(link: Link, workload: Workload, run_id: str, seed: int) -> Run:
    lk = dataclasses.replace(link, index=0, hosts=(SENDER, RECEIVER), engine="wire")
    return Run(scenario="calibrate", sweep_id="calibrate-00000000", run_id=run_id, index=0, params={}, seed=seed,
               repeat=0, hosts=(Host(SENDER), Host(RECEIVER)), links=(lk,), workload=workload)


def _agents(topo: Any, agent_path: Path, run: Run, artifacts: Path) -> tuple[dict, dict]:
    from .run.agents import agent_specs, run_agents

    artifacts.mkdir(parents=True, exist_ok=True)
    agents = run_agents(topo, agent_path, run, artifacts, agent_specs(run, topo.address))
    missing = [a for a in agents if a.result is None]
    if missing:
        raise LinkError("; ".join(a.describe_failure() for a in missing))
    return agents[0].result, agents[-1].result


def calibrate_link(target: str, link: Link, agent_path: Path, seed: int = 1, work: Path | None = None,
                   quick: bool = True) -> list[Check]:
    """Calibrate ``link``'s forward direction through roughnet-wire; one Check per measured figure."""
    from .links.wire import WireEngine
    from .topo import Ledger, Topology

    engine = WireEngine()
    cfg = engine.config_for(dataclasses.replace(link, index=0))["a_to_b"]
    rate = cfg.get("rate_bps")
    ovh = int(cfg.get("overhead_bytes", 0) or 0)
    delay_ns = int(cfg.get("delay_ns", 0) or 0)
    jitter_ns = int(cfg.get("jitter_ns", 0) or 0)
    dist = str(cfg.get("jitter_dist", "uniform"))
    loss_model = cfg.get("loss")
    mtu = int(link.mtu)
    run_id = secrets.token_hex(6)
    work = Path(work or tempfile.mkdtemp(prefix=f"roughnet-calibrate-{run_id[:8]}-"))
    probe_payload = 200
    probe_frame = probe_payload + UDP_FRAME_EXTRA
    duration_s = 2.0 if quick else 6.0
    base_wl = Workload(pattern="stream", protocol="udp", sender=SENDER, receivers=(RECEIVER,),
                       payload_bytes=probe_payload, timeout_ns=int((duration_s + 30 + 3 * delay_ns / 1e9) * 1e9))
    run = _run_for(link, base_wl, run_id, seed)
    topo = Topology(run, Ledger(run_id[:8], run_id), engines={0: "wire"})
    checks: list[Check] = []
    try:
        topo.build()
        engine.apply(topo, run.links[0])
        # 1. delay and jitter
        cap_pps = rate / (8 * (probe_frame + ovh)) / 3 if rate else 1000.0
        pps = min(1000.0, cap_pps, 1e9 / (3 * jitter_ns) if jitter_ns else 1000.0)
        n = max(100, int(pps * duration_s))
        wl = dataclasses.replace(base_wl, messages=n, rate_msgs_per_s=pps, warmup=5)
        rx, _ = _agents(topo, agent_path, dataclasses.replace(run, workload=wl), work / "delay")
        lat = rx.get("latency_actual") or {}
        ser_us = serialisation_ns(probe_frame, ovh, rate) / 1000
        want_us = delay_ns / 1000 + ser_us
        tol = max(DELAY_TOL_US, DELAY_TOL_FRACTION * want_us) + (0.5 * jitter_ns / 1000 if jitter_ns else 0)
        p50 = lat.get("p50_us")
        checks.append(Check(target, "delay p50", round(want_us, 1), p50, "us", f"±{tol:.0f} us",
                            None if p50 is None else abs(p50 - want_us) <= tol,
                            "delay + serialisation of the probe frame" + ("; ± half the jitter" if jitter_ns else "")))
        std = lat.get("std_us")
        if jitter_ns:
            want = jitter_std_ns(jitter_ns, dist) / 1000
            jtol = JITTER_TOL_FRACTION * want + DELAY_TOL_US
            checks.append(Check(target, f"jitter std ({dist})", round(want, 1), std, "us", f"±{jtol:.0f} us",
                                None if std is None else abs(std - want) <= jtol,
                                "no-reorder stretches gaps: probe gaps >= 3x jitter"))
        else:
            spread = None if lat.get("p99_us") is None or p50 is None else lat["p99_us"] - p50
            checks.append(Check(target, "jitter p99-p50", 0.0, spread, "us", f"<= {JITTER_NONE_TOL_US:.0f} us",
                                None if spread is None else spread <= JITTER_NONE_TOL_US, "none configured"))
        checks.append(Check(target, "reordered (agent)", 0.0, rx.get("reordered"), "msgs", "0",
                            rx.get("reordered") == 0 if not cfg.get("allow_reorder") and not cfg.get("reorder") else None,
                            "" if not cfg.get("allow_reorder") and not cfg.get("reorder") else "reordering allowed"))
        # 2. loss and bursts
        exp = expected_loss(loss_model, probe_frame)
        mean_loss = exp[0] if exp else 0.0
        if loss_model and loss_model.get("model") not in (None, "none"):
            checks.extend(_loss_checks(target, topo, exp, loss_model, cap_pps * 3 / 2, probe_payload, quick))
        # 3. rate
        if rate:
            checks.append(_rate_check(target, topo, agent_path, run, work / "rate", rate, ovh, mtu, mean_loss,
                                      duration_s + 1, loss_model))
        counters = engine.counters(topo, run.links[0])["forward"]
        p99 = counters["sched_error_p99_us"]
        from .run.collect import wire_sched_limit_us

        limit = wire_sched_limit_us(delay_ns)
        checks.append(Check(target, "wire sched error p99", 0.0, p99, "us", f"<= {limit:.0f} us", p99 <= limit,
                            "actual minus intended departure"))
    finally:
        from .run.runner import teardown_shielded

        teardown_shielded(topo)  # finished even if Ctrl-C or SIGTERM arrives in the middle of it
    return checks


def _loss_checks(target: str, topo: Any, exp: tuple[float, float] | None, model: dict, max_pps: float,
                 payload: int, quick: bool) -> list[Check]:
    pps = min(2000.0, max_pps)
    if exp is None:
        n = int(pps * (3 if quick else 10))
    else:
        p, burst = exp
        # Enough frames for ~300 bursts (quick) / 1000, within 5 s / 20 s of probing.
        starts = p / burst if burst and burst != math.inf else p
        want_runs = 300 if quick else 1000
        n = int(min(max(2000, want_runs / max(starts, 1e-6)), pps * (5 if quick else 20)))
    res = run_probe(topo, SENDER, RECEIVER, n, pps, payload)
    got = len(set(res["seqs"]))
    lost = n - got
    realised = lost / n
    runs = loss_runs(res["seqs"], n)
    mean_run = sum(runs) / len(runs) if runs else 0.0
    kind = model.get("model")
    if exp is None:
        return [Check(target, f"loss ({kind})", None, realised, "fraction", "-", None, "model not computed here"),
                Check(target, "mean loss burst", None, mean_run, "frames", "-", None, f"{len(runs)} bursts")]
    p, burst = exp
    # Correlated losses widen the interval: the count's variance grows about (2 B - 1) times.
    infl = max(1.0, 2 * burst - 1) if burst != math.inf else 1.0
    half = Z999 * math.sqrt(max(p * (1 - p), 1e-12) * infl / n)
    checks = [Check(target, f"loss ({kind})", round(p, 5), round(realised, 5), "fraction",
                    f"±{half:.4f} (99.9 %)", abs(realised - p) <= half, f"{n} frames")]
    if runs:
        var = sum((x - mean_run) ** 2 for x in runs) / max(1, len(runs) - 1)
        se = math.sqrt(var / len(runs))
        btol = max(BURST_TOL_FRACTION * burst, Z999 * se)
        checks.append(Check(target, "mean loss burst", round(burst, 3), round(mean_run, 3), "frames",
                            f"±{btol:.2f}", abs(mean_run - burst) <= btol, f"{len(runs)} bursts"))
    return checks


def _rate_check(target: str, topo: Any, agent_path: Path, run: Run, work: Path, rate: int, ovh: int, mtu: int,
                mean_loss: float, duration_s: float, loss_model: dict | None) -> Check:
    lossy = bool(loss_model and loss_model.get("model") not in (None, "none"))
    if not lossy:
        wl = Workload(pattern="bulk", protocol="tcp", sender=SENDER, receivers=(RECEIVER,), payload_bytes=1024,
                      duration_ns=int(duration_s * 1e9), timeout_ns=int((duration_s + 60) * 1e9))
        rx, _ = _agents(topo, agent_path, dataclasses.replace(run, workload=wl), work)
        mss = mtu - TCP_HEADERS
        want = rate * mss / (mtu + ETH_HEADER + ovh)
        how = f"TCP goodput; rate x {mss} / {mtu + ETH_HEADER + ovh}"
    else:
        payload = mtu - 28
        frame = payload + UDP_FRAME_EXTRA
        offered = 1.3 / max(0.05, 1 - mean_loss) * rate / (8 * (frame + ovh))
        n = max(200, int(offered * duration_s))
        wl = Workload(pattern="stream", protocol="udp", sender=SENDER, receivers=(RECEIVER,), payload_bytes=payload,
                      messages=n, rate_msgs_per_s=offered, timeout_ns=int((duration_s + 60) * 1e9))
        rx, _ = _agents(topo, agent_path, dataclasses.replace(run, workload=wl), work)
        want = rate * payload / (frame + ovh)
        how = f"UDP offered at 1.3/(1-loss) x capacity; rate x {payload} / {frame + ovh}"
    got = rx.get("throughput_bps")
    return Check(target, "rate (goodput)", round(want), None if got is None else round(got), "bit/s",
                 f"±{100 * RATE_TOL_FRACTION:.0f} %", None if got is None else abs(got - want) <= RATE_TOL_FRACTION * want,
                 how)


def links_of_file(path: Path) -> list[tuple[str, Link]]:
    """The two-host links of the scenario's first run (a calibration target each)."""
    from .plan import plan_sweep

    sweep = plan_sweep(path)
    if not sweep.runs:
        raise LinkError(f"{path}: the scenario expands to no runs; expected at least one")
    out = []
    for link in sweep.runs[0].links:
        if link.shared:
            log.warning("link %d of %s joins %d hosts; calibration covers two-host links only", link.index, path,
                        len(link.hosts))
            continue
        out.append((f"link {link.index} ({' -> '.join(link.hosts)})", link))
    return out


def calibrate(profiles: list[str], file: Path | None, agent_path: Path, seed: int = 1,
              quick: bool = True) -> list[Check]:
    """Every target: the named profiles, then the links of ``file``'s first run."""
    targets: list[tuple[str, Link]] = [(p, Link(index=0, hosts=(SENDER, RECEIVER), profile=p)) for p in profiles]
    if file is not None:
        targets += links_of_file(file)
    if not targets:
        raise RoughnetError("nothing to calibrate; expected --profile NAME or a scenario FILE")
    checks: list[Check] = []
    for name, link in targets:
        log.info("calibrating %s", name)
        checks.extend(calibrate_link(name, link, agent_path, seed=seed, quick=quick))
    return checks


if __name__ == "__main__":
    if os.environ.get("ROUGHNET_PROBE_DEBUG"):
        logging.basicConfig(level=logging.DEBUG)
    sys.exit(_probe_main(sys.argv[1:]))
