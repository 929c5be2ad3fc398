"""[workload.zenoh] wait_before_close (issue 26): zenoh's wait, for a blocking publisher's message, before it closes
the transport; checked like the other zenoh timing knobs and passed to the agent in ns (the agent hands zenoh
microseconds: crates/agent/src/drivers/zenoh.rs)."""

from __future__ import annotations

import pytest
from specutil import plan_error, plan_text

from roughnet.run.agents import agent_specs

BASE = """
[scenario]
name = "z"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
[workload]
pattern = "stream"
protocol = "zenoh"
from = "a"
to = "b"
messages = 10
payload = "100 B"
[workload.zenoh]
"""


def test_it_reaches_every_agent_in_nanoseconds_and_changes_the_run_id():
    plain = plan_text(BASE).runs[0]
    run = plan_text(BASE + 'wait_before_close = "30 s"\n').runs[0]
    specs = agent_specs(run, lambda h, seen: {"a": "198.18.0.1", "b": "198.18.0.2"}[h])
    assert {s.config["options"]["wait_before_close"] for s in specs} == {30_000_000_000}
    assert all("wait_before_close" not in s.config.get("options", {})
               for s in agent_specs(plain, lambda h, seen: "198.18.0.1"))
    assert run.run_id != plain.run_id


@pytest.mark.parametrize("value,words", [('"10 ms"', "100 ms"), ('"61 min"', "60 min"), ("5", "duration")])
def test_out_of_bounds_or_not_a_duration_is_refused_naming_the_key(value, words):
    e = plan_error(BASE + f"wait_before_close = {value}\n")
    assert "workload.zenoh.wait_before_close" in str(e) and words in str(e)


def test_only_for_zenoh():
    e = plan_error(BASE.replace('protocol = "zenoh"', 'protocol = "tcp"') + 'wait_before_close = "5 s"\n')
    assert "zenoh" in str(e)
