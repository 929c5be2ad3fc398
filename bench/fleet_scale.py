#!/usr/bin/env python3
"""How many cars publishing to each other at 10 Hz this machine runs, per protocol (issue 16).

For each protocol and fleet size N, a fleet of N cars and one roadside unit (which holds the MQTT
broker or nats-server) on one 802.11p segment (roughnet-wire, per-pair loss from positions), every car publishing 300 B at
10 msg/s to every other host (`from = "c*"`, `to = "*"`: N x N flows; `--agents flow`: N x (N + 1) agent processes, `--agents host` (the default): N + 1). The cars stand
on a circle of 40 m radius around the unit (every pair within 80 m: the model loses nothing there), so
whatever is lost or late is the machine's, not the radio's. Each run is a real `roughnet run`; the bench
reads its store and prints, per run: the run's verdict and reasons, delivered / sent (from the `distance`
table: every message of every flow), p99 and max one-way latency, the agents' CPU (s per s of run), the
machine's CPU, the wire's worst p99 scheduling error and its kernel receive drops, and how long the run
took from start to stored. With `--baseline` the same fleet also runs on the kernel engine (a Linux
bridge, no wire, no loss model), the independent reference for what the wire adds: the bench prints the
ratio of p99 latency and agents' CPU wire / bridge.

SUMO's share: `--sumo` times SUMO (the eclipse-sumo wheel) simulating the shipped town (scenarios/sumo,
32 vehicles, 60 s in 1 s steps) as `[mobility] net`/`routes` does at plan time, and reading its FCD;
runs replay the trace, so SUMO costs nothing while a run goes.

    .venv/bin/python bench/fleet_scale.py --cars 4,8,12,16 --protocols udp,zenoh,mqtt --duration 10s \
        --baseline --sumo --results /tmp/fleet-scale

Needs root (namespaces) and `make build`. Results stay in --results (one sweep per protocol and size).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROUGHNET = ROOT / ".venv" / "bin" / "roughnet"
PYTHON = ROOT / ".venv" / "bin" / "python"

KNOBS = {
    "udp": '[workload.udp]\nbroadcast = true\n',  # one datagram per message on the medium (as CAMs are sent)
    "zenoh": '[workload.zenoh]\ntransport = "udp"\nreliability = "best_effort"\n',
    "dds": '[workload.dds]\nreliability = "best_effort"\n',
    "mqtt": '[workload.mqtt]\nqos = 0\n',
    "nats": "",  # core NATS: at most once, as MQTT QoS 0
    # DDS with SPDP and best-effort data over multicast: one datagram per sample on the medium, not one per reader
    "dds-multicast": '[workload.dds]\nreliability = "best_effort"\nmulticast = true\n',
}
#: Variants of a protocol (a name of KNOBS): the protocol they run.
VARIANTS = {"dds-multicast": "dds"}


def scenario(n: int, protocol: str, duration_s: float, engine: str, agents: str = "host",
             nodelay: bool = False) -> str:
    placed = engine == "wire"
    text = (f'[scenario]\nname = "fleet-{protocol}-{n}-{engine}-{agents}"\nengine = "{engine}"\n'
            f'agents = "{agents}"\ntimeout = "{duration_s + 20:g} s"\n\n')  # fmt: skip
    text += '[[host]]\nname = "rsu"\n' + ('position = ["0 m", "0 m"]\n' if placed else "")
    for i in range(n):
        a = 2 * math.pi * i / n
        text += f'[[host]]\nname = "c{i}"\n'
        if placed:
            text += f'position = ["{40 * math.cos(a):.2f} m", "{40 * math.sin(a):.2f} m"]\n'
    text += '\n[[link]]\nbetween = ["*"]\n' + ('loss_model = { model = "ieee80211p" }\n' if placed else "")
    text += (f'\n[[workload]]\nname = "cam"\npattern = "stream"\nprotocol = "{VARIANTS.get(protocol, protocol)}"\n'
             f'from = "c*"\nto = "*"\n'
             f'payload = "300 B"\nrate = "10 msg/s"\nduration = "{duration_s:g} s"\n')  # fmt: skip
    text += KNOBS.get(protocol, "")
    if protocol == "mqtt":
        text += '\n[[service]]\nkind = "mosquitto"\nhost = "rsu"\nmax_queued = 0\nmax_inflight = 0\n'
        if nodelay:  # the broker's TCP_NODELAY (set_tcp_nodelay): no Nagle on its one connection per car
            text += "nodelay = true\n"
    if protocol == "nats":  # nats-server on the unit, as mosquitto
        text += '\n[[service]]\nkind = "nats"\nhost = "rsu"\n'
    return text


def run_one(n: int, protocol: str, duration_s: float, engine: str, results: Path, agents: str = "host",
            nodelay: bool = False) -> dict:
    results.mkdir(parents=True, exist_ok=True)
    name = f"fleet-{protocol}-{n}-{engine}-{agents}"
    f = results / f"{name}.toml"
    f.write_text(scenario(n, protocol, duration_s, engine, agents, nodelay))
    t0 = time.monotonic()
    env = {"COLUMNS": "200", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    if os.environ.get("PYTHONPATH"):  # another checkout's roughnet (and so its bin/) with this venv
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    out = subprocess.run([str(ROUGHNET), "run", str(f), "--results", str(results)], capture_output=True, text=True,
                         check=False, env=env)  # fmt: skip
    took = time.monotonic() - t0
    row = {"protocol": protocol, "cars": n, "engine": engine, "mode": agents, "nodelay": nodelay, "wall_s": round(took, 1),
           "exit": out.returncode}  # fmt: skip
    if out.returncode != 0:
        row["error"] = (out.stderr or out.stdout).strip().splitlines()[-1:]
    row.update(read_store(results, name, duration_s))
    # setup + teardown: the run's wall time less the traffic (its duration) and the receivers' last linger
    row["overhead_s"] = round(took - duration_s, 1)
    return row


def read_store(results: Path, name: str, duration_s: float) -> dict:
    sys.path.insert(0, str(ROOT / "python"))
    from roughnet.results import Store

    with Store(results, read_only=True) as store:
        sweeps = [s for s in store.sweeps() if s["scenario"] == name]
        if not sweeps:
            return {"status": "not stored"}
        sweep = sweeps[-1]["sweep_id"]
        runs = store.runs(sweep)
        if not runs:
            return {"status": "not stored"}
        r = runs[-1]
        m = r.get("metrics") or {}
        dist = store.distance(sweep)
        flows = store.flows(sweep)
    out = {"status": r["status"], "validity": r.get("validity"), "reasons": r.get("validity_reasons") or [],
           "failure": (r.get("failure_reason") or "")[:300]}  # fmt: skip
    if dist:
        sent = sum(d["sent"] for d in dist)
        out["sent"], out["delivered"] = sent, sum(d["delivered"] for d in dist)
    else:  # no positions (the bridge): the flows' own counts
        out["sent"] = sum(int((f["metrics"] or {}).get("received") or 0) + int((f["metrics"] or {}).get("lost") or 0)
                          for f in flows)  # fmt: skip
        out["delivered"] = sum(int((f["metrics"] or {}).get("received") or 0) for f in flows)
    out["ratio"] = round(out["delivered"] / out["sent"], 4) if out.get("sent") else None
    lats = [(f["metrics"] or {}).get("lat_p99_us") for f in flows]
    lats = [v for v in lats if v is not None]
    out["p99_us_worst_flow"] = round(max(lats), 1) if lats else None
    p50s = sorted(v for v in ((f["metrics"] or {}).get("lat_p50_us") for f in flows) if v is not None)
    out["p50_us_median_flow"] = round(p50s[len(p50s) // 2], 1) if p50s else None
    out["agents"] = m.get("agent_processes")
    out["agents_cpu_per_s"] = round(float(m.get("cpu_agents_s") or 0) / duration_s, 3)
    if out.get("delivered"):  # agents' CPU per message delivered (to one receiver), in microseconds
        out["agents_cpu_us_per_delivered"] = round(float(m.get("cpu_agents_s") or 0) / out["delivered"] * 1e6, 1)
    out["machine_cpu"] = m.get("cpu_machine_util")
    worst_sched, drops = None, 0
    for c in (r.get("link_counters") or {}).values():
        for port in ((c or {}).get("ports") or {}).values():
            down = port.get("downlink") or {}
            v = down.get("sched_error_p99_us")
            if v is not None:
                worst_sched = max(worst_sched or 0, v)
            drops += int((down.get("io") or {}).get("rx_kernel_drops") or 0)
            drops += int(((port.get("uplink") or {}).get("io") or {}).get("rx_kernel_drops") or 0)
    out["wire_sched_p99_us_worst_port"] = worst_sched
    out["wire_rx_kernel_drops"] = drops
    return out


def sumo_cost() -> dict:
    code = (
        "import time, pathlib, tempfile\n"
        "from roughnet.mobility import sumo, fcd\n"
        "t=time.monotonic(); d=pathlib.Path(tempfile.mkdtemp()); out=d/'t.fcd.xml'\n"
        "sumo.write_fcd(pathlib.Path('scenarios/sumo/town.net.xml'), [pathlib.Path('scenarios/sumo/town.rou.xml')],"
        " out, end_s=60.0, step_s=1.0, seed=1)\n"
        "a=time.monotonic(); v=fcd.read_fcd(out); b=time.monotonic()\n"
        "print(round(a-t,3), round(b-a,3), len(v))\n"
    )
    out = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:]}
    sim, read, vehicles = out.stdout.split()
    return {"sumo_s": float(sim), "read_fcd_s": float(read), "vehicles": int(vehicles)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cars", default="4,8,12,16")
    ap.add_argument("--protocols", default="udp,zenoh,mqtt,dds")
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--baseline", action="store_true", help="also run each fleet on the kernel engine (a bridge)")
    ap.add_argument("--sumo", action="store_true", help="time SUMO on the shipped town")
    ap.add_argument("--agents", default="host", help="host, flow or host,flow (both, in turn: the comparison)")
    ap.add_argument("--results", default="/tmp/fleet-scale")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--mqtt-nodelay", action="store_true", help="mosquitto with nodelay = true (no Nagle at the broker)")
    args = ap.parse_args()
    duration_s = float(args.duration.rstrip("s"))
    results = Path(args.results)
    rows = []
    if args.sumo:
        s = sumo_cost()
        print(f"sumo: {json.dumps(s)}", flush=True)
        rows.append({"sumo": s})
    for protocol in args.protocols.split(","):
        for n in (int(x) for x in args.cars.split(",")):
            engines = ["wire", "kernel"] if args.baseline else ["wire"]
            modes = args.agents.split(",")
            got = {}
            for engine in engines:
                for mode in modes:
                    row = run_one(n, protocol, duration_s, engine, results, mode, args.mqtt_nodelay)
                    got.setdefault(engine, row)
                    got[(engine, mode)] = row
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            if len(modes) > 1 and all(got[("wire", m)].get("agents_cpu_us_per_delivered") for m in modes):
                h, f = got[("wire", "host")], got[("wire", "flow")]
                print(f"ratio host/flow {protocol} N={n}: agents' CPU per delivered message "
                      f"{h['agents_cpu_us_per_delivered'] / f['agents_cpu_us_per_delivered']:.2f}, processes "
                      f"{h.get('agents')}/{f.get('agents')}", flush=True)
            if args.baseline and all(got[e].get("p99_us_worst_flow") for e in engines):
                w, k = got["wire"], got["kernel"]
                print(f"ratio wire/bridge {protocol} N={n}: p99 {w['p99_us_worst_flow'] / k['p99_us_worst_flow']:.2f}, "
                      f"agents' CPU {w['agents_cpu_per_s'] / max(k['agents_cpu_per_s'], 1e-9):.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
