"""roughnet-wire between real namespaces (root): forwarding, delay, loss, determinism, stats, control socket.

Each test builds its own A <-> L <-> B namespaces (``rn-tw<pid>-<tag>-*``, bench/wire_topo.py), runs the built
roughnet-wire in L, sends UDP datagrams with bench/wire_probe.py and checks properties with statistical bounds.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "python"))

from wire_topo import ADDR_A, ADDR_B, Topo  # noqa: E402

from roughnet.binaries import find_binary  # noqa: E402

WIRE = find_binary("roughnet-wire")
PROBE = REPO / "bench" / "wire_probe.py"

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)"),
    pytest.mark.skipif(WIRE is None, reason="roughnet-wire is not built "
                       "(CARGO_TARGET_DIR=/var/cache/roughnet/target cargo build --release -p roughnet-wire)"),
    pytest.mark.skipif(shutil.which("ethtool") is None, reason="ethtool is not installed (offloads must be off)"),
]

# z for a two-sided 99.9 % interval.
Z999 = 3.2905


def probe(t: Topo, count: int, rate: float, size: int = 64, port: int = 7001, timeout_extra: float = 20) -> dict:
    """Send `count` numbered datagrams A -> B at `rate`/s; the receiver's result (seqs, one-way latency)."""
    rx = t.popen(t.ns_b, [sys.executable, str(PROBE), "recv", "--bind", f"{ADDR_B}:{port}", "--count", str(count),
                          "--timeout", str(count / rate + timeout_extra), "--linger", "1.5"],
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert json.loads(rx.stdout.readline())["type"] == "ready"
    tx = t.run(t.ns_a, [sys.executable, str(PROBE), "send", "--to", f"{ADDR_B}:{port}", "--count", str(count),
                        "--rate", str(rate), "--size", str(size)], timeout=count / rate + 60)
    assert tx.returncode == 0, tx.stderr
    assert json.loads(tx.stdout.splitlines()[-1])["errors"] == 0
    out, err = rx.communicate(timeout=count / rate + timeout_extra + 30)
    assert rx.returncode == 0, err
    return json.loads(out.splitlines()[-1])


@pytest.fixture
def topo(tmp_path, request):
    tag = request.node.name.replace("test_", "")[:6].replace("_", "")
    with Topo(tag) as t:
        t.quiet()
        t.workdir = tmp_path
        yield t


def both(d: dict) -> dict:
    return {"a_to_b": dict(d), "b_to_a": dict(d)}


#: The wire's forwarding threads: one loop (the default), one thread per direction (`wire_threads = 2`).
THREADS = pytest.mark.parametrize("threads", ["1", "2"])


@THREADS
def test_forwards_both_ways_and_reports_consistent_stats(topo, threads):
    ready = topo.start_wire(WIRE, {}, seed=1, workdir=topo.workdir, extra=["--threads", threads])
    assert ready["threads"] == int(threads)
    # A forgets B's MAC: its broadcast ARP request must cross the wire for anything to arrive.
    assert topo.run(topo.ns_a, ["ip", "neigh", "del", ADDR_B, "dev", "rnwa"]).returncode == 0
    res = probe(topo, 300, 300, size=200)
    neigh = topo.run(topo.ns_a, ["ip", "-j", "neigh", "show", ADDR_B, "dev", "rnwa"]).stdout
    assert json.loads(neigh)[0]["state"][0] in ("REACHABLE", "STALE", "DELAY", "PROBE"), neigh
    assert res["received"] == 300 and res["unique"] == 300
    # And the other way (B -> A), with a receiver in A.
    rx = topo.popen(topo.ns_a, [sys.executable, str(PROBE), "recv", "--bind", f"{ADDR_A}:7002", "--count", "50",
                                "--timeout", "20"], stdout=subprocess.PIPE, text=True)
    rx.stdout.readline()
    topo.run(topo.ns_b, [sys.executable, str(PROBE), "send", "--to", f"{ADDR_A}:7002", "--count", "50",
                         "--rate", "200"])
    back = json.loads(rx.communicate(timeout=40)[0].splitlines()[-1])
    assert back["received"] == 50

    live = topo.control({"cmd": "stats"})
    stats = topo.stop_wire()
    for st in (live, stats):
        assert st["v"] == 1 and st["type"] == "stats" and st["threads"] == int(threads)
    ab, ba = stats["a_to_b"], stats["b_to_a"]
    # At least the datagrams (plus ARP) went each way; nothing was dropped; everything in came out and was sent.
    assert ab["packets_in"] >= 300 and ba["packets_in"] >= 50
    for d in (ab, ba):
        assert sum(d["drops"].values()) == 0
        assert d["packets_out"] == d["packets_in"] and d["bytes_out"] == d["bytes_in"]
        assert d["io"]["tx_frames"] == d["packets_out"]
        assert d["sched_error"]["count"] == d["packets_out"]
        assert d["io"]["rx_kernel_drops"] == 0 and d["io"]["rx_truncated"] == 0
    # 300 datagrams of 200 B UDP payload: 242-byte frames (14 Ethernet + 20 IP + 8 UDP + 200).
    assert ab["bytes_in"] >= 300 * 242
    # The live reply was taken before the end, so it cannot exceed the final counts.
    assert live["a_to_b"]["packets_in"] <= ab["packets_in"]


@THREADS
def test_delay_10ms_is_realised_one_way(topo, threads):
    topo.start_wire(WIRE, both({"delay_ns": 10_000_000}), seed=1, workdir=topo.workdir, extra=["--threads", threads])
    res = probe(topo, 1000, 200)
    stats = topo.stop_wire()
    assert res["received"] == 1000
    lat = res["latency_us"]
    # Never early: no datagram may arrive before the configured delay.
    assert lat["min"] >= 10_000, lat
    # p50 close to 10 ms: the issue asks 100 us for the emulator; the Python probe itself adds ~50-80 us on this
    # kind of VM (measured over a plain veth), and the machine is shared, hence 500 us here.
    assert lat["p50"] <= 10_500, lat
    # The wire's own account agrees: its median scheduling error is far below the realised excess.
    assert stats["a_to_b"]["sched_error"]["p50_us"] < 200
    assert res["reordered"] == 0


@THREADS
def test_loss_10_percent_within_binomial_bound(topo, threads):
    n, p = 20_000, 0.10
    topo.start_wire(WIRE, {"a_to_b": {"loss": {"model": "bernoulli", "p": p}}}, seed=7, workdir=topo.workdir,
                    extra=["--threads", threads])
    res = probe(topo, n, 4000)
    stats = topo.stop_wire()
    lost = n - res["unique"]
    half = Z999 * math.sqrt(n * p * (1 - p))
    assert abs(lost - n * p) <= half, f"lost {lost} of {n}, expected {n * p:.0f} +- {half:.0f}"
    # Every missing datagram is one the wire dropped on purpose (no I/O loss), and the wire counted it.
    ab = stats["a_to_b"]
    assert ab["drops"]["loss"] == lost
    assert ab["io"]["rx_kernel_drops"] == 0
    assert sum(stats["b_to_a"]["drops"].values()) == 0


def dropped_seqs(t: Topo, seed: int, n: int, threads: str = "1") -> set[int]:
    t.start_wire(WIRE, {"a_to_b": {"loss": {"model": "bernoulli", "p": 0.2}}}, seed=seed, workdir=t.workdir,
                 extra=["--threads", threads])
    res = probe(t, n, 2000)
    stats = t.stop_wire()
    assert stats["a_to_b"]["io"]["rx_kernel_drops"] == 0
    return set(range(n)) - set(res["seqs"])


def test_same_seed_drops_same_sequence_numbers(topo):
    n = 3000
    first = dropped_seqs(topo, 42, n)
    second = dropped_seqs(topo, 42, n)
    other = dropped_seqs(topo, 43, n)
    assert 0.15 * n < len(first) < 0.25 * n
    assert first == second
    # A different seed gives a different pattern (two independent 20 % patterns over 3000 agree with
    # probability ~0).
    assert first != other


def test_two_threads_drop_what_one_loop_drops(topo):
    # Each direction thread has its own emulator built from the same seed: a direction's decisions are the
    # single loop's for the same frames.
    n = 3000
    one = dropped_seqs(topo, 42, n, "1")
    two = dropped_seqs(topo, 42, n, "2")
    assert 0.15 * n < len(one) < 0.25 * n
    assert one == two


def test_two_threads_drain_both_directions_at_sigterm(topo):
    # 300 ms each way: at the signal frames are held in both threads; each sends its own at their times.
    topo.start_wire(WIRE, both({"delay_ns": 300_000_000}), seed=1, workdir=topo.workdir, extra=["--threads", "2"])
    rx_b = topo.popen(topo.ns_b, [sys.executable, str(PROBE), "recv", "--bind", f"{ADDR_B}:7020", "--count", "100",
                                  "--timeout", "20"], stdout=subprocess.PIPE, text=True)
    rx_a = topo.popen(topo.ns_a, [sys.executable, str(PROBE), "recv", "--bind", f"{ADDR_A}:7021", "--count", "100",
                                  "--timeout", "20"], stdout=subprocess.PIPE, text=True)
    rx_b.stdout.readline()
    rx_a.stdout.readline()
    tx_a = topo.popen(topo.ns_a, [sys.executable, str(PROBE), "send", "--to", f"{ADDR_B}:7020", "--count", "100",
                                  "--rate", "1000"], stdout=subprocess.PIPE, text=True)
    tx_b = topo.popen(topo.ns_b, [sys.executable, str(PROBE), "send", "--to", f"{ADDR_A}:7021", "--count", "100",
                                  "--rate", "1000"], stdout=subprocess.PIPE, text=True)
    tx_a.communicate(timeout=30)
    tx_b.communicate(timeout=30)
    stats = topo.stop_wire()  # within 300 ms of the last datagram: some are still held
    got_b = json.loads(rx_b.communicate(timeout=40)[0].splitlines()[-1])
    got_a = json.loads(rx_a.communicate(timeout=40)[0].splitlines()[-1])
    stop = stats["stop"]
    assert stop["held_at_signal"] >= 1, stop  # the drain had something to do (not a vacuous pass)
    assert stop["left_at_exit"] == 0 and stop["sent_while_draining"] >= stop["held_at_signal"], stop
    assert got_b["received"] == 100 and got_a["received"] == 100
    for d in ("a_to_b", "b_to_a"):
        assert stats[d]["packets_out"] == stats[d]["packets_in"] >= 100, stats[d]
        assert stats[d]["io"]["tx_frames"] == stats[d]["packets_out"]


@THREADS
def test_control_socket_down_up_and_set(topo, threads):
    topo.start_wire(WIRE, {}, seed=3, workdir=topo.workdir, extra=["--threads", threads])
    assert probe(topo, 100, 500, port=7010)["received"] == 100

    assert topo.control({"cmd": "down"}) == {"v": 1, "type": "ok", "cmd": "down"}
    down = probe(topo, 100, 500, port=7011, timeout_extra=3)
    assert down["received"] == 0
    st = topo.control({"cmd": "stats"})
    assert st["up"] is False and st["a_to_b"]["drops"]["link_down"] >= 100

    assert topo.control({"cmd": "up"})["type"] == "ok"
    assert probe(topo, 100, 500, port=7012)["received"] == 100

    # One-way partition: A -> B down only.
    assert topo.control({"cmd": "down", "direction": "a_to_b"})["type"] == "ok"
    st = topo.control({"cmd": "stats"})
    assert st["a_to_b"]["up"] is False and st["b_to_a"]["up"] is True
    assert topo.control({"cmd": "up", "direction": "a_to_b"})["type"] == "ok"

    # A new configuration at run time: everything A -> B lost.
    reply = topo.control({"cmd": "set", "config": {"a_to_b": {"loss": {"model": "bernoulli", "p": 1.0}}}})
    assert reply["type"] == "ok", reply
    assert probe(topo, 100, 500, port=7013, timeout_extra=3)["received"] == 0

    # A bad configuration is refused with a reason, and the wire keeps running with the old one.
    bad = topo.control({"cmd": "set", "config": {"a_to_b": {"loss": {"model": "bernoulli", "p": 2.0}}}})
    assert bad["type"] == "error" and bad["kind"] == "config" and "p" in bad["message"]
    unknown = topo.control({"cmd": "set", "config": {"a_to_b": {"delay": "10 ms"}}})
    assert unknown["type"] == "error"
    assert topo.control({"cmd": "jump"})["type"] == "error"
    if threads == "2":  # a medium that couples the directions cannot be set on a wire with a thread per direction
        coupled = topo.control({"cmd": "set", "config": {"csma": {}}})
        assert coupled["type"] == "error" and "--threads 1" in coupled["message"], coupled
    assert topo.wire.poll() is None
    stats = topo.stop_wire()
    assert stats["a_to_b"]["drops"]["loss"] >= 100


def test_stats_out_file_matches_final_line(topo, tmp_path):
    out = tmp_path / "stats.json"
    topo.start_wire(WIRE, {}, seed=1, workdir=topo.workdir, extra=["--stats-out", str(out)])
    probe(topo, 50, 500)
    time.sleep(0.2)
    final = topo.stop_wire()
    assert json.loads(out.read_text()) == final
    assert topo.wire.returncode == 0


def test_jitter_without_reorder_keeps_order(topo):
    cfg = both({"delay_ns": 5_000_000, "jitter_ns": 4_000_000, "jitter_dist": "uniform"})
    topo.start_wire(WIRE, cfg, seed=5, workdir=topo.workdir)
    res = probe(topo, 1000, 1000)
    topo.stop_wire()
    assert res["received"] == 1000
    assert res["reordered"] == 0
    # The jitter is really there: one-way latency spreads over milliseconds (uniform +-4 ms around 5 ms,
    # pushed later by the no-reorder rule), never below 1 ms.
    lat = res["latency_us"]
    assert lat["min"] >= 1_000 and lat["p90"] - lat["min"] > 2_000, lat


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed")
def test_rate_10mbit_tcp_goodput_within_5_percent(topo):
    rate, overhead = 10_000_000, 24
    topo.start_wire(WIRE, both({"rate_bps": rate, "overhead_bytes": overhead}), seed=1, workdir=topo.workdir)
    srv = topo.popen(topo.ns_b, ["iperf3", "-s", "-1", "-B", ADDR_B], stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        r = topo.run(topo.ns_a, ["iperf3", "-c", ADDR_B, "-t", "6", "-O", "1", "-J"], timeout=60)
        res = json.loads(r.stdout)
    finally:
        srv.wait(timeout=20)
    stats = topo.stop_wire()
    goodput = res["end"]["sum_received"]["bits_per_second"]
    # MSS 1448 (timestamps on): frame 1514 B + 24 B overhead on the wire per 1448 B of payload.
    expected = rate * 1448 / (1514 + overhead)
    assert abs(goodput - expected) <= 0.05 * expected, f"goodput {goodput / 1e6:.3f} Mbit/s, expected {expected / 1e6:.3f}"
    # The wire kept up: it was the configured rate, not the emulator, that limited the flow.
    assert stats["a_to_b"]["io"]["rx_kernel_drops"] == 0
    assert stats["a_to_b"]["sched_error"]["p99_us"] < 5_000


@THREADS
def test_interface_removed_is_a_runtime_error_exit_1(topo, threads):
    # With two threads the one reading the removed interface fails and stops the other.
    topo.start_wire(WIRE, {}, seed=1, workdir=topo.workdir, control=False, extra=["--threads", threads])
    assert topo.run(topo.ns_l, ["ip", "link", "del", "rnla"]).returncode == 0
    out, err = topo.wire.communicate(timeout=10)
    assert topo.wire.returncode == 1, err
    lines = [json.loads(x) for x in out.splitlines()]
    # The counters up to then, then the error naming the interface.
    assert [x["type"] for x in lines] == ["stats", "error"]
    assert lines[1]["kind"] == "io" and "rnla" in lines[1]["message"]
