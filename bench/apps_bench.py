#!/usr/bin/env python3
"""What a user process ([[process]], docs/applications.md) costs, against independent tools in the same run.

Three measurements, each in ``--rounds`` rounds (the order of roughnet and its reference alternating
between rounds, so drift hits both), printed per round and as medians with their spread:

1. **A process in a run.** `roughnet run` (the CLI, ``--no-report``) of a scenario of processes only: two
   hosts, one kernel link, N processes ``sleep 1`` (``user = "root"``: the same argv as the reference)
   spread over the two hosts. From its record.json: ``harness_setup_s``, ``harness_measure_s``,
   ``harness_teardown_s``, ``duration_s`` and each process's ``ready_s - started_s``. Against:
   the topology of the same scenario built and torn down alone (roughnet's topology code, what the run
   costs without processes), and N ``ip netns exec <ns> sleep 1`` started by plain ``subprocess.Popen``
   in a namespace made here and waited for (the independent reference): ratio measure / plain.
2. **Sampling sockets every 100 ms.** ``apps.sockdiag.SocketSampler(ns, 0.1)`` watching N processes that
   each hold a listening socket and two TCP connections to it (both ends: four established sockets; to the
   address of an interface, since the sampler does not follow 127/8 connections),
   for ``--seconds``; ``sampler.cost()`` per sample and per socket. Against ``ss -N <ns> -tinp``
   (iproute2: the same sock_diag dump with tcp_info, and the sockets' processes from /proc) run every
   100 ms over the same time, its CPU from ``getrusage(RUSAGE_CHILDREN)``: ratio roughnet / ss; and
   ``ss -tin`` (no process lookup: ``-p`` reads the fds of every process of the machine) for scale.
3. **Starting an image.** The test image of ``apps.ocibundle.build_test_image`` (busybox + iperf3):
   ``apps.oci.unpack`` into a new cache folder (first time) and again (cached), against GNU ``tar -xf`` of
   the same layer blob; then a container running ``/bin/true`` to its exit the way a run starts it
   (``prepare_bundle``, the overlay wrapper + ``runc run``, ``remove_bundle``) against ``runc run`` of the
   same config.json with the root filesystem a plain copy (no overlay, no wrapper): ratio.

Needs root, runc, busybox-static, iperf3. Makes its own namespaces (``rn-bench-<hex>``), runc root and
caches in a temporary folder; the machine's image cache and runc root are not touched.

    .venv/bin/python bench/apps_bench.py --quick               # 1 round, N = 1 and 10
    .venv/bin/python bench/apps_bench.py --rounds 3 --wait-load 1.5 --json /tmp/apps_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from roughnet.apps import oci, ocibundle, sockdiag  # noqa: E402
from roughnet.plan import plan_sweep  # noqa: E402
from roughnet.topo import Ledger, Topology  # noqa: E402


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def say_load(where: str) -> float:
    la = load1()
    note = "  (above 1.5: another job ran; figures are not from a quiet machine)" if la > 1.5 else ""
    print(f"[load] {where}: 1-min load average {la:.2f}{note}", flush=True)
    return la


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def spread(xs: list[float]) -> str:
    return f"{min(xs):.4g}-{max(xs):.4g}" if xs else "-"


#: The address of an interface (a veth, both ends in the namespace) in our namespaces: connections to it are
#: not loopback ones (127/8), which the sampler counts but does not follow (apps.sockdiag.is_loopback).
LOCAL_ADDR = "198.18.251.1"


class Netns:
    """A namespace of ours (``rn-bench-<hex>``, loopback up, a veth end with LOCAL_ADDR), deleted on exit."""

    def __init__(self) -> None:
        self.name = f"rn-bench-{secrets.token_hex(4)}"

    def __enter__(self) -> str:
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True, timeout=20)
        try:
            for cmd in (["link", "set", "lo", "up"],
                        ["link", "add", "rnbench0", "type", "veth", "peer", "name", "rnbench1"],
                        ["addr", "add", f"{LOCAL_ADDR}/24", "dev", "rnbench0"], ["link", "set", "rnbench0", "up"]):
                subprocess.run(["ip", "-n", self.name, *cmd], check=True, capture_output=True, timeout=20)
        except BaseException:
            self.__exit__()
            raise
        return self.name

    def __exit__(self, *exc) -> None:
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True, timeout=20, check=False)


def end_pids(procs: list[subprocess.Popen]) -> None:
    """Our own children, by pid: SIGTERM, then SIGKILL after 5 s."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


# ---- 1. a process in a run --------------------------------------------------------------------------------

def scenario(n: int) -> str:
    procs = "".join(f'\n[[process]]\nname = "p{i}"\nhost = "{"ab"[i % 2]}"\ncommand = ["sleep", "1"]\nuser = "root"\n'
                    for i in range(n))
    return f"""
[scenario]
name = "apps-bench-{n}"
timeout = "60 s"

[[host]]
name = "a"
[[host]]
name = "b"

[[link]]
between = ["a", "b"]
engine = "kernel"
{procs}"""


def roughnet_run(n: int, work: Path) -> dict:
    path = work / f"procs{n}.toml"
    path.write_text(scenario(n))
    results = work / f"results{n}-{time.monotonic_ns()}"
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "roughnet.cli", "run", str(path), "--no-report", "--results",
                          str(results)], capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    recs = list(results.glob("runs/*/*/record.json"))
    if res.returncode != 0 or len(recs) != 1:
        raise SystemExit(f"roughnet run of {n} processes failed ({res.returncode}):\n{res.stdout[-3000:]}\n"
                         f"{res.stderr[-3000:]}")
    rec = json.loads(recs[0].read_text())
    if rec["status"] != "ok":
        raise SystemExit(f"run of {n} processes: status {rec['status']}: {rec.get('failure_reason')}")
    m, rows = rec["metrics"], rec["processes"]
    started = [r["started_s"] for r in rows]
    shutil.rmtree(results, ignore_errors=True)
    return {"setup_s": m["harness_setup_s"], "measure_s": m["harness_measure_s"],
            "teardown_s": m["harness_teardown_s"], "duration_s": rec["duration_s"], "cli_wall_s": wall,
            "ready_ms_median": 1000 * med([r["ready_s"] - r["started_s"] for r in rows]),
            "ready_ms_max": 1000 * max(r["ready_s"] - r["started_s"] for r in rows),
            "start_spread_ms": 1000 * (max(started) - min(started)),
            "ended_last_s": max(r["ended_s"] for r in rows)}


def topology_only(n: int, work: Path) -> dict:
    """The same scenario's topology (two hosts, the kernel link) built and torn down by roughnet's code."""
    path = work / f"topo{n}.toml"
    path.write_text(scenario(n))
    run = plan_sweep(path).runs[0]
    topo = Topology(run, Ledger(run.run_id[:8], run.run_id, work), engines={0: "kernel"})
    t0 = time.perf_counter()
    try:
        topo.build()
    finally:
        t1 = time.perf_counter()
        topo.teardown()
        t2 = time.perf_counter()
    if topo.teardown_errors:
        raise SystemExit(f"teardown failed: {topo.teardown_errors}")
    return {"topo_build_s": t1 - t0, "topo_teardown_s": t2 - t1}


def plain_sleeps(n: int) -> dict:
    """N `ip netns exec <ns> sleep 1` by plain Popen into a namespace of ours, waited for."""
    with Netns() as ns:
        procs: list[subprocess.Popen] = []
        try:
            t0 = time.perf_counter()
            for _ in range(n):
                procs.append(subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "1"], stdin=subprocess.DEVNULL,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            t_started = time.perf_counter()
            for p in procs:
                p.wait(timeout=60)
            t1 = time.perf_counter()
        finally:
            end_pids(procs)
    if any(p.returncode != 0 for p in procs):
        raise SystemExit(f"plain sleep failed: {[p.returncode for p in procs]}")
    return {"plain_wall_s": t1 - t0, "plain_start_spread_ms": 1000 * (t_started - t0)}


def bench_runs(ns_list: list[int], rounds: int, work: Path) -> dict:
    print("\n== 1. processes in a run: roughnet run (processes only, 2 hosts, kernel link) against plain Popen")
    print(f"{'round':>5} {'N':>3} {'setup s':>8} {'topo build':>10} {'measure s':>9} {'plain s':>8} {'ratio':>6} "
          f"{'teardown s':>10} {'topo tdown':>10} {'duration s':>10} {'ready ms':>8} {'spread ms':>9} "
          f"{'plain spread':>12}")
    out: dict[int, list[dict]] = {n: [] for n in ns_list}
    for r in range(rounds):
        for n in ns_list:
            parts = [lambda: roughnet_run(n, work), lambda: topology_only(n, work), lambda: plain_sleeps(n)]
            row: dict = {}
            for f in (parts if r % 2 == 0 else parts[::-1]):
                row.update(f())
            row["ratio"] = row["measure_s"] / row["plain_wall_s"]
            out[n].append(row)
            print(f"{r + 1:>5} {n:>3} {row['setup_s']:>8.3f} {row['topo_build_s']:>10.3f} {row['measure_s']:>9.3f} "
                  f"{row['plain_wall_s']:>8.3f} {row['ratio']:>6.3f} {row['teardown_s']:>10.3f} "
                  f"{row['topo_teardown_s']:>10.3f} {row['duration_s']:>10.3f} {row['ready_ms_median']:>8.1f} "
                  f"{row['start_spread_ms']:>9.1f} {row['plain_start_spread_ms']:>12.1f}", flush=True)
    summary = {}
    print("medians (spread over rounds):")
    for n, rows in out.items():
        m = {k: med([x[k] for x in rows]) for k in rows[0]}
        extra_setup = m["setup_s"] - m["topo_build_s"]
        extra_tdown = m["teardown_s"] - m["topo_teardown_s"]
        extra_measure = m["measure_s"] - m["plain_wall_s"]
        summary[n] = {**m, "extra_setup_s": extra_setup, "extra_teardown_s": extra_tdown,
                      "extra_measure_s": extra_measure}
        print(f"  N={n}: measure {m['measure_s']:.3f} s vs plain {m['plain_wall_s']:.3f} s, ratio {m['ratio']:.3f} "
              f"({spread([x['ratio'] for x in rows])}); setup {m['setup_s']:.3f} s vs topology build "
              f"{m['topo_build_s']:.3f} s (+{extra_setup:.3f} s); teardown {m['teardown_s']:.3f} s vs topology "
              f"teardown {m['topo_teardown_s']:.3f} s (+{extra_tdown:.3f} s); duration {m['duration_s']:.3f} s; "
              f"start to ready median {m['ready_ms_median']:.1f} ms (max {m['ready_ms_max']:.1f}); starts spread "
              f"over {m['start_spread_ms']:.1f} ms (plain Popen {m['plain_start_spread_ms']:.1f} ms); "
              f"measure after the last exit {m['measure_s'] - m['ended_last_s']:.3f} s; the CLI's wall time "
              f"{m['cli_wall_s']:.2f} s")
    if len(ns_list) >= 2:
        lo, hi = min(ns_list), max(ns_list)
        d = hi - lo
        per = {k: (summary[hi][k] - summary[lo][k]) / d for k in ("duration_s", "measure_s", "setup_s", "teardown_s",
                                                                  "plain_wall_s")}
        summary["per_process"] = per
        print(f"  per extra process (N={lo} -> {hi}): run duration +{1000 * per['duration_s']:.1f} ms (setup "
              f"{1000 * per['setup_s']:+.1f}, measure {1000 * per['measure_s']:+.1f}, teardown "
              f"{1000 * per['teardown_s']:+.1f}); plain Popen +{1000 * per['plain_wall_s']:.1f} ms")
    return {"rounds": {str(k): v for k, v in out.items()}, "median": {str(k): v for k, v in summary.items()}}


# ---- 2. sampling sockets -----------------------------------------------------------------------------------

HOLDER = r"""
import socket, sys, time
srv = socket.socket(); srv.bind((sys.argv[1], 0)); srv.listen()
keep = []
for _ in range(2):
    c = socket.create_connection(srv.getsockname()); a, _ = srv.accept(); keep += [c, a]
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    for c in keep[::2]:
        c.send(b"x" * 100)
    for a in keep[1::2]:
        a.recv(65536)
    time.sleep(0.05)
"""


def holders(ns: str, n: int) -> list[subprocess.Popen]:
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-S", "-c", HOLDER,
                                           LOCAL_ADDR],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True))
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise SystemExit(f"socket holder {p.pid} did not start (exit {p.poll()})")
    except BaseException:
        end_pids(procs)
        raise
    return procs


def sample_roughnet(ns: str, procs: list[subprocess.Popen], seconds: float) -> dict:
    s = sockdiag.SocketSampler(ns, 0.1)
    for i, p in enumerate(procs):
        s.watch(f"p{i}", p.pid)
    s.start()
    time.sleep(seconds)
    s.stop()
    cost = s.cost()
    conns = sum(s.totals(f"p{i}")["connections"] for i in range(len(procs)))
    return {"samples": cost["samples"], "cpu_ms_per_sample": 1000 * cost["cpu_s_per_sample"],
            "wall_ms_per_sample": 1000 * cost["wall_s_per_sample"], "connections_seen": conns,
            "lost": cost["destroy_broadcasts_lost"]}


def sample_ss(ns: str, seconds: float, flags: str = "-tinp") -> dict:
    """`ss -N ns <flags>` every 100 ms (a fixed grid) for ``seconds``; its CPU from RUSAGE_CHILDREN."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    n, wall = 0, 0.0
    end = time.monotonic() + seconds
    nxt = time.monotonic()
    lines = 0
    while time.monotonic() < end:
        t0 = time.perf_counter()
        out = subprocess.run(["ss", "-N", ns, flags], capture_output=True, text=True, check=True, timeout=10)
        wall += time.perf_counter() - t0
        lines = out.stdout.count("users:")
        n += 1
        nxt = max(nxt + 0.1, time.monotonic())
        time.sleep(max(0.0, nxt - time.monotonic()))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"samples": n, "cpu_ms_per_sample": 1000 * cpu / n, "wall_ms_per_sample": 1000 * wall / n,
            "sockets_with_process": lines}


def bench_sampling(ns_list: list[int], rounds: int, seconds: float) -> dict:
    print(f"\n== 2. sampling TCP sockets every 100 ms for {seconds:g} s: SocketSampler against `ss -tinp` "
          "(each process: 1 listening socket, 2 connections to itself over a local address = 4 established sockets)")
    print(f"{'round':>5} {'N':>3} {'sockets':>7} {'rn samples':>10} {'rn CPU ms/sample':>16} {'rn us/socket':>12} "
          f"{'ss samples':>10} {'ss CPU ms/sample':>16} {'ss us/socket':>12} {'ratio':>6} {'ss -tin ms':>10} "
          f"{'ratio':>6} {'conns seen':>10}")
    out: dict[int, list[dict]] = {n: [] for n in ns_list}
    for r in range(rounds):
        for n in ns_list:
            with Netns() as ns:
                procs = holders(ns, n)
                try:
                    time.sleep(0.5)
                    if r % 2 == 0:
                        rn, ss = sample_roughnet(ns, procs, seconds), sample_ss(ns, seconds)
                        ssn = sample_ss(ns, seconds, "-tin")
                    else:
                        ssn = sample_ss(ns, seconds, "-tin")
                        ss = sample_ss(ns, seconds)
                        rn = sample_roughnet(ns, procs, seconds)
                finally:
                    end_pids(procs)
            sockets = 5 * n  # in the namespace: each holder's listener and 4 established ends
            row = {"sockets": sockets, "rn_samples": rn["samples"], "rn_cpu_ms": rn["cpu_ms_per_sample"],
                   "rn_wall_ms": rn["wall_ms_per_sample"], "rn_us_per_socket": 1000 * rn["cpu_ms_per_sample"] / sockets,
                   "ss_samples": ss["samples"], "ss_cpu_ms": ss["cpu_ms_per_sample"],
                   "ss_wall_ms": ss["wall_ms_per_sample"],
                   "ss_us_per_socket": 1000 * ss["cpu_ms_per_sample"] / sockets,
                   "ss_nop_cpu_ms": ssn["cpu_ms_per_sample"],
                   "ratio": rn["cpu_ms_per_sample"] / ss["cpu_ms_per_sample"],
                   "ratio_nop": rn["cpu_ms_per_sample"] / ssn["cpu_ms_per_sample"],
                   "conns_seen": rn["connections_seen"],
                   "ss_sockets_with_process": ss["sockets_with_process"], "lost": rn["lost"]}
            out[n].append(row)
            print(f"{r + 1:>5} {n:>3} {sockets:>7} {row['rn_samples']:>10} {row['rn_cpu_ms']:>16.3f} "
                  f"{row['rn_us_per_socket']:>12.2f} {row['ss_samples']:>10} {row['ss_cpu_ms']:>16.3f} "
                  f"{row['ss_us_per_socket']:>12.2f} {row['ratio']:>6.3f} {row['ss_nop_cpu_ms']:>10.3f} "
                  f"{row['ratio_nop']:>6.3f} "
                  f"{row['conns_seen']:>10}", flush=True)
            if row["conns_seen"] != 4 * n:
                print(f"      note: the sampler attributed {row['conns_seen']} connections, {4 * n} expected")
    summary = {}
    print("medians (spread over rounds):")
    for n, rows in out.items():
        m = {k: med([x[k] for x in rows]) for k in rows[0]}
        summary[n] = m
        print(f"  N={n} ({m['sockets']:.0f} sockets): roughnet {m['rn_cpu_ms']:.3f} ms CPU per sample "
              f"({m['rn_us_per_socket']:.2f} us per socket; {m['rn_cpu_ms']:.2f} % of a core at 10 samples/s; "
              f"wall {m['rn_wall_ms']:.3f} ms), ss {m['ss_cpu_ms']:.3f} ms ({m['ss_us_per_socket']:.2f} us per "
              f"socket), ratio {m['ratio']:.3f} ({spread([x['ratio'] for x in rows])}); `ss -tin` (no process "
              f"lookup) {m['ss_nop_cpu_ms']:.3f} ms, ratio {m['ratio_nop']:.3f} "
              f"({spread([x['ratio_nop'] for x in rows])})")
    if len(ns_list) >= 2:
        lo, hi = summary[min(ns_list)], summary[max(ns_list)]
        d = hi["sockets"] - lo["sockets"]
        per = {k: 1000 * (hi[k] - lo[k]) / d for k in ("rn_cpu_ms", "ss_cpu_ms", "ss_nop_cpu_ms")}
        summary["per_socket_us"] = per
        print(f"  per extra socket (N={min(ns_list)} -> {max(ns_list)}; each process adds 5 sockets and its fds to "
              f"read): roughnet +{per['rn_cpu_ms']:.1f} us CPU per "
              f"sample, ss -tinp +{per['ss_cpu_ms']:.1f} us, ss -tin +{per['ss_nop_cpu_ms']:.1f} us")
    return {"rounds": {str(k): v for k, v in out.items()}, "median": {str(k): v for k, v in summary.items()}}


# ---- 3. starting an image ----------------------------------------------------------------------------------

HOSTS = "127.0.0.1 localhost\n127.0.1.1 bench\n"
RESOLV = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"


def layer_blobs(archive: Path, into: Path, image) -> list[Path]:
    """The image's layer blobs, extracted from the archive once (the reference tar reads these)."""
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xf", str(archive), "-C", str(into)], check=True, timeout=60)
    return [into / layer.name for layer in image.layers]


def unpack_round(image, blobs: list[Path], work: Path, order: int) -> dict:
    cache = work / f"cache-{secrets.token_hex(3)}"
    dest = work / f"tar-{secrets.token_hex(3)}"

    def ours() -> dict:
        t0 = time.perf_counter()
        rootfs, now = oci.unpack(image, cache)
        t1 = time.perf_counter()
        again, now2 = oci.unpack(image, cache)
        t2 = time.perf_counter()
        assert now and not now2 and again == rootfs
        return {"unpack_first_ms": 1000 * (t1 - t0), "unpack_cached_ms": 1000 * (t2 - t1)}

    def theirs() -> dict:
        dest.mkdir()
        t0 = time.perf_counter()
        for b in blobs:
            subprocess.run(["tar", "-xf", str(b), "-C", str(dest)], check=True, timeout=60)
        return {"tar_ms": 1000 * (time.perf_counter() - t0)}

    row: dict = {}
    for f in ((ours, theirs) if order == 0 else (theirs, ours)):
        row.update(f())
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    return row


def container_ours(image, rootfs: Path, ns: str, work: Path, runc_root: Path) -> dict:
    cid = f"rn-bench-{secrets.token_hex(4)}"
    bundle = work / "bundles" / cid
    t0 = time.perf_counter()
    ocibundle.prepare_bundle(image, rootfs, bundle, netns=ns, args=None, entrypoint=["/bin/true"], env={}, cwd=None,
                             uid=None, gid=None, hosts=HOSTS, resolv=RESOLV, hostname="bench", container_id=cid)
    t1 = time.perf_counter()
    proc = subprocess.Popen(ocibundle.run_argv(bundle, cid, runc_root), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        ocibundle.kill_container(cid, runc_root, bundle=bundle)
        proc.wait(timeout=10)
        raise
    t2 = time.perf_counter()
    ocibundle.remove_bundle(bundle)
    t3 = time.perf_counter()
    if proc.returncode != 0:
        raise SystemExit(f"container {cid} exited {proc.returncode}: {err.decode()[-800:]}")
    return {"prepare_ms": 1000 * (t1 - t0), "run_ms": 1000 * (t2 - t1), "remove_ms": 1000 * (t3 - t2)}


def plain_bundle(image, rootfs: Path, ns: str, work: Path) -> Path:
    """A bundle of the same config.json, its root a plain copy of the unpacked rootfs (no overlay, no wrapper)."""
    bundle = work / "plain-bundle"
    ocibundle.prepare_bundle(image, rootfs, bundle, netns=ns, args=None, entrypoint=["/bin/true"], env={}, cwd=None,
                             uid=None, gid=None, hosts=HOSTS, resolv=RESOLV, hostname="bench",
                             container_id="rn-bench-plain")
    (bundle / "rootfs").rmdir()
    subprocess.run(["cp", "-a", str(rootfs), str(bundle / "rootfs")], check=True, timeout=60)
    return bundle


def container_plain(bundle: Path, runc_root: Path) -> dict:
    cid = f"rn-bench-{secrets.token_hex(4)}"
    cfg = json.loads((bundle / "config.json").read_text())
    cfg["linux"]["cgroupsPath"] = f"/roughnet/{cid}"
    (bundle / "config.json").write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    proc = subprocess.Popen([ocibundle.runc_path(), "--root", str(runc_root), "run", "--bundle", str(bundle), cid],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        ocibundle.kill_container(cid, runc_root)
        proc.wait(timeout=10)
        raise
    t1 = time.perf_counter()
    if proc.returncode != 0:
        raise SystemExit(f"plain runc run {cid} exited {proc.returncode}: {err.decode()[-800:]}")
    return {"plain_run_ms": 1000 * (t1 - t0)}


def bench_image(rounds: int, per_round: int, work: Path) -> dict:
    print("\n== 3. starting an image (busybox + iperf3 test image)")
    archive = ocibundle.build_test_image(work / "iperf3.tar", name="roughnet.local/iperf3:bench",
                                         entrypoint=["/usr/bin/iperf3"], binaries=["/usr/bin/iperf3"])
    image = oci.load_image(archive)
    blobs = layer_blobs(archive, work / "archive", image)
    print(f"image {archive.name}: {archive.stat().st_size / 1e6:.1f} MB, {len(image.layers)} layer(s)")
    unpacks = []
    print(f"{'round':>5} {'unpack first ms':>15} {'cached ms':>10} {'tar -xf ms':>10} {'ratio first/tar':>15}")
    for r in range(rounds):
        row = unpack_round(image, blobs, work, r % 2)
        row["ratio"] = row["unpack_first_ms"] / row["tar_ms"]
        unpacks.append(row)
        print(f"{r + 1:>5} {row['unpack_first_ms']:>15.1f} {row['unpack_cached_ms']:>10.3f} {row['tar_ms']:>10.1f} "
              f"{row['ratio']:>15.3f}", flush=True)

    runc_root = work / "runc"
    cache = work / "cache"
    rootfs, _ = oci.unpack(image, cache)
    starts = []
    print(f"containers running /bin/true to its exit, {per_round} of each per round (median of the round):")
    print(f"{'round':>5} {'prepare ms':>10} {'run ms':>8} {'remove ms':>9} {'total ms':>9} {'plain runc ms':>13} "
          f"{'run/plain':>9} {'total/plain':>11}")
    with Netns() as ns:
        bundle = plain_bundle(image, rootfs, ns, work)
        for r in range(rounds):
            ours, plain = [], []
            for i in range(per_round):
                if (r + i) % 2 == 0:
                    ours.append(container_ours(image, rootfs, ns, work, runc_root))
                    plain.append(container_plain(bundle, runc_root))
                else:
                    plain.append(container_plain(bundle, runc_root))
                    ours.append(container_ours(image, rootfs, ns, work, runc_root))
            row = {k: med([x[k] for x in ours]) for k in ours[0]}
            row["total_ms"] = med([x["prepare_ms"] + x["run_ms"] + x["remove_ms"] for x in ours])
            row["plain_run_ms"] = med([x["plain_run_ms"] for x in plain])
            row["ratio_run"] = row["run_ms"] / row["plain_run_ms"]
            row["ratio_total"] = row["total_ms"] / row["plain_run_ms"]
            starts.append(row)
            print(f"{r + 1:>5} {row['prepare_ms']:>10.2f} {row['run_ms']:>8.1f} {row['remove_ms']:>9.2f} "
                  f"{row['total_ms']:>9.1f} {row['plain_run_ms']:>13.1f} {row['ratio_run']:>9.3f} "
                  f"{row['ratio_total']:>11.3f}", flush=True)
    mu = {k: med([x[k] for x in unpacks]) for k in unpacks[0]}
    ms = {k: med([x[k] for x in starts]) for k in starts[0]}
    print("medians (spread over rounds):")
    print(f"  unpack first {mu['unpack_first_ms']:.1f} ms ({spread([x['unpack_first_ms'] for x in unpacks])}), "
          f"cached {mu['unpack_cached_ms']:.3f} ms, tar -xf of the same layer(s) {mu['tar_ms']:.1f} ms: ratio "
          f"{mu['ratio']:.3f} ({spread([x['ratio'] for x in unpacks])})")
    print(f"  container start to exit: roughnet {ms['run_ms']:.1f} ms (+ prepare {ms['prepare_ms']:.2f}, remove "
          f"{ms['remove_ms']:.2f}), plain runc run {ms['plain_run_ms']:.1f} ms: ratio {ms['ratio_run']:.3f} "
          f"({spread([x['ratio_run'] for x in starts])}), with prepare and remove {ms['ratio_total']:.3f} "
          f"({spread([x['ratio_total'] for x in starts])})")
    tini = ocibundle.find_init()
    print(f"  (both with the same config.json: {'tini-static as PID 1' if tini else 'no init'}, runc "
          f"{subprocess.run([ocibundle.runc_path(), '--version'], capture_output=True, text=True).stdout.split()[2]})")
    return {"unpack": {"rounds": unpacks, "median": mu}, "start": {"rounds": starts, "median": ms}}


# ---- main --------------------------------------------------------------------------------------------------

def wait_quiet(limit: float, max_s: float) -> None:
    end = time.monotonic() + max_s
    while load1() >= limit and time.monotonic() < end:
        print(f"[load] {load1():.2f} >= {limit}: waiting 30 s (up to {max(0, end - time.monotonic()):.0f} s more)",
              flush=True)
        time.sleep(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 round, N = 1 and 10")
    ap.add_argument("--n", default="1,50", help="process counts (default 1,50)")
    ap.add_argument("--seconds", type=float, default=10.0, help="sampling time per measurement (section 2)")
    ap.add_argument("--containers", type=int, default=5, help="containers of each kind per round (section 3)")
    ap.add_argument("--only", default="runs,sampling,image", help="sections to run (comma list)")
    ap.add_argument("--wait-load", type=float, help="first wait until the 1-min load average is below this")
    ap.add_argument("--wait-max", type=float, default=1800.0, help="seconds to wait at most (--wait-load)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (namespaces, runc)", file=sys.stderr)
        return 2
    rounds = 1 if args.quick else args.rounds
    ns_list = [1, 10] if args.quick else [int(x) for x in args.n.split(",")]
    seconds = min(args.seconds, 5.0) if args.quick else args.seconds
    only = set(args.only.split(","))
    if args.wait_load is not None:
        wait_quiet(args.wait_load, args.wait_max)
    out: dict = {"load": {"start": say_load("start")}, "rounds": rounds, "n": ns_list,
                 "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    print(out["uptime"])
    with tempfile.TemporaryDirectory(prefix="rn-apps-bench-") as d:
        work = Path(d)
        if "runs" in only:
            out["runs"] = bench_runs(ns_list, rounds, work)
            out["load"]["after_runs"] = say_load("after section 1")
        if "sampling" in only:
            out["sampling"] = bench_sampling(ns_list, rounds, seconds)
            out["load"]["after_sampling"] = say_load("after section 2")
        if "image" in only:
            runc_root = work / "runc"
            try:
                out["image"] = bench_image(rounds, args.containers, work)
            finally:
                if runc_root.exists():  # containers a failure left
                    listed = subprocess.run([ocibundle.runc_path(), "--root", str(runc_root), "list", "-q"],
                                            capture_output=True, text=True).stdout.split()
                    for cid in listed:
                        ocibundle.kill_container(cid, runc_root)
            out["load"]["after_image"] = say_load("after section 3")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
