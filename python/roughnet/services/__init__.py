"""Managed services: the brokers and routers of brokered protocols (docs/services.md).

Who does what: ``lifecycle`` preflights, starts (in the broker host's
namespace, readiness probed with a real protocol operation), watches and
stops services; ``configs`` writes their config files and command lines;
``probes`` (with ``kafkawire``) speaks just enough MQTT, NATS and Kafka to
probe them; ``netns`` opens probe sockets inside a namespace; ``tls`` makes
certificates; ``handle`` is a running service with its log and CPU/RSS usage;
``reuse`` gives each run its share of a service that serves several runs
(``reuse = true``: re-probe, log slice, CPU/RSS window).
The runner calls ``preflight``, ``start_services``, ``check_alive`` and
``stop_services`` (and ``begin_run`` / ``end_run`` around each run of a
reused service); agents get ``ServiceHandle.address(host)``,
``ServiceHandle.topic`` and ``ServiceHandle.agent_options``.
"""

from .handle import ServiceHandle
from .lifecycle import (
    KAFKA_HOME,
    PORTS,
    READY_TIMEOUT_S,
    check_alive,
    kafka_libs,
    kafka_partitions,
    kafka_topic,
    missing_for,
    preflight,
    start_again,
    start_services,
    stop_services,
)
from .reuse import RunWindow, begin_run, end_run

__all__ = [
    "KAFKA_HOME",
    "PORTS",
    "READY_TIMEOUT_S",
    "RunWindow",
    "ServiceHandle",
    "begin_run",
    "check_alive",
    "end_run",
    "kafka_libs",
    "kafka_partitions",
    "kafka_topic",
    "missing_for",
    "preflight",
    "start_again",
    "start_services",
    "stop_services",
]
