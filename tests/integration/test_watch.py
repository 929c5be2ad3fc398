"""`roughnet watch` beside a running sweep (issue 29; root, namespaces, the built agent).

A sweep of four 2-second TCP streams runs while `roughnet watch` follows it from another process, as a user
does from a second terminal or over SSH: watch prints each run as it is stored, in order, while the sweep is
still running, and the run in progress, and ends by itself once the sweep is complete; a `--once` look in the
middle of a run shows the run and its flows' messages so far. The sweep is not disturbed: it ends with exit 0
and every run ok.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli_run import RUNS, fetch, run_argv

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)")

ROUGHNET = [sys.executable, "-m", "roughnet.cli"]

SWEEP = """
[scenario]
name = "watched"
seed = 4
timeout = "60 s"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
delay = "2 ms"
[workload]
pattern = "stream"
protocol = "tcp"
from = "a"
to = "b"
payload = "${payload}"
messages = 400
rate = "200 msg/s"
[sweep]
payload = ["100 B", "200 B", "300 B", "400 B"]
"""


def _lines_of(proc: subprocess.Popen, sink: list[tuple[float, str]]) -> threading.Thread:
    """A thread that stores each line of ``proc``'s stdout with the time it arrived."""

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.append((time.monotonic(), line.rstrip("\n")))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def test_watch_follows_a_running_sweep_and_ends_with_it(tmp_path: Path) -> None:
    path = tmp_path / "watched.toml"
    path.write_text(SWEEP)
    res = tmp_path / "res"
    run = subprocess.Popen(run_argv(path, res), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # started together with the run (--wait: the folder may not exist yet): it waits for the sweep to be stored
    watch = subprocess.Popen([*ROUGHNET, "watch", "--results", str(res), "--interval", "0.3", "--wait", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []
    reader = _lines_of(watch, lines)
    once = None
    deadline = time.monotonic() + 120
    while run.poll() is None and time.monotonic() < deadline:
        # a look in the middle of a run (the second or later: runs last about 2 s, a look takes under 1 s)
        if once is None and sum(1 for _, line in lines if line.startswith("stored ")) >= 1:
            once = subprocess.run([*ROUGHNET, "watch", "--results", str(res), "--once"], capture_output=True,
                                  text=True, timeout=60)
        time.sleep(0.1)
    run_out, run_err = run.communicate(timeout=60)
    ended = time.monotonic()
    assert run.returncode == 0, f"{run_out[-3000:]}\n{run_err[-3000:]}"
    watch_err = watch.communicate(timeout=60)[1]
    reader.join(timeout=10)
    text = "\n".join(line for _, line in lines)
    assert watch.returncode == 0, f"{text}\n{watch_err}"
    # the sweep was not disturbed
    rows = fetch(res, RUNS)
    assert [r["status"] for r in rows] == ["ok"] * 4, [(r["status"], r["failure_reason"]) for r in rows]
    # every run printed once, in order, with its verdict and figures, as the summary prints them
    stored = [line for _, line in lines if line.startswith("stored ")]
    assert [line.split(":")[0] for line in stored] == [f"stored {k}/4" for k in range(1, 5)], text
    for line, r in zip(stored, rows):
        assert f"#{r['run_index']} {r['run_id']}" in line and "status=ok" in line and "latency p50=" in line, line
    # live: at least the first runs were printed while the sweep was still running (not read afterwards)
    early = [t for t, line in lines if line.startswith("stored ")][0]
    assert early < ended, text
    assert re.search(r"^running #\d \(\w{12}\): payload=\d00 B", text, re.M), text
    assert "sweep watched-" in text.splitlines()[-1] and "complete" in text.splitlines()[-1], text
    # the look in the middle: the header, the stored runs, the run in progress with its two agents
    assert once is not None and once.returncode == 0, once
    assert re.search(r"watched \(watched-\w+\): [1-3] of 4 runs stored", once.stdout), once.stdout
    assert "written by PID " in once.stdout, once.stdout
    if "running #" in once.stdout:  # (the look can fall between two runs: stored, the next not begun)
        assert re.search(r"a-sender\s+\d+ msgs", once.stdout) and re.search(r"b-receiver\s+\d+ msgs", once.stdout), \
            once.stdout


def test_watch_of_a_folder_nobody_writes_prints_the_sweep_and_ends(tmp_path: Path) -> None:
    path = tmp_path / "watched.toml"
    path.write_text(SWEEP.replace('payload = ["100 B", "200 B", "300 B", "400 B"]', 'payload = ["100 B"]'))
    res = tmp_path / "res"
    subprocess.run(run_argv(path, res), capture_output=True, text=True, timeout=120, check=True)
    out = subprocess.run([*ROUGHNET, "watch", "watched", "--results", str(res)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out
    lines = out.stdout.splitlines()
    assert lines[0].startswith("watched (watched-") and "1 of 1 runs stored" in lines[0], out.stdout
    assert lines[1].startswith("stored 1/1: #0 ") and lines[-1].startswith("sweep watched-"), out.stdout
    assert "no roughnet run writes it" in lines[0]


def test_watch_in_a_terminal_redraws_one_screen_and_ends_with_the_sweep(tmp_path: Path) -> None:
    """In a terminal (a pseudo-terminal here, as over SSH): the screen with the bar, the runs' table and the
    run in progress with its flows, redrawn in place; the last line says the sweep is complete."""
    import pty

    path = tmp_path / "watched.toml"
    path.write_text(SWEEP.replace('["100 B", "200 B", "300 B", "400 B"]', '["100 B", "200 B"]'))
    res = tmp_path / "res"
    run = subprocess.Popen(run_argv(path, res), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    leader, follower = pty.openpty()
    watch = subprocess.Popen([*ROUGHNET, "watch", "--results", str(res), "--interval", "0.3", "--wait", "60"],
                             stdin=follower, stdout=follower, stderr=follower, env={**os.environ, "COLUMNS": "160",
                                                                                     "LINES": "50"})
    os.close(follower)
    screen = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other side closed (watch ended)
            break
        if not chunk:
            break
        screen += chunk
    os.close(leader)
    assert watch.wait(timeout=60) == 0, screen.decode(errors="replace")[-3000:]
    run_out, run_err = run.communicate(timeout=60)
    assert run.returncode == 0, f"{run_out[-3000:]}\n{run_err[-3000:]}"
    text = screen.decode(errors="replace")
    assert "\x1b[" in text  # redrawn in place with the terminal's control sequences, not appended lines
    assert "█" in text and "2 of 2 runs stored" in text, text[-3000:]
    assert re.search(r"running #\d \(\w{12}\): payload=\d00 B", text), text[-3000:]
    assert re.search(r"b-receiver\s+\d+ msgs", text), text[-3000:]
    assert "complete" in text.rstrip().splitlines()[-1], text[-3000:]
