"""Scenario files: TOML loading, the strict format (v1), placeholders, JSON Schema.

Who does what inside:
  ``kinds``        one value: what it may be, its "expected ..." text, its JSON Schema
  ``table``        the base of the table models, the host-name kind they share
  ``model``        the tables and keys (pydantic, unknown keys forbidden)
  ``wire``         the wire-only link tables (loss models, half duplex, distances), profile names, units
  ``directions``   one direction's keys: link + [link.forward]/[link.reverse] merge, runspec fields
  ``timeline``     [[link.schedule]] and distance traces (files, inline) into wire-core JSON
  ``wirechecks``   rules between the wire-only keys (needs, profile overrides, schedule, distance)
  ``knobs``        [workload.<protocol>]: each protocol's knobs, and agent options in base units
  ``services``     [[service]]: one model per kind, which kind a run needs, runspec.Service
  ``sweep``        the [sweep] table: scalar and table axes, labels, [[sweep.exclude]]
  ``placeholders`` ``${key}`` / ``${key.field}`` syntax and placement, substitution
  ``checks``       rules between keys (hosts exist, pattern needs, limits, connectivity)
  ``problems``     the wording of errors (``ScenarioError``, a ``SpecError``)
  ``load``         reading a file and running the checks in order
  ``resolve``      a checked, placeholder-free scenario -> ``runspec`` types
  ``docs``         docs/scenario-reference.md, generated from the schema

Sweep expansion and run ids are ``roughnet.plan``'s.  Machine-dependent checks
(engines, tools) are preflight's.
"""

from __future__ import annotations

from typing import Any

from .load import load_scenario, loads, validate_data
from .model import REPORT_METRICS, Scenario
from .problems import Problem, ScenarioError
from .table import HOST, HOST_NAME

__all__ = [
    "FORMAT_VERSION",
    "REPORT_METRICS",
    "Problem",
    "Scenario",
    "ScenarioError",
    "json_schema",
    "load_scenario",
    "loads",
    "validate_data",
]

#: Version of the scenario file format described by ``Scenario``.
FORMAT_VERSION = 1

SCHEMA_ID = "https://roughnet.invalid/schema/scenario-v1.json"


def _tidy(node: Any) -> Any:
    """Drop ``"default": null`` (an unset optional key), recursively."""
    if isinstance(node, dict):
        return {k: _tidy(v) for k, v in node.items() if not (k == "default" and v is None)}
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    return node


#: Where host-name patterns (spec.groups: ``"c*"``, ``"*"``) may stand for host names: (table, key).
_PATTERN_KEYS = (("WorkloadTable", "from"), ("WorkloadTable", "to"), ("LinkTable", "between"))
#: A host-name pattern as spec.groups reads one: name characters with at least one ``*`` or ``?``.
HOST_PATTERN_SCHEMA = {"type": "string", "pattern": r"^[a-z0-9*?]*[*?][a-z0-9*?]*$",
                       "description": "a host-name pattern: '*' any characters, '?' one; it stands for every "
                                      "[[host]] whose name matches it, in [[host]] order"}  # fmt: skip


def _admit_patterns(node: Any, host: dict[str, Any]) -> Any:
    """``node`` with every host-name schema ``host`` in it also admitting a pattern."""
    if node == host:
        return {"anyOf": [host, HOST_PATTERN_SCHEMA]}
    if isinstance(node, dict):
        return {k: _admit_patterns(v, host) for k, v in node.items()}
    if isinstance(node, list):
        return [_admit_patterns(v, host) for v in node]
    return node


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of scenario files, for editors and `roughnet schema`.

    The model checks files after spec.groups has expanded host-name patterns, so its own schema knows
    host names only; here ``from``, ``to`` and ``between`` also admit patterns, and ``between`` one entry
    (``["*"]``: every host), which the expansion must turn into at least two hosts. ``workload`` is a
    table or a list of them (``[[workload]]``), as spec.load reads it."""
    schema = _tidy(Scenario.model_json_schema(by_alias=True))
    defs = schema["$defs"]
    host = HOST.json_schema()
    host = next(a for a in host.get("anyOf", [host]) if a.get("pattern") == HOST_NAME)
    for table, key in _PATTERN_KEYS:
        prop = _admit_patterns(defs[table]["properties"][key], host)
        if key == "between":
            prop["minItems"] = 1
        defs[table]["properties"][key] = prop
    # `[workload]` or `[[workload]]` tables (spec.load turns the list into `workload` and `workloads`).
    one = schema["properties"]["workload"]
    # optional since [[process]]: pydantic writes anyOf [table, null]; a file either has the key or not
    ref = {"$ref": one["$ref"]} if "$ref" in one else next(a for a in one["anyOf"] if "$ref" in a)
    schema["properties"]["workload"] = {"anyOf": [ref, {"type": "array", "items": ref, "minItems": 1}],
                                        "description": one.get("description", "")}
    schema["anyOf"] = [{"required": ["workload"]}, {"required": ["process"]}]  # agents, or the user's programs
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
