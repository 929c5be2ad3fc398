"""The JSON Schema of scenario files and the generated reference document."""

from __future__ import annotations

import tomllib
from pathlib import Path

import jsonschema
import pytest

from roughnet.spec import REPORT_METRICS, docs, json_schema

FIXTURES = Path(__file__).parent / "fixtures" / "scenarios"
REPO = Path(__file__).resolve().parents[2]


def validator() -> jsonschema.Draft202012Validator:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schema_is_valid_json_schema() -> None:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"].endswith("2020-12/schema")
    assert set(schema["required"]) == {"scenario", "host", "link"}
    # a [workload] (roughnet's agents) or [[process]] entries (the user's programs), or both
    assert schema["anyOf"] == [{"required": ["workload"]}, {"required": ["process"]}]
    v = jsonschema.Draft202012Validator(schema)
    head = {"scenario": {"name": "x"}, "host": [{"name": "a"}, {"name": "b"}], "link": [{"between": ["a", "b"]}]}
    assert not v.is_valid(head)
    assert v.is_valid({**head, "process": [{"name": "p", "host": "a", "command": ["true"]}]})


@pytest.mark.parametrize("name", ["quick.toml", "multihop.toml", "bulk-tcp.toml", "ramp.toml", "s1-links.toml",
                                  "brokers.toml"])
def test_valid_fixtures_match_the_schema(name: str) -> None:
    data = tomllib.loads((FIXTURES / name).read_text())
    assert list(validator().iter_errors(data)) == []


@pytest.mark.parametrize(
    ("fixture", "fragment"),
    [
        ("unknown-key.toml", "paylaod"),
        ("missing-unit.toml", "10"),
        ("unknown-protocol.toml", "quic"),
        ("host-shell.toml", "a;rm -rf /"),
    ],
)
def test_schema_catches_what_an_editor_can(fixture: str, fragment: str) -> None:
    data = tomllib.loads((FIXTURES / "bad" / fixture).read_text())
    errors = [e.message for e in validator().iter_errors(data)]
    assert errors and any(fragment in m for m in errors), errors


def test_schema_admits_placeholders_where_the_format_does() -> None:
    data = tomllib.loads((FIXTURES / "quick.toml").read_text())
    data["link"][0]["mtu"] = "${mtu}"
    data["workload"]["pattern"] = "${pattern}"
    assert list(validator().iter_errors(data)) == []
    data["scenario"]["seed"] = "${seed}"
    assert list(validator().iter_errors(data)) != []


def test_schema_admits_table_axes_and_excludes_but_not_mixed_axes() -> None:
    data = tomllib.loads((FIXTURES / "s1-links.toml").read_text())
    assert data["sweep"]["exclude"] and data["link"][0]["rate"] == "${link.rate}"
    data["link"][0]["mtu"] = "${link.mtu}"
    assert list(validator().iter_errors(data)) == []
    mixed = dict(data, sweep={**data["sweep"], "link": [*data["sweep"]["link"], "10 Mbit/s"]})
    assert list(validator().iter_errors(mixed)) != []
    bad_exclude = dict(data, sweep={**data["sweep"], "exclude": [{}]})
    assert list(validator().iter_errors(bad_exclude)) != []
    nested = dict(data, sweep={**data["sweep"], "link": [{"rate": ["5 Mbit/s"]}]})
    assert list(validator().iter_errors(nested)) != []


def test_committed_reference_is_current() -> None:
    committed = (REPO / "docs" / "scenario-reference.md").read_text(encoding="utf-8")
    assert committed == docs.render(), "docs/scenario-reference.md is stale: run python -m roughnet.spec.docs"


def test_reference_lists_every_key() -> None:
    text = docs.render()
    for key in ("`between`", "`queue`", "`payload`", "`warmup`", "`send_size`", "`metrics`", "`repeat`",
                "`congestion_control`", "`fetch_max_wait`", "`heap`", "`jetstream`", "`reuse`", "`domain_id`"):
        assert key in text


def test_docs_check_mode(tmp_path: Path) -> None:
    out = tmp_path / "ref.md"
    assert docs.main(["--output", str(out)]) == 0
    assert docs.main(["--check", "--output", str(out)]) == 0
    out.write_text("stale")
    assert docs.main(["--check", "--output", str(out)]) == 1


def test_every_report_metric_name_is_known_to_the_report() -> None:
    # The contract between [report] metrics (validated here) and roughnet.report.
    from roughnet.report import fmt

    assert [m for m in REPORT_METRICS if fmt.metric_column(m) is None] == []


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "scenarios").glob("*.toml")))
def test_every_shipped_scenario_matches_the_schema(name: str) -> None:
    """What an editor checks against the schema: the files as written, with [[workload]] lists and the fleets'
    host-name patterns (`from = "c*"`, `to = "*"`, `between = ["*"]`, spec.groups) before expansion."""
    data = tomllib.loads((REPO / "scenarios" / name).read_text())
    assert list(validator().iter_errors(data)) == []


def test_schema_admits_host_patterns_only_where_the_format_does() -> None:
    data = tomllib.loads((FIXTURES / "quick.toml").read_text())
    data["workload"]["from"] = "a*"
    data["workload"]["to"] = ["b?", "c"]
    data["link"][0]["between"] = ["*"]
    assert list(validator().iter_errors(data)) == []
    for bad in ("A*", "a;*"):  # not a name's characters
        data["workload"]["from"] = bad
        assert list(validator().iter_errors(data)) != [], bad
    data["workload"]["from"] = "a"
    data["host"][0]["name"] = "a*"  # a [[host]] is named, never a pattern
    assert list(validator().iter_errors(data)) != []
