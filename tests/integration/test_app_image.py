"""scenarios/app-image.toml (docs/applications.md, example 3): the user's own OCI images, built with
`roughnet image pack` exactly as the scenario's header comment says, run by runc in two hosts' namespaces over
a lossy delayed link; and `roughnet image pack`'s refusal of bad input (exit 2, nothing written)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from cli_run import ROUGHNET, roughnet_run

from roughnet.apps import oci

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "app-image.toml"


def pack_commands() -> list[list[str]]:
    """The `roughnet image pack` argvs of the scenario's header comment (split as a shell would; not run by one)."""
    cmds = [shlex.split(m.group(1)) for m in re.finditer(r"^#\s+roughnet (image pack .*)$", SCENARIO.read_text(), re.M)]
    assert len(cmds) == 2, cmds
    return cmds


def pack(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ROUGHNET, "image", "pack", *args], capture_output=True, text=True, timeout=120)


def _proc(record: dict, name: str) -> dict:
    return next(p for p in record["processes"] if p["name"] == name)


@pytest.fixture
def images(tmp_path: Path):
    """Both images built by the CLI into tmp_path/images, each with an Env variable of its own (so its config
    digest is new and its first unpack really unpacks); their unpacked copies are removed from the cache after."""
    if shutil.which("runc") is None:
        pytest.fail("runc missing: `make test` installs it (scripts/install-cluster-deps.sh)")
    (tmp_path / "images").mkdir()
    keys = []
    token = uuid.uuid4().hex
    try:
        for argv in pack_commands():
            assert argv[:2] == ["image", "pack"] and argv[2].startswith("scenarios/images/"), argv
            out = tmp_path / "images" / Path(argv[2]).name
            res = pack(str(out), *argv[3:], "--env", f"ROUGHNET_TEST={token}")
            assert res.returncode == 0, res.stdout + res.stderr
            assert str(out) in res.stdout and "digest sha256:" in res.stdout
            keys.append(oci.load_image(out).key)
        yield tmp_path / "images"
    finally:
        for key in keys:  # these digests are this test's alone (its token): nothing else unpacked them
            shutil.rmtree(oci.CACHE_ROOT / key, ignore_errors=True)
            (oci.CACHE_ROOT / f".lock-{key}").unlink(missing_ok=True)


def test_iperf3_images_on_two_hosts_over_a_lossy_link(tmp_path: Path, images: Path) -> None:
    """Over 20 Mbit/s, 10 ms each way and 1 % random loss each way, for 5 s:

    - the client retransmits: its data connection sends at least 2000 segments (about 8000 at this rate), so
      with 1 % independent loss P(no segment lost) <= 0.99^2000 ~ 2e-9. iperf3's own count is read before the
      connection's last retransmissions (docs/applications.md): roughnet's is never lower and at most a window
      (~35 segments at 20 ms x 20 Mbit/s) later, so at 1 % more than 8 extra has odds below 1e-8.
    - no round trip beats the link's 20 ms.
    - `netview`, a shell from the server's image on the server's host, sees only that namespace: lo and the
      link's interface (rn0-client: link 0, towards client), none of this machine's own interfaces.
    - the server's image is unpacked once: by the server (a new digest, see the fixture), then reused by
      netview (started after it).
    """
    scenario = tmp_path / "app-image.toml"
    shutil.copy(SCENARIO, scenario)
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=180)
    (run_dir,) = list(results.glob("runs/*/*/"))
    rec = json.loads((run_dir / "record.json").read_text())
    assert rec["status"] == "ok", rec["failure_reason"]
    server, netview, client = (_proc(rec, n) for n in ("server", "netview", "client"))
    for p in (server, netview, client):
        assert p["kind"] == "image" and p["ok"] and p["final"] == {"exit": 0}, (p["name"], p["reason"])

    data = max(client["connections"], key=lambda c: c["bytes_acked"])  # the data stream (the other: control)
    assert data["dport"] == 5201 and data["segs_out"] >= 2000, data
    assert client["tcp_retrans"] > 0 and data["total_retrans"] > 0
    own = json.loads((run_dir / "process-client" / "iperf3.json").read_text())["end"]["sum_sent"]["retransmits"]
    assert 0 <= data["total_retrans"] - own <= 8, (data["total_retrans"], own)
    assert data["min_rtt_us"] >= 20_000, data["min_rtt_us"]
    assert rec["metrics"]["link_drops_loss"] > 0

    out = (run_dir / "process-netview.stdout").read_text()
    ip_link, _, net_dev = out.partition("Inter-|")  # `ip -o link`, then /proc/net/dev
    links = {m.group(1) for m in re.finditer(r"^\d+: ([^:@\s]+)[@:]", ip_link, re.M)}
    dev = {m.group(1) for m in re.finditer(r"^\s*([^\s:|]+):", net_dev, re.M)}
    assert links == dev == {"lo", "rn0-client"}, out
    assert not links & (set(os.listdir("/sys/class/net")) - {"lo"}), out  # none of the machine's own

    assert server["image_info"]["digest"] == netview["image_info"]["digest"] != client["image_info"]["digest"]
    assert server["image_info"]["unpacked_now"] is True and netview["image_info"]["unpacked_now"] is False
    assert client["image_info"]["unpacked_now"] is True
    assert client["image_info"]["working_dir"] == "/work"


@pytest.mark.parametrize("case", ["missing binary", "binary not executable", "OUT's folder missing"])
def test_image_pack_refuses_bad_input_and_writes_nothing(tmp_path: Path, case: str) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "data.txt").write_text("not a program\n")
    out, binary, named = work / "x.oci.tar", "/usr/bin/iperf3", "--binary"
    if case == "missing binary":
        binary = str(work / "no-such-program")
    elif case == "binary not executable":
        binary = str(work / "data.txt")
    else:
        out, named = work / "no-such-folder" / "x.oci.tar", "OUT"
    res = pack(str(out), "--binary", binary, "--entrypoint", binary)
    assert res.returncode == 2, res.stdout + res.stderr
    assert named in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert sorted(p.name for p in work.iterdir()) == ["data.txt"]
