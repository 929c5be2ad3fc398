"""`[workload] reply_timeout` (issue 26): the ping and ramp pinger's wait for replies, fixed at the agent's
1 s before. Strictly checked like the other workload keys (units, whole milliseconds, at most the run's
timeout, ping and ramp only), swept like them, and passed to the agent as `reply_timeout_ms`; unset, the
agent's config and the run id stay what they were."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from roughnet.cli import app
from roughnet.run.agents import agent_specs

from conftest import toml_hosts
from specutil import plan_error, plan_text


def ping(extra: str = "", pattern: str = "ping", timeout: str = "30 s") -> str:
    keys = 'step = "1 KiB"\ninterval = "10 ms"\n' if pattern == "ramp" else ""
    return (f'[scenario]\nname = "rt"\ntimeout = "{timeout}"\n' + toml_hosts("a", "b")
            + '[[link]]\nbetween = ["a", "b"]\n'
            + f'[workload]\npattern = "{pattern}"\nprotocol = "udp"\nfrom = "a"\nto = "b"\npayload = "100 B"\n'
            f"messages = 10\n{keys}{extra}\n")  # fmt: skip


def addr(host: str, seen_from: str) -> str:
    return {"a": "198.18.0.1", "b": "198.18.0.2"}[host]


@pytest.mark.parametrize("pattern", ["ping", "ramp"])
@pytest.mark.parametrize(("value", "ns"), [("2.5 s", 2_500_000_000), ("250 ms", 250_000_000), ("1 ms", 1_000_000),
                                           ("30 s", 30_000_000_000)])  # fmt: skip
def test_the_key_reaches_the_pinger_in_milliseconds(pattern: str, value: str, ns: int) -> None:
    run = plan_text(ping(f'reply_timeout = "{value}"', pattern)).runs[0]
    assert run.workload.reply_timeout_ns == ns
    ponger, pinger = agent_specs(run, addr)
    assert pinger.role == "pinger" and pinger.config["reply_timeout_ms"] == ns // 1_000_000
    assert ponger.config["reply_timeout_ms"] == ns // 1_000_000  # the same config for both roles; the ponger ignores it


def test_unset_it_is_the_agents_default_and_the_run_id_is_unchanged() -> None:
    run = plan_text(ping()).runs[0]
    assert run.workload.reply_timeout_ns is None
    assert all("reply_timeout_ms" not in s.config for s in agent_specs(run, addr))
    # run ids of existing scenarios do not move (plan._WORKLOAD_FIELDS_ADDED); a set value makes a new one
    assert run.run_id != plan_text(ping('reply_timeout = "2 s"')).runs[0].run_id
    assert plan_text(ping()).sweep_id != plan_text(ping('reply_timeout = "2 s"')).sweep_id


def test_it_is_swept() -> None:
    sweep = plan_text(ping('reply_timeout = "${rt}"') + '[sweep]\nrt = ["500 ms", "3 s"]\n')
    assert [r.workload.reply_timeout_ns for r in sweep.runs] == [500_000_000, 3_000_000_000]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (ping('reply_timeout = "0 s"'), "shorter than 1 ms"),
        (ping('reply_timeout = "500 us"'), "shorter than 1 ms"),
        (ping('reply_timeout = "1.5 ms"'), "not a whole number of milliseconds"),
        (ping('reply_timeout = "2 min"'), "longer than the timeout (30 s)"),
        (ping('reply_timeout = 2'), "workload.reply_timeout"),
        (ping('reply_timeout = "2 parsecs"'), "workload.reply_timeout"),
        (ping('reply_timeout = "2 s"', "ramp").replace('pattern = "ramp"', 'pattern = "stream"')
         .replace('step = "1 KiB"\ninterval = "10 ms"\n', ""), 'not used by pattern "stream"'),
        (ping('reply_timeout = "2 s"\nreply_timeout_ms = 5'), "reply_timeout_ms"),  # a typo is an unknown key
    ],
)
def test_bad_values_are_refused_naming_the_key(text: str, words: str) -> None:
    e = plan_error(text)
    assert "workload.reply_timeout" in str(e) and words in str(e), str(e)


def test_the_cli_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(ping('reply_timeout = "1.5 ms"'))
    out = CliRunner().invoke(app, ["validate", str(f)], env={"COLUMNS": "250"})
    assert out.exit_code == 2 and "workload.reply_timeout" in out.output, out.output
