"""The Kubernetes backend on roughnet's local cluster (a real Kubernetes; root, `make cluster`).

Runs CI-sized copies of scenarios/k8s-stream.toml and scenarios/k8s-mqtt.toml through the CLI
with ``--backend kubernetes`` and checks what a user relies on: every message arrives, each
record says where it ran (backend, cluster version, each host's node as the scenario pinned
it), the pods are gone afterwards; a link's delay and loss are realised by roughnet's wire inside
the pod that carries it; what the backend cannot do is refused before any pod exists (exit 2); and after a SIGKILL, `roughnet clean` deletes exactly the dead run's pods and
ends its kubectl processes, leaving another pod in the same namespace alone.
The cluster (one per session, shared with tests/integration/test_cluster.py) comes from the
``local_cluster`` fixture (tests/integration/conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest
from cli_run import ROUGHNET, needs

from roughnet.topo.ledger import DEFAULT_LEDGER_DIR, process_alive, read_ledger
from roughnet.topo.system import proc_state

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"
NAMESPACE = "roughnet"

pytestmark = pytest.mark.root


def small(name: str, replace: dict[str, str]) -> str:
    """scenarios/<name>.toml with whole lines replaced (key = value lines, matched by their start)."""
    out = []
    for line in (SCENARIOS / f"{name}.toml").read_text().splitlines():
        key = next((k for k in replace if line.startswith(k)), None)
        out.append(replace.pop(key) if key else line)
    assert not replace, f"lines not found in {name}.toml: {sorted(replace)}"
    return "\n".join(out) + "\n"


def kube_argv(cluster, path: Path, results: Path) -> list[str]:
    return [*ROUGHNET, "run", str(path), "--backend", "kubernetes", "--cluster", cluster.name, "--no-report",
            "--results", str(results)]


def kube_run(cluster, path: Path, results: Path, timeout: float = 600):
    argv = kube_argv(cluster, path, results)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def kubectl(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*cluster.kubectl_argv(), "--namespace", NAMESPACE, *args], capture_output=True, text=True,
                          timeout=60)


def running(pid: int, start_time: int | None) -> bool:
    """``pid`` is the recorded process and has not ended (a zombie has)."""
    from roughnet.topo.system import proc_state

    st = proc_state(pid)
    return st is not None and st[1] == start_time and st[0] not in ("Z", "X")


def our_pods(cluster) -> list[str]:
    res = kubectl(cluster, "get", "pods", "-l", "app.kubernetes.io/managed-by=roughnet", "-o", "name")
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def runs(results: Path) -> list[dict]:
    con = duckdb.connect(str(results / "results.duckdb"), read_only=True)
    try:
        cur = con.execute("select * from runs order by run_index")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]
    finally:
        con.close()


@needs("tcp", "udp", "zenoh")
def test_stream_across_pods_on_two_nodes(local_cluster, tmp_path):
    path = tmp_path / "k8s-stream.toml"
    path.write_text(small("k8s-stream", {"messages =": "messages = 300", "payload = [": 'payload = ["256 B"]'}))
    out = kube_run(local_cluster, path, tmp_path / "res")
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    rows = runs(tmp_path / "res")
    assert [r["protocol"] for r in rows] == ["tcp", "udp", "zenoh"]
    for r in rows:
        assert r["status"] == "ok", r["failure_reason"]
        assert r["backend"] == "kubernetes" and r["engine"] == "cluster"
        info = json.loads(r["backend_info"])
        assert info["cluster_version"] == local_cluster.version
        assert info["local_cluster"] == local_cluster.name
        where = {h: v["node"] for h, v in info["hosts"].items()}
        assert where == {"pub": "node1", "sub1": "node1", "sub2": "node2"}
        ips = {v["ip"] for v in info["hosts"].values()}
        assert len(ips) == 3
        assert {n: i["kernel"] for n, i in info["nodes"].items()}.keys() >= {"node1", "node2"}
        # two receivers, 300 messages each; a clean cluster network loses nothing over TCP and Zenoh
        if r["protocol"] != "udp":
            assert r["received"] == 600 and r["lost"] == 0, r
        else:
            assert r["received"] >= 590, r
        assert r["lat_p50_us"] > 0 and r["tcp_out_segs"] is not None
    assert our_pods(local_cluster) == []


@needs("mqtt")
def test_mqtt_through_a_broker_in_a_pod(local_cluster, tmp_path):
    path = tmp_path / "k8s-mqtt.toml"
    path.write_text(small("k8s-mqtt", {"messages =": "messages = 300", "qos = [": "qos = [1]"}))
    out = kube_run(local_cluster, path, tmp_path / "res")
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    (r,) = runs(tmp_path / "res")
    assert r["status"] == "ok", r["failure_reason"]
    assert r["received"] == 300 and r["lost"] == 0
    info = json.loads(r["backend_info"])
    assert {h: v["node"] for h, v in info["hosts"].items()} == {"pub": "node1", "brk": "node2", "sub": "node2"}
    extra = json.loads(r["metrics_extra"] or "{}")
    # the broker's own CPU time, read from /proc inside its pod
    assert extra.get("service_mosquitto@brk_cpu_s", 0) > 0
    assert our_pods(local_cluster) == []


WIRED = """
[scenario]
name = "k8s-wire"
seed = 4
timeout = "60 s"
[[host]]
name = "a"
node = "node1"
[[host]]
name = "b"
node = "node2"
[[link]]
between = ["a", "b"]
delay = "10 ms"
[link.forward]
loss = "${loss}"
[workload]
pattern = "ping"
protocol = "udp"
from = "a"
to = ["b"]
messages = 150
interval = "40 ms"
payload = "100 B"
[sweep]
loss = ["0%", "20%"]
"""


@needs("udp")
def test_a_link_impaired_by_the_wire_inside_the_pod(local_cluster, tmp_path):
    path = tmp_path / "wired.toml"
    path.write_text(WIRED)
    out = kube_run(local_cluster, path, tmp_path / "res")
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    clean, lossy = runs(tmp_path / "res")
    for r in (clean, lossy):
        assert r["status"] == "ok" and r["engine"] == "pod-wire", r["failure_reason"]
        # 10 ms each way, realised by roughnet-wire in pod a across the node link: the round trip is 20 ms
        # plus the path's own tens of microseconds and the wire's scheduling error
        assert 20_000 <= r["lat_p50_us"] <= 22_000, r["lat_p50_us"]
    counters = json.loads(clean["link_counters"])["0"]
    assert counters["engine"] == "pod-wire" and counters["carrier"] == "a"
    assert counters["forward"]["configured_delay_ns"] == 10_000_000
    assert counters["forward"]["tx_packets"] >= 150 and counters["reverse"]["tx_packets"] >= 150
    assert clean["lost"] == 0 and clean["link_drops"] == 0
    # 20 % of the pings dropped on their way out of a (forward): the wire counted what the pinger lost
    lossy_counters = json.loads(lossy["link_counters"])["0"]
    assert lossy_counters["reverse"]["drops_loss"] == 0
    assert lossy["link_drops"] == lossy_counters["forward"]["drops_loss"]
    # every lost ping was a frame the wire dropped (it also drops warm-up pings and ARP, not counted as lost)
    assert lossy["lost"] <= lossy["link_drops"] <= lossy["lost"] + 10
    assert 12 <= lossy["lost"] <= 50, lossy["lost"]  # 30 expected; binomial(150, 0.2) is within 12..50
    assert our_pods(local_cluster) == []


def test_what_the_backend_cannot_do_is_refused_before_any_pod_exists(local_cluster, tmp_path):
    text = small("k8s-stream", {"between =": 'between = ["pub", "sub1", "sub2"]\ncapture = true'})
    path = tmp_path / "captured.toml"
    path.write_text(text)
    out = kube_run(local_cluster, path, tmp_path / "res", timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "capture = true" in out.stderr
    assert not (tmp_path / "res").exists()
    assert our_pods(local_cluster) == []


def test_unknown_node_is_refused_naming_the_nodes(local_cluster, tmp_path):
    path = tmp_path / "far.toml"
    path.write_text(small("k8s-stream", {'node = "node2"': 'node = "node9"'}))
    out = kube_run(local_cluster, path, tmp_path / "res", timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "node 'node9'" in out.stderr and "node1" in out.stderr


@needs("tcp")
def test_sigkill_then_clean_removes_the_runs_pods_and_nothing_else(local_cluster, tmp_path):
    sentinel = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "rn-test-sentinel", "labels": {"app": "sentinel"}},
                "spec": {"containers": [{"name": "c", "image": local_cluster.images[-1], "imagePullPolicy": "Never",
                                         "command": ["/bin/sh", "-c", "sleep 3600"]}],
                         "terminationGracePeriodSeconds": 1}}
    made = subprocess.run([*local_cluster.kubectl_argv(), "--namespace", NAMESPACE, "create", "-f", "-"],
                          input=json.dumps(sentinel), capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    try:
        path = tmp_path / "long.toml"
        path.write_text(small("k8s-stream", {"messages =": "messages = 100000", "timeout =": 'timeout = "600 s"',
                                             "protocol = [": 'protocol = ["tcp"]', "payload = [": 'payload = ["256 B"]'}))
        before = set(os.listdir(DEFAULT_LEDGER_DIR)) if DEFAULT_LEDGER_DIR.is_dir() else set()
        proc = subprocess.Popen(kube_argv(local_cluster, path, tmp_path / "res"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        ledger = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until the sender runs: pods up, kubectl exec processes started
            new = sorted(set(os.listdir(DEFAULT_LEDGER_DIR)) - before) if DEFAULT_LEDGER_DIR.is_dir() else []
            if new:
                entries = read_ledger(DEFAULT_LEDGER_DIR / new[0])
                if sum(e.get("kind") == "process" for e in entries) >= 3:
                    ledger = DEFAULT_LEDGER_DIR / new[0]
                    break
            assert proc.poll() is None, "roughnet run ended before it was killed"
            time.sleep(0.5)
        assert ledger is not None, "the run never started its agents"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        entries = read_ledger(ledger)
        kubectls = [(e["pid"], e["start_time"]) for e in entries if e.get("kind") == "process"]
        assert any(process_alive(p, st) for p, st in kubectls), "expected kubectl exec processes left by the kill"
        assert len(our_pods(local_cluster)) == 3  # the dead run's pods are still there

        out = subprocess.run([*ROUGHNET, "clean"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert our_pods(local_cluster) == []
        # ended: gone, or a zombie its new parent has not collected yet (this machine's PID 1 reaps orphans late;
        # `clean` waits for the end, not for the reaping, which is not its to do)
        assert not any(running(p, st) for p, st in kubectls), [(p, proc_state(p)) for p, st in kubectls]
        assert not ledger.exists()
        alive = kubectl(local_cluster, "get", "pod", "rn-test-sentinel", "-o", "jsonpath={.status.phase}")
        assert alive.stdout == "Running"
    finally:
        kubectl(local_cluster, "delete", "pod", "rn-test-sentinel", "--wait=true", "--timeout=60s")


ROLE = REPO / "manifests" / "kubernetes" / "role.yaml"


@needs("tcp")
def test_the_shipped_role_is_all_a_user_needs(local_cluster, tmp_path):
    """A user with no rights is refused in preflight, naming the permissions; with role.yaml granted, it runs."""
    from roughnet.cluster.pki import CertSpec, issue, kubeconfig_dict

    pki = tmp_path / "pki"
    pki.mkdir()
    for name in ("ca.crt", "ca.key"):
        (pki / name).write_bytes((Path(local_cluster.data_dir) / "pki" / name).read_bytes())
    crt, key = issue(pki, CertSpec("roughnet-user", "roughnet"))
    kc = tmp_path / "user.kubeconfig"
    kc.write_text(json.dumps(kubeconfig_dict(local_cluster.apiserver, pki / "ca.crt", crt, key, "roughnet")))
    path = tmp_path / "k8s-stream.toml"
    path.write_text(small("k8s-stream", {"messages =": "messages = 100", "protocol = [": 'protocol = ["tcp"]',
                                         "payload = [": 'payload = ["256 B"]'}))
    argv = [*kube_argv(local_cluster, path, tmp_path / "res"), "--kubeconfig", str(kc)]

    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "may not create pods" in out.stderr and "role.yaml" in out.stderr
    assert not (tmp_path / "res").exists()

    applied = subprocess.run([*local_cluster.kubectl_argv(), "apply", "-f", str(ROLE)], capture_output=True,
                             text=True, timeout=60)
    objs = [d for d in ROLE.read_text().split("\n---\n") if "kind: Namespace" not in d]  # removed afterwards
    assert applied.returncode == 0, applied.stderr
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        (r,) = runs(tmp_path / "res")
        assert r["status"] == "ok" and r["received"] == 200, r["failure_reason"]
    finally:
        subprocess.run([*local_cluster.kubectl_argv(), "delete", "-f", "-", "--ignore-not-found"],
                       input="\n---\n".join(objs), capture_output=True, text=True, timeout=60)


@needs("dds")
def test_dds_k8s_small_throughput_and_latency_across_nodes(local_cluster, tmp_path):
    """scenarios/dds-k8s.toml at CI size: rows 1-3 of the schedule (unicast, one subscriber), 1 s tests,
    the subscribers' nodes folded onto node2 (the session's cluster has two)."""
    text = (SCENARIOS / "dds-k8s.toml").read_text()
    for n in ("node3", "node4", "node5"):
        text = text.replace(f'node = "{n}"', 'node = "node2"')
    text = text.replace('duration = "10 s"', 'duration = "1 s"').replace('warmup = 100', 'warmup = 20')
    path = tmp_path / "dds-k8s.toml"
    path.write_text(text)
    (tmp_path / "dds-schedule.csv").write_text((SCENARIOS / "dds-schedule.csv").read_text())
    argv = [*kube_argv(local_cluster, path, tmp_path / "res"), "--from", "1", "--to", "3"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    rows = runs(tmp_path / "res")
    assert len(rows) == 6
    for r in rows:
        assert r["status"] == "ok", r["failure_reason"]
        info = json.loads(r["backend_info"])
        assert info["hosts"]["pub"]["node"] == "node1" and info["hosts"]["sub1"]["node"] == "node2"
        assert r["received"] > 0
    # rows 2 and 3 of dds-schedule.csv are reliable: nothing lost, in either test; row 1 is best effort
    reliable = [r for r in rows if json.loads(r["params"])["schedule"] in ("row 2", "row 3")]
    assert len(reliable) == 4 and all(r["lost"] == 0 for r in reliable)
