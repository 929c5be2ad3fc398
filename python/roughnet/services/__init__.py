"""Managed services: the brokers and routers of brokered protocols (docs/services.md).

Who does what: ``lifecycle`` preflights, starts (in the broker host's
namespace, readiness probed with a real protocol operation), watches and
stops services; ``configs`` writes their config files and command lines;
``probes`` (with ``kafkawire``) speaks just enough MQTT, NATS and Kafka to
probe them; ``netns`` opens probe sockets inside a namespace; ``tls`` makes
certificates; ``handle`` is a running service with its log and CPU/RSS usage.
The runner calls ``preflight``, ``start_services``, ``check_alive`` and
``stop_services``; agents get ``ServiceHandle.address(host)``,
``ServiceHandle.topic`` and ``ServiceHandle.agent_options``.
"""

from .handle import ServiceHandle
from .lifecycle import (
    KAFKA_HOME,
    PORTS,
    READY_TIMEOUT_S,
    check_alive,
    kafka_libs,
    kafka_topic,
    missing_for,
    preflight,
    start_services,
    stop_services,
)

__all__ = [
    "KAFKA_HOME",
    "PORTS",
    "READY_TIMEOUT_S",
    "ServiceHandle",
    "check_alive",
    "kafka_libs",
    "kafka_topic",
    "missing_for",
    "preflight",
    "start_services",
    "stop_services",
]
