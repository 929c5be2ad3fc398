"""run.agents.run_agents with stand-in agents (a Python script in the agent's place, no namespaces)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from roughnet.run.agents import AgentSpec, run_agents

#: A stand-in agent: the receiver says ready, then reports at SIGTERM ("signal") or after the
#: run's timeout ("timeout"); the sender fails at once, as one that lost its broker does.
FAKE_AGENT = r"""
import json, signal, sys, time
cfg = json.load(open(sys.argv[sys.argv.index("--config") + 1]))
def result(reason):
    print(json.dumps({"v": 1, "type": "result", "role": cfg["role"], "end_reason": reason}), flush=True)
    sys.exit(0)
if cfg["role"] == "sender":
    print(json.dumps({"v": 1, "type": "error", "kind": "protocol", "message": "Flush timeout"}), flush=True)
    sys.exit(1)
signal.signal(signal.SIGTERM, lambda *_: result("signal"))
print(json.dumps({"v": 1, "type": "ready"}), flush=True)
time.sleep(cfg["timeout_ms"] / 1000)
result("timeout")
"""


class LocalTopo:
    """Runs every host's process here, outside any namespace."""

    def popen(self, host, argv, **kw):
        return subprocess.Popen(argv, **kw)


def test_a_failed_sender_does_not_leave_its_receivers_waiting_for_the_timeout(tmp_path, make_run):
    agent = tmp_path / "fake-agent"
    agent.write_text(f"#!{sys.executable}\n" + FAKE_AGENT)
    agent.chmod(0o755)
    run = make_run(["a", "b"], [("a", "b")], protocol="tcp", timeout_ns=20_000_000_000)
    specs = [AgentSpec("b", "receiver", {"role": "receiver", "timeout_ms": 20_000}),
             AgentSpec("a", "sender", {"role": "sender", "timeout_ms": 20_000})]
    rx, tx = run_agents(LocalTopo(), agent, run, tmp_path, specs)
    assert tx.result is None and tx.error["message"] == "Flush timeout"
    # asked for its result after the grace, not left to wait out the run's 20 s timeout
    assert rx.result == {"v": 1, "type": "result", "role": "receiver", "end_reason": "signal"}
    assert json.loads(Path(rx.out_path).read_text().splitlines()[-1])["end_reason"] == "signal"


def test_json_lines_from_a_pipe_in_chunks_equal_line_by_line(tmp_path) -> None:
    """An agent's output read a chunk at a time (os.read) gives the objects, unreadable lines and output file
    that reading it line by line gives: split lines, a partial last line, blank lines, non-ASCII text."""
    import subprocess
    import sys

    from roughnet.run.agents import _json_lines_text, json_lines

    script = ("import sys\n"
              "for i in range(3000):\n"
              "    sys.stdout.write('{\"type\": \"interval\", \"flow\": %d, \"s\": \"\\u00e9\"}\\n' % i)\n"
              "    if i % 7 == 0: sys.stdout.flush()\n"
              "sys.stdout.write('not json\\n\\n   \\nnull\\n{\"last\": 1}')\n")  # fmt: skip
    out = {}
    for name, reader in (("chunks", json_lines), ("lines", _json_lines_text)):
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, bufsize=1)
        bad: list[str] = []
        objs = list(reader(p.stdout, tmp_path / f"{name}.jsonl", bad))
        p.wait()
        out[name] = (objs, bad, (tmp_path / f"{name}.jsonl").read_bytes())
    assert out["chunks"] == out["lines"]
    objs, bad, _ = out["chunks"]
    assert len(objs) == 3002 and objs[-2] is None and objs[-1] == {"last": 1} and bad == ["not json"]
