#!/usr/bin/env python3
"""roughnet-agent's MQTT driver against mosquitto's own clients (libmosquitto, C).

The independent tool: `mosquitto_pub -l` publishes stdin lines as fast as it
can, `mosquitto_sub -C N` exits after N messages; the rate is N over the time
from the first publication to mosquitto_sub's exit (measured here, so it includes
the subscriber's last delivery, as the agent's figure does).  The agent runs the
same workload: a stream receiver and a stream sender with no rate, N messages of
S bytes at the same QoS; its figure is the receiver's msgs/sec from first to last
arrival.  Both go through one mosquitto started here on 127.0.0.1; rounds alternate
the order.  A comparison against an independent tool, not a target.

Usage: python bench/mqtt_bench.py [--rounds 3] [--messages 50000] [--size 128] [--qos 0 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from roughnet.binaries import require_binary  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mosquitto() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="rn-mqtt-bench-") as d:
        port = free_port()
        conf = Path(d) / "m.conf"
        # Queues large enough that a fast publisher is not cut off by the broker's limits.
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                        "max_inflight_messages 100\nmax_queued_messages 1000000\n")
        p = subprocess.Popen([shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", str(conf)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if p.poll() is not None:
                        raise RuntimeError("mosquitto exited")
                    time.sleep(0.02)
            yield f"127.0.0.1:{port}"
        finally:
            p.terminate()
            p.wait(timeout=10)


def agent_rate(agent: Path, broker: str, topic: str, n: int, size: int, qos: int) -> tuple[float, int]:
    def cfg(role: str) -> str:
        return json.dumps({"v": 1, "role": role, "protocol": "mqtt", "pattern": "stream", "broker": broker,
                           "topic": topic, "payload_bytes": size, "messages": n, "report_interval_ms": 0,
                           "timeout_ms": 120000, "options": {"qos": qos}})

    rx = subprocess.Popen([str(agent), "run", "--config-json", cfg("receiver")], stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None
    assert json.loads(rx.stdout.readline())["type"] == "ready"
    subprocess.run([str(agent), "run", "--config-json", cfg("sender")], capture_output=True, check=True, timeout=300)
    out, _ = rx.communicate(timeout=120)
    r = json.loads(out.splitlines()[-1])
    return r["received"] / r["duration_s"], r["lost"]


def mosquitto_rate(broker: str, topic: str, n: int, size: int, qos: int) -> float:
    host, port = broker.rsplit(":", 1)
    sub = subprocess.Popen(["stdbuf", "-oL", "mosquitto_sub", "-h", host, "-p", port, "-t", topic, "-q", str(qos),
                            "-C", str(n), "-d"], stdout=subprocess.PIPE, text=True)
    assert sub.stdout is not None
    while "SUBACK" not in sub.stdout.readline():
        pass
    lines = ("x" * (size - 1) + "\n") * n  # each line is one message of size - 1 bytes
    t0 = time.monotonic()
    subprocess.run(["mosquitto_pub", "-h", host, "-p", port, "-t", topic, "-q", str(qos), "-l"], input=lines,
                   text=True, check=True, timeout=300)
    sub.stdout.read()
    sub.wait(timeout=120)
    return n / (time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--qos", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    for tool in ("mosquitto_pub", "mosquitto_sub", "stdbuf"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (apt-get install mosquitto-clients coreutils)")
    agent = require_binary("roughnet-agent")
    rows = []
    with mosquitto() as broker:
        for qos in a.qos:
            for r in range(a.rounds):
                res = {}
                for which in (["agent", "mosquitto"] if r % 2 == 0 else ["mosquitto", "agent"]):
                    if which == "agent":
                        res[which], lost = agent_rate(agent, broker, f"rn/bench/a{qos}{r}", a.messages, a.size, qos)
                    else:
                        res[which] = mosquitto_rate(broker, f"rn/bench/m{qos}{r}", a.messages, a.size, qos)
                row = {"qos": qos, "round": r, "agent_msgs_s": res["agent"], "agent_lost": lost,
                       "mosquitto_clients_msgs_s": res["mosquitto"], "ratio": res["agent"] / res["mosquitto"]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = {f"qos{q}_ratio_median": statistics.median(r["ratio"] for r in rows if r["qos"] == q) for q in a.qos}
    print(json.dumps(summary))
    if a.json:
        a.json.write_text(json.dumps({"rounds": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
