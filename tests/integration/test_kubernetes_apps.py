"""The user's own programs on the kubernetes backend (docs/applications.md, "On Kubernetes"), on roughnet's local
cluster: scenarios/k8s-app.toml as its header says (two OCI images built with `roughnet image pack`, imported into
the nodes, run as containers of their own in the hosts' pods, and a busybox script in roughnet's image), plus
commands that check the user, the stop signal, an event's restart and the names of the hosts, and an image
named by reference (`image_ref`: roughnet's own, which the nodes have), in one run.

What it proves: every program reached its expected end; the images' traffic crossed roughnet's wire in the client's
pod (the wire forwarded at least every byte iperf3 says it sent, and the probe's round trips are not shorter
than the link's 2 x 10 ms); the working folder came back (iperf3's JSON file); a command runs as nobody unless told;
a process stopped at its stop time by SIGINT is judged as stopped by it (kubectl's exit 130 read as the signal),
and an [[event]] restarts it in its pod;
the pods are gone afterwards.  The cluster is the session's (``local_cluster``, tests/integration/conftest.py).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest
from cli_run import ROUGHNET

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "k8s-app.toml"

EXTRA = """
[[process]]
name = "whoami"
host = "server"
command = ["id", "-u"]
expect = { exit = 0 }

[[process]]
name = "sleeper"
host = "server"
command = ["sleep", "600"]
stop = "2 s"
stop_signal = "SIGINT"

[[event]]
at = "0.5 s"
process = "sleeper"
action = "restart"           # SIGINT (its stop_signal), then started again in the pod

[[process]]
name = "pulled"              # an image the cluster has (roughnet's own): by reference, no archive here
host = "server"
image_ref = "IMAGE"
entrypoint = ["/bin/busybox", "sh", "-c"]
args = ["echo $ROUGHNET_PROCESS in $(pwd) as $(id -u)"]
workdir = "/tmp"

[[process]]
name = "names"
host = "client"
command = ["nc", "-w", "5", "server", "9"]   # resolves "server" (/etc/hosts); nothing listens there: exit 1
expect = { exit = 1 }
"""


def _proc(record: dict, name: str) -> dict:
    return next(p for p in record["processes"] if p["name"] == name)


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    """scenarios/k8s-app.toml with its files and both images built by the CLI as its header says (each with an
    Env variable of its own, so their config digests are new and the run really imports them)."""
    cmds = [shlex.split(m.group(1)) for m in re.finditer(r"^#\s+roughnet (image pack .*)$", SCENARIO.read_text(),
                                                          re.M)]
    assert len(cmds) == 2, cmds
    (tmp_path / "images").mkdir()
    token = uuid.uuid4().hex
    for argv in cmds:
        out = tmp_path / "images" / Path(argv[2]).name
        res = subprocess.run([*ROUGHNET, *argv[:2], str(out), *argv[3:], "--env", f"ROUGHNET_TEST={token}"],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
    (tmp_path / "k8s-app").mkdir()
    probe = ROOT / "scenarios" / "k8s-app" / "probe.sh"
    (tmp_path / "k8s-app" / "probe.sh").write_bytes(probe.read_bytes())
    (tmp_path / "k8s-app" / "probe.sh").chmod(0o755)
    path = tmp_path / "k8s-app.toml"
    from roughnet.backends.kubernetes import DEFAULT_IMAGE

    path.write_text(SCENARIO.read_text() + EXTRA.replace('"IMAGE"', f'"{DEFAULT_IMAGE}"'))
    return path


def test_images_and_commands_run_in_the_pods_behind_the_wire(local_cluster, scenario: Path, tmp_path: Path):
    results = tmp_path / "results"
    res = subprocess.run([*ROUGHNET, "run", str(scenario), "--backend", "kubernetes", "--cluster",
                          local_cluster.name, "--no-report", "--results", str(results)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (record_path,) = list(results.glob("runs/*/*/record.json"))
    record = json.loads(record_path.read_text())
    assert record["status"] == "ok", record.get("failure_reason")
    assert record["backend"] == "kubernetes"
    for p in record["processes"]:
        assert p["ok"], (p["name"], p["reason"])
    art = record_path.parent
    # the client's image wrote iperf3.json in /work: it came back with the working folder
    report = json.loads((art / "process-client" / "iperf3.json").read_text())
    sent = report["end"]["sum_sent"]["bytes"]
    assert sent > 1_000_000, report["end"]
    # ... and crossed the wire in the client's pod (its forward direction is the client's egress): every byte
    # iperf3 sent, plus headers, was forwarded by the wire (a bypass would leave it short)
    wire = record["link_counters"]["0"]
    assert wire["engine"] == "pod-wire" and wire["carrier"] == "client"
    assert wire["forward"]["tx_bytes"] >= sent
    server_ip = record["backend_info"]["hosts"]["server"]["ip"]
    assert report["start"]["connected"][0]["remote_host"] == server_ip  # "server" named the server's pod
    # round trips behind the wire: never shorter than the link's delay both ways (20 ms); 20 pings
    probe = _proc(record, "probe")
    assert probe["app_count"] >= 15, probe  # 1 % loss each way: 15 or more of 20 replies fail with p < 1e-9
    assert probe["lat_p50_us"] >= 20_000, probe
    assert (art / "process-probe.stdout").read_text().count('"rtt_ms"') == probe["app_count"]
    # busybox nc found the server's address by its name and was refused there (not "bad address")
    assert "Connection refused" in (art / "process-names.stderr").read_text()
    # an image by reference: its container ran the given entrypoint and args, in workdir, as nobody
    assert (art / "process-pulled.stdout").read_text().strip() == "pulled in /tmp as 65534"
    assert _proc(record, "pulled")["kind"] == "image"
    # a command runs as nobody unless the scenario says otherwise
    assert (art / "process-whoami.stdout").read_text().strip() == "65534"
    assert _proc(record, "whoami")["run_as"].startswith("nobody (65534:")
    # stopped at its stop time by SIGINT: busybox sleep dies by it, kubectl says exit 130, the record the signal
    sleeper = _proc(record, "sleeper")
    assert sleeper["final"] == {"signal": "SIGINT"} and sleeper["stop_sent"] == "SIGINT" and not sleeper["killed"]
    # ... after an event restarted it at 0.5 s (ended by SIGINT too, then started again)
    assert sleeper["restarts"] == 1 and sleeper["earlier_exits"] == [{"signal": "SIGINT", "stop_sent": "SIGINT"}]
    (event,) = record["events"]
    assert event["kind"] == "process" and event["action"] == "restart" and not event.get("error"), event
    # no socket figures here, and the record says why
    assert _proc(record, "client")["tcp_connections"] is None
    assert "not sampled on the kubernetes backend" in _proc(record, "client")["tcp_note"]
    # the client's CPU was read from the pod's /proc
    assert _proc(record, "server")["rss_max_bytes"] > 0
    # the pods are gone
    pods = subprocess.run([*local_cluster.kubectl_argv(), "--namespace", "roughnet", "get", "pods", "-l",
                           f"roughnet.io/run={record['run_id'][:8]}", "-o", "name"], capture_output=True, text=True,
                          timeout=60)
    assert pods.returncode == 0 and pods.stdout.strip() == "", pods.stdout + pods.stderr
