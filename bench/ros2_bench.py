#!/usr/bin/env python3
"""The `ros2` endpoints (rclpy on Fast DDS) against roughnet-agent's dds driver in ROS 2 mode (Cyclone), on loopback.

Both sides of each measurement are the same program: two rclpy endpoints (``python -m
roughnet.ros2.endpoint``, the runner's command) or two agents (``roughnet-agent``, dds with
``ros2 = true``), same topic names, same message type (std_msgs/msg/UInt8MultiArray), reliable,
keep all (so that neither side's history drops anything and the figures are the stacks' own),
on 127.0.0.1 (the endpoint keeps discovery on localhost; Fast DDS is UDPv4 only, as in runs).
Interleaved rounds (ros2, then agent, for every figure), so machine drift hits both alike; the
figures are medians over rounds and the ratios are ros2 / agent.

- round trip p50/p99: ping pattern, closed loop (the next request when the reply came), S-byte
  messages, the pinger's ``rtt_actual`` (from the actual send time).
- stream: a sender as fast as possible (no rate) for ``--seconds``; received messages / the
  receiver's duration (first to last arrival).
- CPU: user + system time of each process (``os.wait4``'s rusage of the child, every thread),
  per message it handled (sent or received; a ping's both sides handle each request once),
  minus nothing: start-up (Python importing rclpy, the middleware's threads) is in it, which is why
  ``cpu_idle_s`` (one run of 1 message) is printed too, and the per-message figures are
  ``(cpu - cpu_idle) / messages``.

Usage: python bench/ros2_bench.py [--rounds 3] [--seconds 4] [--sizes 200,4096,65536] [--pings 2000]
Prints a table and one JSON object.  Needs the ROS 2 wheels (make extras) and roughnet-agent with dds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

from dds_bench import agent_binary, free_port  # noqa: E402
from roughnet.ros2 import launch  # noqa: E402

QOS = {"ros2": {"profile": "default", "reliability": "reliable", "history_depth": 0},
       "dds": {"ros2": True, "reliability": "reliable", "history_depth": 0}}


def command(kind: str, cfg: dict) -> list[str]:
    if kind == "ros2":
        return [sys.executable, "-m", "roughnet.ros2.endpoint", "run", "--config-json", json.dumps(cfg)]
    return [agent_binary(), "run", "--config-json", json.dumps(cfg)]


def finish(p: subprocess.Popen, timeout: float) -> tuple[list[dict], float]:
    """Read the process's JSON lines to EOF, reap it; (lines, user + system CPU seconds)."""
    deadline = time.monotonic() + timeout
    text = p.stdout.read()
    while True:
        pid, _status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            p.kill()
        time.sleep(0.05)
    p.returncode = 0
    lines = [json.loads(x) for x in text.splitlines() if x.strip().startswith("{")]
    return lines, ru.ru_utime + ru.ru_stime


def pair(kind: str, pattern: str, common: dict, log_dir: Path) -> dict:
    """One listener and one connector of ``kind`` (ros2 or dds); their results and CPU seconds."""
    roles = ("receiver", "sender") if pattern == "stream" else ("ponger", "pinger")
    base = {"v": 1, "protocol": kind, "pattern": pattern, "report_interval_ms": 0, "timeout_ms": 120000,
            "topic": f"roughnet/bench{os.getpid()}", "options": QOS[kind]} | common
    env = launch.environment(log_dir) if kind == "ros2" else None
    port = free_port()
    with open(log_dir / "stderr.log", "a") as err:  # the endpoints' and agents' logs, not the bench's output
        lp = subprocess.Popen(command(kind, base | {"role": roles[0], "listen": f"127.0.0.1:{port}"}),
                              stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        ready = json.loads(lp.stdout.readline())
        if ready.get("type") != "ready":
            sys.exit(f"{kind} {roles[0]} did not start: {ready}")
        cp = subprocess.Popen(command(kind, base | {"role": roles[1], "peers": [ready["listen"]]}),
                              stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    c_lines, c_cpu = finish(cp, 180)
    l_lines, l_cpu = finish(lp, 60)

    def result(lines: list[dict], who: str) -> dict:
        r = next((x for x in lines if x.get("type") in ("result", "error")), None)
        if r is None or r.get("type") == "error":
            sys.exit(f"{kind} {who}: {r}")
        return r

    return {"listener": result(l_lines, roles[0]), "connector": result(c_lines, roles[1]),
            "listener_cpu_s": l_cpu, "connector_cpu_s": c_cpu}


def idle_cpu(kind: str, log_dir: Path) -> tuple[float, float]:
    """CPU seconds of a 1-message stream (start-up, discovery, handshake, end): (receiver, sender)."""
    r = pair(kind, "stream", {"payload_bytes": 200, "messages": 1}, log_dir)
    return r["listener_cpu_s"], r["connector_cpu_s"]


def ping(kind: str, size: int, n: int, log_dir: Path, idle: tuple[float, float]) -> dict:
    r = pair(kind, "ping", {"payload_bytes": size, "messages": n, "warmup": n // 10}, log_dir)
    rtt = r["connector"]["rtt_actual"]
    msgs = n + n // 10
    return {"p50_us": rtt["p50_us"], "p99_us": rtt["p99_us"],
            "cpu_us_per_ping_ponger": 1e6 * (r["listener_cpu_s"] - idle[0]) / msgs,
            "cpu_us_per_ping_pinger": 1e6 * (r["connector_cpu_s"] - idle[1]) / msgs}


def stream(kind: str, size: int, seconds: float, log_dir: Path, idle: tuple[float, float]) -> dict:
    r = pair(kind, "stream", {"payload_bytes": size, "duration_ms": int(seconds * 1000)}, log_dir)
    rx, tx = r["listener"], r["connector"]
    got = rx.get("received", 0)
    rate = got / rx["duration_s"] if rx.get("duration_s") else 0.0
    sent = tx.get("sent", got) or 1
    return {"msgs_per_s": rate, "received": got, "sent": tx.get("sent"), "lost": rx.get("lost"),
            "cpu_us_per_msg_receiver": 1e6 * (r["listener_cpu_s"] - idle[0]) / max(got, 1),
            "cpu_us_per_msg_sender": 1e6 * (r["connector_cpu_s"] - idle[1]) / sent}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--sizes", default="200,4096,65536", help="stream sizes in bytes, comma-separated")
    ap.add_argument("--ping-size", type=int, default=200)
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--logs", default="/tmp/roughnet-ros2-bench", help="ROS_LOG_DIR parent for the rclpy endpoints")
    a = ap.parse_args()
    lacking = launch.missing()
    if lacking:
        sys.exit(f"the ROS 2 wheels are missing ({', '.join(lacking)}): {launch.INSTALL_HINT}")
    sizes = [int(s) for s in a.sizes.split(",")]
    log_dir = Path(a.logs)
    log_dir.mkdir(parents=True, exist_ok=True)
    kinds = ("ros2", "dds")
    load_before = os.getloadavg()[0]
    all_: dict[str, dict[str, list[dict]]] = {k: {} for k in kinds}
    idle: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for rnd in range(a.rounds):
        for k in kinds:
            idle[k].append(idle_cpu(k, log_dir))
        for k in kinds:
            i = idle[k][-1]
            all_[k].setdefault("ping", []).append(ping(k, a.ping_size, a.pings, log_dir, i))
        for size in sizes:
            for k in kinds:
                all_[k].setdefault(f"stream_{size}", []).append(stream(k, size, a.seconds, log_dir, idle[k][-1]))
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr)

    def med(k: str, test: str, field: str) -> float:
        return statistics.median(x[field] for x in all_[k][test])

    rows = []
    rows.append(("ping p50 (us)", "ping", "p50_us"))
    rows.append(("ping p99 (us)", "ping", "p99_us"))
    rows.append(("ping CPU/ping, pinger (us)", "ping", "cpu_us_per_ping_pinger"))
    rows.append(("ping CPU/ping, ponger (us)", "ping", "cpu_us_per_ping_ponger"))
    for size in sizes:
        rows.append((f"stream {size} B (msg/s)", f"stream_{size}", "msgs_per_s"))
        rows.append((f"stream {size} B CPU/msg, sender (us)", f"stream_{size}", "cpu_us_per_msg_sender"))
        rows.append((f"stream {size} B CPU/msg, receiver (us)", f"stream_{size}", "cpu_us_per_msg_receiver"))
    table = []
    print(f"{'figure':42} {'ros2 (rclpy)':>14} {'dds (agent)':>14} {'ros2/dds':>9}")
    for label, test, field in rows:
        r, d = med("ros2", test, field), med("dds", test, field)
        ratio = r / d if d else float("nan")
        table.append({"figure": label, "ros2": round(r, 2), "dds": round(d, 2), "ratio": round(ratio, 2)})
        print(f"{label:42} {r:14.1f} {d:14.1f} {ratio:9.2f}")
    idle_med = {k: [round(statistics.median(x[j] for x in idle[k]), 3) for j in (0, 1)] for k in kinds}
    print(f"start-up + end CPU of a 1-message run (receiver, sender), s: ros2 {idle_med['ros2']}, dds {idle_med['dds']}")
    load = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    print(f"load average (1 min) at the start and the end: {load}")
    print(json.dumps({"bench": "ros2", "transport": "loopback 127.0.0.1", "load_1min": load, "rounds": a.rounds,
                      "seconds": a.seconds,
                      "ping_size": a.ping_size, "pings": a.pings, "qos": QOS, "median": table,
                      "idle_cpu_s": idle_med, "all": all_}))


if __name__ == "__main__":
    main()
