"""The ``[[service]]`` tables: managed brokers and routers, and which run uses which.

This module owns the shape of a service declaration (``kind``, ``host``, ``reuse`` and
the kind's own settings, docs/protocols.md), one model per kind joined into a union
told apart by ``kind``, which service kind a run needs (``needed_kind``: mqtt, kafka
and nats always, zenoh only in client mode; ``runspec.PROTOCOL_SERVICE``), and the
conversion of a declaration into a ``runspec.Service`` with every setting in base
units (defaults filled in: roughnet configures the service, so it owns the defaults).
Rules between keys (known host, one service per kind, a run's service declared, TLS
on both sides, connectivity) are ``spec.checks``'; a service no run uses is found by
``plan``.  Starting services is ``roughnet.services``', not ours.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field

from .. import runspec
from . import kinds
from .table import HOST, Table, field

MIB = 1024 * 1024
#: Smallest Kafka heap: Kafka 4 fails to allocate its buffers below this (roughnet.services measured it).
KAFKA_MIN_HEAP = 128 * MIB
#: Zenoh sessions need a router only in this mode.
ZENOH_CLIENT = "client"

_KIND = "Service kind: " + ", ".join(f'"{k}"' for k in runspec.SERVICE_KINDS) + "."


class ServiceTable(Table):
    """The keys every ``[[service]]`` has."""

    kind: str = field(_KIND)
    host: HOST.type() = field(
        "Host whose namespace runs the service (any host with a path through links to the workload's hosts; it "
        "need not be `from` or `to`).")
    reuse: kinds.boolean().type() = field(
        "Keep one running instance of this service across consecutive runs of the sweep whose environments are "
        "equal (hosts, links' structure and engines, service settings; impairments may differ) instead of a fresh "
        "one per run (default false; docs/services.md, \"reuse = true\").", False)

    key_noun: ClassVar[str] = "setting"


class MosquittoService(ServiceTable):
    """``[[service]]`` with ``kind = "mosquitto"``: the MQTT broker (for protocol "mqtt")."""

    kind: Literal["mosquitto"] = field(_KIND)
    persistence: kinds.boolean().type() = field("Broker persistence (mosquitto `persistence`).", False)
    max_inflight: kinds.integer(0, 65535, "an integer from 0 to 65535 (0 = no limit)").type() = field(
        "Broker's in-flight QoS 1/2 messages per client (`max_inflight_messages`; 0 = no limit).", 20)
    max_queued: kinds.integer(0, None, "an integer >= 0 (0 = no limit)").type() = field(
        "Broker's queued messages per client (`max_queued_messages`; 0 = no limit).", 1000)
    tls: kinds.boolean().type() = field("Listen with TLS (needed by `[workload.mqtt] tls = true`).", False)
    nodelay: kinds.boolean().type() = field(
        "TCP_NODELAY on the broker's client sockets (mosquitto `set_tcp_nodelay`). Off by default, as in mosquitto: "
        "Nagle's algorithm then holds a small message while an earlier one is unacknowledged, which adds "
        "milliseconds where one connection carries many flows (one MQTT client per car, docs/timelines.md).", False)

    key_owner: ClassVar[str] = 'service kind "mosquitto"'


class KafkaService(ServiceTable):
    """``[[service]]`` with ``kind = "kafka"``: a single-node Apache Kafka in KRaft mode (for protocol "kafka")."""

    kind: Literal["kafka"] = field(_KIND)
    heap: kinds.bounded_size(KAFKA_MIN_HEAP, 64 * 1024 * MIB, ("512 MiB", "1 GiB")).type() = field(
        "JVM heap of the broker (-Xms and -Xmx): " + kinds.SIZE + ", 128 MiB to 64 GiB.", "512 MiB")

    key_owner: ClassVar[str] = 'service kind "kafka"'


class NatsService(ServiceTable):
    """``[[service]]`` with ``kind = "nats"``: the NATS server, nats-server (for protocol "nats")."""

    kind: Literal["nats"] = field(_KIND)
    jetstream: kinds.boolean().type() = field("Enable JetStream.", False)

    key_owner: ClassVar[str] = 'service kind "nats"'


class ZenohRouterService(ServiceTable):
    """``[[service]]`` with ``kind = "zenoh-router"``: the agent in router mode (for zenoh with mode = "client")."""

    kind: Literal["zenoh-router"] = field(_KIND)

    key_owner: ClassVar[str] = 'service kind "zenoh-router" (it has no settings)'


#: Model per service kind.
SERVICE_TABLES: dict[str, type[ServiceTable]] = {
    "mosquitto": MosquittoService,
    "kafka": KafkaService,
    "nats": NatsService,
    "zenoh-router": ZenohRouterService,
}
assert tuple(SERVICE_TABLES) == runspec.SERVICE_KINDS, "spec.services.SERVICE_TABLES is out of date"

#: One [[service]] entry: the model is chosen by ``kind``.
AnyService = Annotated[
    Union[MosquittoService, KafkaService, NatsService, ZenohRouterService],  # noqa: UP007 (pydantic union)
    Field(discriminator="kind"),
]
#: The keys every kind has; the rest of a table are the kind's settings.
COMMON_KEYS = tuple(ServiceTable.model_fields)


def needed_kind(protocol: str, zenoh_mode: Any) -> str | None:
    """The service kind a run with ``protocol`` connects to (``zenoh_mode``: [workload.zenoh] mode or None)."""
    if protocol == "zenoh" and zenoh_mode != ZENOH_CLIENT:
        return None
    return runspec.PROTOCOL_SERVICE.get(protocol)


def settings(table: ServiceTable) -> dict[str, Any]:
    """The kind's own settings of ``table`` (no placeholders left), defaults included, in base units."""
    fields = type(table).model_fields
    return {key: kinds.to_base(fields[key].metadata, getattr(table, key)) for key in fields if key not in COMMON_KEYS}


def resolve(table: ServiceTable) -> runspec.Service:
    return runspec.Service(kind=table.kind, host=table.host, reuse=table.reuse, options=settings(table))
