"""Scenario format for the protocols past TCP/UDP: [workload.<protocol>] knobs and [[service]] tables.

docs/protocols.md is the contract for the knob names, values and defaults; these tests check that the
format accepts exactly those knobs, converts them into agent options in base units, and that services are
declared, checked and handed to the runs that use them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from roughnet import runspec
from roughnet.plan import plan_sweep
from roughnet.spec import json_schema
from roughnet.spec.knobs import KNOB_TABLES

from conftest import toml_hosts
from specutil import plan_error, plan_text

FIXTURES = Path(__file__).parent / "fixtures" / "scenarios"

BASE = """\
[scenario]
name = "t"

""" + toml_hosts("a", "b", "brk") + """
[[link]]
between = ["a", "brk"]
rate = "10 Mbit/s"
[[link]]
between = ["brk", "b"]

[workload]
pattern = "{pattern}"
protocol = "{protocol}"
from = "a"
to = "b"
payload = "{payload}"
{amount}
{extra}
"""

#: The [[service]] each brokered protocol needs, on the middle host.
SERVICE = {
    "mqtt": '[[service]]\nkind = "mosquitto"\nhost = "brk"\n',
    "kafka": '[[service]]\nkind = "kafka"\nhost = "brk"\n',
    "nats": '[[service]]\nkind = "nats"\nhost = "brk"\n',
    "zenoh": '[[service]]\nkind = "zenoh-router"\nhost = "brk"\n',
}


def make(protocol: str, extra: str = "", *, service: bool = True, pattern: str = "stream",
         payload: str = "1 KiB") -> str:  # fmt: skip
    """A scenario over ``protocol`` with ``extra`` TOML appended (plus the protocol's service)."""
    amount = "duration = \"2 s\"" if pattern == "bulk" else "messages = 100"
    if service and protocol in ("mqtt", "kafka", "nats"):
        extra = extra + "\n" + SERVICE[protocol]
    return BASE.format(pattern=pattern, protocol=protocol, payload=payload, amount=amount, extra=extra)


def sweep_of(text: str) -> runspec.Sweep:
    return plan_text(text, "t.toml")


def error_of(text: str) -> str:
    return str(plan_error(text, "t.toml"))


# ----------------------------------------------------------------------------- knobs

KNOBS: dict[str, tuple[str, dict[str, Any]]] = {
    "zenoh": (
        'mode = "peer"\ntransport = "quic"\nreliability = "best_effort"\ncongestion_control = "drop"\n'
        "express = true\npriority = 2\nmulticast_scouting = true",
        {"mode": "peer", "transport": "quic", "reliability": "best_effort", "congestion_control": "drop",
         "express": True, "priority": 2, "multicast_scouting": True},
    ),
    "zmq": ('sndhwm = 0\nrcvhwm = 5000\ntransport = "tcp"', {"sndhwm": 0, "rcvhwm": 5000, "transport": "tcp"}),
    "dds": (
        'reliability = "best_effort"\nhistory_depth = 16\ndurability = "transient_local"\nmulticast = true\n'
        "ros2 = true\ndomain_id = 232",
        {"reliability": "best_effort", "history_depth": 16, "durability": "transient_local", "multicast": True,
         "ros2": True, "domain_id": 232},
    ),
    "mqtt": (
        'version = "5"\nqos = 2\nclean_session = false\nkeep_alive = "2 min"\ninflight = 10\ntls = false',
        {"version": "5", "qos": 2, "clean_session": False, "keep_alive": 120_000_000_000, "inflight": 10,
         "tls": False},
    ),
    "kafka": (
        'acks = "1"\nlinger = "250 us"\nbatch_size = "64 KiB"\ncompression = "zstd"\nidempotence = false\n'
        'partitions = 3\nfetch_min_bytes = "1 kB"\nfetch_max_wait = "0.1 s"',
        {"acks": "1", "linger": 250_000, "batch_size": 65536, "compression": "zstd", "idempotence": False,
         "partitions": 3, "fetch_min_bytes": 1000, "fetch_max_wait": 100_000_000},
    ),
    "nats": ("", {}),
}  # fmt: skip


@pytest.mark.parametrize("protocol", list(KNOBS))
def test_every_knob_is_accepted_and_resolved_in_base_units(protocol: str) -> None:
    text, options = KNOBS[protocol]
    sweep = sweep_of(make(protocol, f"[workload.{protocol}]\n{text}\n"))
    assert [r.workload.options for r in sweep.runs] == [options]
    assert sweep.runs[0].workload.protocol == protocol


def test_knob_tables_are_exactly_those_of_docs_protocols_md() -> None:
    # The contract: docs/protocols.md's knob table lists, per protocol, the keys the model accepts.
    doc = (Path(__file__).resolve().parents[2] / "docs" / "protocols.md").read_text(encoding="utf-8")
    documented: dict[str, set[str]] = {}
    for line in doc.split("## Services")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`"):
            for proto in cells[0].split(","):
                for knob in cells[1].split(","):
                    documented.setdefault(proto.strip(), set()).add(knob.strip().strip("`"))
    documented.setdefault("nats", set())
    assert set(documented) == set(runspec.PROTOCOLS) == set(KNOB_TABLES)
    assert {p: set(t.model_fields) for p, t in KNOB_TABLES.items()} == documented


def test_unset_knobs_are_not_sent() -> None:
    sweep = sweep_of(make("kafka", '[workload.kafka]\nacks = "0"\n'))
    assert sweep.runs[0].workload.options == {"acks": "0"}
    assert sweep_of(make("dds")).runs[0].workload.options == {}


@pytest.mark.parametrize("protocol", runspec.PROTOCOLS)
def test_an_unknown_knob_names_the_protocol_and_lists_its_knobs(protocol: str) -> None:
    message = error_of(make(protocol, f"[workload.{protocol}]\nbogus_knob = 1\n"))
    assert message.startswith(f"t.toml: workload.{protocol}.bogus_knob: unknown key"), message
    assert f'not a knob of protocol "{protocol}"' in message
    knobs = list(KNOB_TABLES[protocol].model_fields)
    if knobs:
        assert "expected one of: " + ", ".join(knobs) in message
    else:
        assert "it has none yet" in message and "no knobs here" in message


def test_a_misspelt_knob_gets_a_suggestion() -> None:
    message = error_of(make("zenoh", '[workload.zenoh]\nreliabilty = "reliable"\n'))
    assert "did you mean 'reliability'?" in message


@pytest.mark.parametrize(
    ("protocol", "knob", "value", "words"),
    [
        ("zenoh", "mode", '"router"', ['expected one of "peer", "client"']),
        ("zenoh", "transport", '"sctp"', ['"tcp", "udp", "quic"']),
        ("zenoh", "reliability", '"reliable "', ['"reliable", "best_effort"']),
        ("zenoh", "congestion_control", '"wait"', ['"block", "drop"']),
        ("zenoh", "priority", "0", ["out of range", "from 1 to 7"]),
        ("zenoh", "express", '"yes"', ["not a boolean"]),
        ("zmq", "transport", '"ipc"', ['one of "tcp"']),
        ("zmq", "sndhwm", "-1", ["out of range", ">= 0"]),
        ("dds", "durability", '"persistent"', ['"volatile", "transient_local"']),
        ("dds", "domain_id", "233", ["out of range", "0 to 232"]),
        ("dds", "history_depth", '"10"', ["not an integer"]),
        ("mqtt", "version", '"4"', ['"3.1.1", "5"']),
        ("mqtt", "version", "5", ["not a string", '"3.1.1", "5"']),
        ("mqtt", "qos", "3", ["out of range", "0, 1 or 2"]),
        ("mqtt", "keep_alive", '"1.5 s"', ["not a whole number of seconds"]),
        ("mqtt", "keep_alive", '"1100 min"', ["above 65535 s"]),
        ("mqtt", "keep_alive", "30", ["missing unit"]),
        ("mqtt", "inflight", "0", ["out of range"]),
        ("kafka", "acks", "1", ["not a string", '"0", "1", "all"']),
        ("kafka", "compression", '"brotli"', ['"none", "gzip", "snappy", "lz4", "zstd"']),
        ("kafka", "linger", '"16 min"', ["above 15 min"]),
        ("kafka", "batch_size", '"0 B"', ["below 1 B"]),
        ("kafka", "batch_size", '"3 GiB"', ["above 2147483647 B"]),
        ("kafka", "fetch_min_bytes", '"1 kb"', ["expected a size"]),
        ("kafka", "fetch_max_wait", '"6 min"', ["above 5 min"]),
        ("kafka", "partitions", "0", ["out of range", ">= 1"]),
    ],
)
def test_bad_knob_values(protocol: str, knob: str, value: str, words: list[str]) -> None:
    message = error_of(make(protocol, f"[workload.{protocol}]\n{knob} = {value}\n"))
    first = message.splitlines()[0]
    assert first.startswith(f"t.toml: workload.{protocol}.{knob}: "), message
    for word in words:
        assert word in first, message


def test_knob_table_of_another_protocol_is_an_error() -> None:
    message = error_of(make("zenoh", '[workload.mqtt]\nqos = 1\n'))
    assert 'workload.mqtt: [workload.mqtt] knobs given for protocol "zenoh"' in message


def test_an_idempotent_producer_needs_acks_all() -> None:
    message = error_of(make("kafka", '[workload.kafka]\nidempotence = true\nacks = "1"\n'))
    assert "workload.kafka.acks: an idempotent producer needs acks = \"all\"" in message
    ok = sweep_of(make("kafka", '[workload.kafka]\nidempotence = true\n'))
    assert ok.runs[0].workload.options == {"idempotence": True}


@pytest.mark.parametrize("protocol", ["zenoh", "zmq", "dds", "mqtt", "kafka", "nats"])
def test_no_udp_payload_limit_for_the_message_protocols(protocol: str) -> None:
    sweep = sweep_of(make(protocol, payload="500 KiB"))
    assert sweep.runs[0].workload.payload_bytes == 500 * 1024
    assert "at most 65507 B for UDP" in error_of(make("udp", payload="500 KiB"))


@pytest.mark.parametrize("protocol", ["mqtt", "kafka", "nats"])
def test_bulk_over_a_brokered_protocol_is_allowed(protocol: str) -> None:
    run = sweep_of(make(protocol, pattern="bulk")).runs[0]
    assert run.workload.pattern == "bulk" and run.workload.duration_ns == 2_000_000_000
    assert [s.kind for s in run.services] == [runspec.PROTOCOL_SERVICE[protocol]]


def test_swept_knob_values_are_checked_per_run() -> None:
    text = make("mqtt", '[workload.mqtt]\nqos = "${qos}"\n[sweep]\nqos = [0, 1, 2]\n')
    assert [r.workload.options["qos"] for r in sweep_of(text).runs] == [0, 1, 2]
    message = error_of(text.replace("[0, 1, 2]", "[0, 3]"))
    assert "workload.mqtt.qos = 3 (from sweep.qos[1]): out of range" in message and "[run 2 of 2" in message


# ----------------------------------------------------------------------------- services


def test_service_settings_are_resolved_with_defaults_in_base_units() -> None:
    run = sweep_of(make("kafka", '[workload.kafka]\nacks = "all"\n', service=False)
                   + '[[service]]\nkind = "kafka"\nhost = "brk"\nheap = "1 GiB"\nreuse = true\n').runs[0]  # fmt: skip
    assert run.services == (runspec.Service(kind="kafka", host="brk", reuse=True, options={"heap": 1024**3}),)
    mqtt = sweep_of(make("mqtt")).runs[0].services
    assert mqtt == (runspec.Service(kind="mosquitto", host="brk", reuse=False, options={
        "persistence": False, "max_inflight": 20, "max_queued": 1000, "tls": False, "nodelay": False}),)  # fmt: skip
    assert sweep_of(make("nats")).runs[0].services[0].options == {"jetstream": False}
    assert sweep_of(make("kafka")).runs[0].services[0].options == {"heap": 512 * 1024**2}


@pytest.mark.parametrize("protocol", ["mqtt", "kafka", "nats"])
def test_a_brokered_protocol_without_its_service(protocol: str) -> None:
    kind = runspec.PROTOCOL_SERVICE[protocol]
    message = error_of(make(protocol, service=False))
    assert message.startswith(f"t.toml: workload.protocol: protocol \"{protocol}\" needs a [[service]] of kind "
                              f"\"{kind}\" (declared: none)"), message  # fmt: skip


def test_zenoh_needs_a_router_only_in_client_mode() -> None:
    assert sweep_of(make("zenoh")).runs[0].services == ()
    assert sweep_of(make("zenoh", '[workload.zenoh]\nmode = "peer"\n')).runs[0].services == ()
    message = error_of(make("zenoh", '[workload.zenoh]\nmode = "client"\n'))
    assert 'workload.zenoh.mode: protocol "zenoh" with mode = "client" needs a [[service]] of kind ' \
           '"zenoh-router"' in message  # fmt: skip
    run = sweep_of(make("zenoh", '[workload.zenoh]\nmode = "client"\n' + SERVICE["zenoh"])).runs[0]
    assert run.services == (runspec.Service(kind="zenoh-router", host="brk"),)
    assert run.workload.options == {"mode": "client"}


def test_a_service_no_run_uses() -> None:
    message = error_of(make("mqtt", SERVICE["kafka"]))
    assert message.startswith("t.toml: service[0]: service kafka on host brk is used by no run: the sweep's "
                              "protocols are mqtt;"), message  # fmt: skip
    # A router with zenoh in peer mode is unused too, and the message says which mode the runs have.
    message = error_of(make("zenoh", SERVICE["zenoh"]))
    assert "service zenoh-router on host brk is used by no run: the sweep's protocols are zenoh (peer mode)" \
        in message  # fmt: skip


def test_swept_protocol_with_two_services_gives_each_run_only_its_own() -> None:
    sweep = plan_sweep(FIXTURES / "brokers.toml")
    assert len(sweep.runs) == 6
    by_protocol: dict[str, set[tuple[runspec.Service, ...]]] = {}
    for run in sweep.runs:
        by_protocol.setdefault(run.workload.protocol, set()).add(run.services)
    assert by_protocol["zenoh"] == {()}
    (mqtt,) = by_protocol["mqtt"]
    (kafka,) = by_protocol["kafka"]
    assert [(s.kind, s.host, s.options["max_queued"]) for s in mqtt] == [("mosquitto", "broker", 5000)]
    assert [(s.kind, s.host, s.options["heap"]) for s in kafka] == [("kafka", "broker", 1024**3)]
    # Each run has its own protocol's knobs only, in base units.
    options = {r.workload.protocol: r.workload.options for r in sweep.runs}
    assert options["kafka"] == {"acks": "all", "linger": 5_000_000, "batch_size": 65536,
                                "fetch_max_wait": 100_000_000}  # fmt: skip
    assert options["mqtt"] == {"version": "5", "qos": 1, "keep_alive": 60_000_000_000}
    assert options["zenoh"] == {"reliability": "reliable", "congestion_control": "block", "priority": 5}
    # The service is part of what a run is: different services, different ids; ids stay distinct.
    assert len({r.run_id for r in sweep.runs}) == 6


def test_swept_zenoh_mode_gives_the_router_to_client_runs_only() -> None:
    sweep = '[sweep]\nmode = ["peer", "client"]\n'
    text = make("zenoh", '[workload.zenoh]\nmode = "${mode}"\n' + SERVICE["zenoh"] + sweep)
    runs = sweep_of(text).runs
    assert [(r.params["mode"], [s.kind for s in r.services]) for r in runs] == [("peer", []),
                                                                                ("client", ["zenoh-router"])]


def test_service_on_an_unknown_host() -> None:
    message = error_of(make("mqtt", service=False) + '[[service]]\nkind = "mosquitto"\nhost = "c"\n')
    assert message.startswith('t.toml: service[0].host: unknown host; expected one of the [[host]] names '
                              '(a, b, brk) (got "c")'), message  # fmt: skip


def test_service_host_must_reach_sender_and_receivers() -> None:
    text = make("nats", service=False).replace('[workload]', '[[host]]\nname = "far"\n[[host]]\nname = "far2"\n'
                                               '[[link]]\nbetween = ["far", "far2"]\n\n[workload]')  # fmt: skip
    message = error_of(text + '[[service]]\nkind = "nats"\nhost = "far"\n')
    assert "service[0].host: no path through links from the nats service's host 'far' to 'a'" in message
    # Any connected host will do, the sender's own included.
    assert sweep_of(text + '[[service]]\nkind = "nats"\nhost = "a"\n').runs[0].services[0].host == "a"


def test_mqtt_tls_needs_a_tls_broker() -> None:
    message = error_of(make("mqtt", "[workload.mqtt]\ntls = true\n"))
    assert message.startswith("t.toml: workload.mqtt.tls: TLS asked, but the mosquitto service (service[0]) "
                              "listens without TLS; expected tls = true in service[0] too"), message  # fmt: skip
    text = make("mqtt", "[workload.mqtt]\ntls = true\n", service=False)
    run = sweep_of(text + '[[service]]\nkind = "mosquitto"\nhost = "brk"\ntls = true\n').runs[0]
    assert run.workload.options == {"tls": True} and run.services[0].options["tls"] is True


@pytest.mark.parametrize(
    ("service", "path", "words"),
    [
        ('kind = "redis"\nhost = "brk"', "service[1].kind",
         ['unknown value; expected one of "mosquitto", "kafka", "nats", "zenoh-router" (got "redis")']),
        ('host = "brk"', "service[1].kind", ['missing required key; expected one of "mosquitto", "kafka"']),
        ('kind = "kafka"', "service[1].host", ["missing required key"]),
        ('kind = "kafka"\nhost = "brk"\nhaep = "1 GiB"', "service[1].haep",
         ['unknown key: not a setting of service kind "kafka" (did you mean \'heap\'?)', "one of: kind, host, "
          "reuse, heap"]),
        ('kind = "zenoh-router"\nhost = "brk"\ntls = true', "service[1].tls",
         ['not a setting of service kind "zenoh-router" (it has no settings)']),
        ('kind = "nats"\nhost = "brk"\nheap = "1 GiB"', "service[1].heap", ['not a setting of service kind "nats"']),
        ('kind = "kafka"\nhost = "brk"\nheap = "1 MiB"', "service[1].heap", ["below 128 MiB"]),
        ('kind = "kafka"\nhost = "brk"\nheap = 512', "service[1].heap", ["missing unit"]),
        ('kind = "mosquitto"\nhost = "brk"\nmax_inflight = -1', "service[1].max_inflight", ["out of range"]),
        ('kind = "kafka"\nhost = "brk"\nreuse = "yes"', "service[1].reuse", ["not a boolean"]),
        ('kind = "kafka"\nhost = "a;b"', "service[1].host", ["not a valid name"]),
        ('kind = "mosquitto"\nhost = "a"', "service[1].kind",
         ['a second service of kind "mosquitto" (service[0] is one)']),
    ],
)
def test_service_table_rules(service: str, path: str, words: list[str]) -> None:
    message = error_of(make("mqtt") + "[[service]]\n" + service + "\n")
    first = message.splitlines()[0]
    assert first.startswith(f"t.toml: {path}: "), message
    for word in words:
        assert word in first, message


def test_service_must_be_an_array_of_tables() -> None:
    message = error_of("service = 3\n" + make("udp"))
    assert "t.toml: service: wrong type; expected an array of tables ([[service]]) (got 3)" in message
    message = error_of("service = [1]\n" + make("udp"))
    assert "t.toml: service[0]: wrong type; expected a table (got 1)" in message


def test_placeholders_in_service_settings() -> None:
    text = make("kafka", service=False) + '[[service]]\nkind = "kafka"\nhost = "${where}"\nheap = "${heap}"\n' \
        '[sweep]\nwhere = ["brk", "b"]\nheap = ["512 MiB", "2 GiB"]\n'  # fmt: skip
    runs = sweep_of(text).runs
    assert [(r.services[0].host, r.services[0].options["heap"]) for r in runs] == [
        ("brk", 512 * 2**20), ("brk", 2 * 2**30), ("b", 512 * 2**20), ("b", 2 * 2**30)]  # fmt: skip
    assert len({r.run_id for r in runs}) == 4
    message = error_of(text.replace('"2 GiB"', '"2 MiB"'))
    assert 'service[0].heap = "2 MiB" (from sweep.heap[1]): below 128 MiB' in message
    message = error_of(text.replace('where = ["brk", "b"]', 'where = ["brk", "z"]'))
    assert 'service[0].host = "z" (from sweep.where[1]): unknown host' in message


def test_the_kind_is_not_a_placeholder() -> None:
    text = make("mqtt", service=False) + '[[service]]\nkind = "${k}"\nhost = "brk"\n[sweep]\nk = ["mosquitto"]\n'
    assert 'service[0].kind: unknown value; expected one of "mosquitto"' in error_of(text)


# ----------------------------------------------------------------------------- schema


def test_brokers_fixture_matches_the_schema_and_the_schema_knows_services() -> None:
    schema = json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    data = tomllib.loads((FIXTURES / "brokers.toml").read_text(encoding="utf-8"))
    assert list(validator.iter_errors(data)) == []
    for bad in ({"kind": "redis", "host": "broker"}, {"kind": "kafka", "host": "broker", "haep": "1 GiB"},
                {"kind": "nats"}):  # fmt: skip
        assert list(validator.iter_errors(dict(data, service=[bad]))) != [], bad
    data["workload"]["mqtt"]["bogus"] = 1
    assert list(validator.iter_errors(data)) != []


def test_the_guide_examples_of_knob_tables_are_valid() -> None:
    # docs/scenario-format.md shows one block per protocol; each must pass as written.
    guide = (Path(__file__).resolve().parents[2] / "docs" / "scenario-format.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in guide.split("```toml\n")[1:]]
    checked = set()
    for block in blocks:
        try:
            data = tomllib.loads(block)
        except tomllib.TOMLDecodeError:
            continue  # an excerpt with "..." in it
        knobs = data.get("workload", {})
        if set(data) - {"workload", "service"} or "pattern" in knobs or not knobs:
            continue
        for protocol in knobs:
            table = block.split(f"[workload.{protocol}]", 1)[1].split("\n\n[", 1)[0]
            services = "".join(f'[[service]]\nkind = "{s["kind"]}"\nhost = "brk"\n' for s in data.get("service", []))
            run = sweep_of(make(protocol, f"[workload.{protocol}]{table}\n" + services, service=False)).runs[0]
            assert set(run.workload.options) == set(knobs[protocol]), protocol
            checked.add(protocol)
    assert checked == {"tcp", "udp", "zenoh", "zmq", "dds", "mqtt", "kafka"}
