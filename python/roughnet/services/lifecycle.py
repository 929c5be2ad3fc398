"""Preflight, start, watch and stop a run's managed services.

Owns the order of a service's life (docs/services.md): preflight checks the
machine has what every service of a sweep needs; ``start_services`` writes each
service's config into the run's artifacts, starts it inside its host's
namespace with ``Topology.popen`` (so the ledger records it), probes readiness
with a real protocol operation (``services.probes``) until a per-kind deadline,
and starts the CPU/RSS sampler; ``check_alive`` says which one died and why;
``stop_services`` ends them.  Config text comes from ``services.configs``,
certificates from ``services.tls``, the process handle from ``services.handle``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..binaries import agent_version, find_binary
from ..errors import AgentError, PreflightError, ServiceError
from ..runspec import SERVICE_KINDS, Run, Service
from . import configs, probes, tls
from .handle import ServiceHandle, UsageSampler

log = logging.getLogger(__name__)

PORTS = {"mosquitto": 1883, "kafka": 9092, "nats": 4222, "zenoh-router": 7447}
#: Seconds from start until the readiness probe must succeed (Kafka: JVM start, ~4-9 s here).
READY_TIMEOUT_S = {"mosquitto": 15.0, "nats": 15.0, "kafka": 90.0, "zenoh-router": 20.0}
#: Seconds between two probe attempts, and the socket timeout of one attempt.
PROBE_INTERVAL_S = 0.1
PROBE_IO_TIMEOUT_S = 3.0
#: Seconds the Kafka StorageTool may take to format a run's storage.
KAFKA_FORMAT_TIMEOUT_S = 90.0
#: Lines of a service's log quoted in errors.
LOG_LINES = 20

KAFKA_VERSION = "4.3.1"
KAFKA_HOME = Path(os.environ.get("ROUGHNET_KAFKA_HOME", f"/var/cache/roughnet/kafka-{KAFKA_VERSION}"))
KAFKA_FETCH = "bash scripts/fetch-kafka.sh"
#: Where Debian puts daemons; not always on a non-login root PATH.
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")
INSTALL_HINT = {
    "mosquitto": "apt-get install -y mosquitto",
    "nats-server": "apt-get install -y nats-server",
    "java": "apt-get install -y openjdk-17-jre-headless",
    "roughnet-agent": "make build",
}


def kafka_libs() -> Path:
    return KAFKA_HOME / "libs"


def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in _SBIN:
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.stderr.splitlines():
        if "version" in line and '"' in line:
            v = line.split('"')[1]
            head = v.split(".")[1] if v.startswith("1.") else v.split(".")[0]
            try:
                return int(head.split("-")[0])
            except ValueError:
                return None
    return None


def _agent_has_zenoh(agent: Path) -> bool:
    """The router command exists exactly when the agent speaks zenoh (the same cargo feature)."""
    try:
        return "zenoh" in agent_version(str(agent)).get("protocols", [])
    except (AgentError, OSError, subprocess.TimeoutExpired):
        return False


def missing_for(kind: str, tls_needed: bool = False) -> list[str]:
    """What this machine lacks to run a service of ``kind``, each with the command that installs it."""
    out = []
    if kind == "mosquitto":
        if _which("mosquitto") is None:
            out.append(f"mosquitto is not installed (install: `{INSTALL_HINT['mosquitto']}`)")
        if tls_needed and _which("openssl") is None:
            out.append(f"openssl is not installed, needed for tls = true (install: `{tls.OPENSSL_INSTALL}`)")
    elif kind == "nats":
        if _which("nats-server") is None:
            out.append(f"nats-server is not installed (install: `{INSTALL_HINT['nats-server']}`)")
    elif kind == "kafka":
        java = _which("java")
        if java is None:
            out.append(f"java (17 or newer) is not installed (install: `{INSTALL_HINT['java']}`)")
        else:
            major = _java_major(java)
            if major is None or major < 17:
                out.append(f"{java} is Java {major or 'of unknown version'}; Kafka {KAFKA_VERSION} needs 17 or "
                           f"newer (install: `{INSTALL_HINT['java']}`)")
        jar = kafka_libs() / f"kafka_2.13-{KAFKA_VERSION}.jar"
        if not jar.is_file():
            out.append(f"the Kafka {KAFKA_VERSION} jars are not in {kafka_libs()} (expected {jar.name}; "
                       f"fetch them with `{KAFKA_FETCH}`, or set ROUGHNET_KAFKA_HOME)")
    elif kind == "zenoh-router":
        agent = find_binary("roughnet-agent")
        if agent is None:
            out.append(f"roughnet-agent (its `router` command is the Zenoh router) is not built "
                       f"(build it: `{INSTALL_HINT['roughnet-agent']}`)")
        elif not _agent_has_zenoh(agent):
            out.append(f"{agent} was built without zenoh, so it has no `router` command (rebuild it: "
                       f"`{INSTALL_HINT['roughnet-agent']}`)")
    else:
        out.append(f"unknown service kind {kind!r}; expected one of {', '.join(SERVICE_KINDS)}")
    return out


def preflight(sweep) -> None:
    """Check every service the sweep's runs use can run here; PreflightError naming what is missing."""
    problems: list[str] = []
    kinds: dict[str, bool] = {}  # kind -> TLS needed
    for run in sweep.runs:
        for svc in run.services:
            where = f"run {run.index} ({run.params})" if run.params else f"run {run.index}"
            if svc.host not in run.host_names():
                problems.append(f"{where}: service {svc.kind} is on host {svc.host!r}; expected one of "
                                f"{run.host_names()}")
            if svc.kind == "kafka" and int(configs.settings("kafka", svc.options)["heap"]) < configs.KAFKA_MIN_HEAP:
                problems.append(f"{where}: kafka heap {svc.options['heap']} B is too small; expected at least "
                                f"{configs.KAFKA_MIN_HEAP // configs.MIB} MiB")
            tls_needed = bool(configs.settings(svc.kind, svc.options).get("tls", False))
            kinds[svc.kind] = kinds.get(svc.kind, False) or tls_needed
    for kind, tls_needed in kinds.items():
        problems.extend(missing_for(kind, tls_needed))
    if problems:
        raise PreflightError("services cannot run here: " + "; ".join(dict.fromkeys(problems)))


# ---- starting -----------------------------------------------------------------------------


def host_addresses(topology, host: str) -> list[str]:
    """Every address ``host`` has in the topology, its first link first."""
    ns = topology.ns(host)
    addrs = [i.address for i in sorted(topology.interfaces(), key=lambda i: i.link)
             if i.host == host and i.ns == ns and i.address]
    if not addrs:
        raise ServiceError(f"host {host} has no address (it is on no link); a service host must be on a link")
    return list(dict.fromkeys(addrs))


def _fresh_dir(path: Path) -> Path:
    """An empty ``path`` (inside the run's artifacts): a retried run must not find the last attempt's data."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def kafka_topic(run: Run) -> str:
    """The run's Kafka topic; the agent uses the same rule ("/" is not allowed in Kafka topic names)."""
    return f"roughnet-{run.run_id}"


def kafka_partitions(run: Run) -> int:
    """Partitions of the run's Kafka topic (the workload's ``partitions``; 1 for other protocols)."""
    w = run.workload
    return int(w.options.get("partitions", 1)) if w is not None and w.protocol == "kafka" else 1


class _Prepared:
    """What starting one service needs: its argv, log file, and a probe (one attempt)."""

    def __init__(self, argv: list[str], log_path: Path, probe: Callable[[float], str], port: int):
        self.argv = argv
        self.log_path = log_path
        self.probe = probe  # probe(deadline) -> description; raises on a failed attempt
        self.port = port
        self.agent_options: dict[str, Any] = {}
        self.topic: str | None = None
        # reprobe(run, deadline): the probe for another run of a reused service (None: ``probe`` again)
        self.reprobe: Callable[[Run, float], str] | None = None
        self.ports: dict[str, int] = {}  # address -> port, where a service listens on several ports


def _prepare_mosquitto(svc: Service, run: Run, topology, artifacts: Path) -> _Prepared:
    binary = _which("mosquitto")
    if binary is None:
        raise ServiceError(f"mosquitto is not installed (install: `{INSTALL_HINT['mosquitto']}`)")
    s = configs.settings("mosquitto", svc.options)
    addrs = host_addresses(topology, svc.host)
    port = configs.MOSQUITTO_TLS_PORT if s["tls"] else PORTS["mosquitto"]
    tls_files = None
    if s["tls"]:
        ca, ca_key = tls.ensure_ca(artifacts.parent / "tls")  # the sweep's folder: one CA per sweep
        tls_files = tls.server_cert(ca, ca_key, artifacts / "tls", "mosquitto", addrs)
    data = artifacts / "mosquitto-data"
    if s["persistence"]:
        _fresh_dir(data)
    conf = artifacts / "mosquitto.conf"
    log_path = artifacts / "mosquitto.log"
    conf.write_text(configs.mosquitto_conf(addrs, port, s, data, log_path, tls_files))
    ns, ip = topology.ns(svc.host), addrs[0]
    ca_file = tls_files.ca if tls_files else None
    prep = _Prepared(configs.mosquitto_argv(binary, conf), log_path,
                     lambda _deadline: probes.probe_mqtt(ns, ip, port, PROBE_IO_TIMEOUT_S, ca_file), port)
    if tls_files:
        prep.agent_options["tls_ca"] = str(tls_files.ca)
    return prep


def _prepare_nats(svc: Service, run: Run, topology, artifacts: Path) -> _Prepared:
    binary = _which("nats-server")
    if binary is None:
        raise ServiceError(f"nats-server is not installed (install: `{INSTALL_HINT['nats-server']}`)")
    addrs = host_addresses(topology, svc.host)
    port = PORTS["nats"]
    data = artifacts / "nats-data"
    if configs.settings("nats", svc.options)["jetstream"]:
        _fresh_dir(data)
    argv = configs.nats_argv(binary, addrs, port, svc.options, data)
    ns, ip = topology.ns(svc.host), addrs[0]
    return _Prepared(argv, artifacts / "nats.log", lambda _d: probes.probe_nats(ns, ip, port, PROBE_IO_TIMEOUT_S),
                     port)


def _prepare_kafka(svc: Service, run: Run, topology, artifacts: Path) -> _Prepared:
    java = _which("java")
    if java is None:
        raise ServiceError(f"java is not installed (install: `{INSTALL_HINT['java']}`)")
    s = configs.settings("kafka", svc.options)
    addrs = host_addresses(topology, svc.host)
    port = PORTS["kafka"]
    data = _fresh_dir(artifacts / "kafka-data")  # StorageTool refuses an already formatted folder
    props = artifacts / "server.properties"
    props.write_text(configs.kafka_properties(addrs, port, data))
    log4j = artifacts / "kafka-log4j2.yaml"
    log4j.write_text(configs.kafka_log4j2())
    libs = kafka_libs()
    fmt = configs.kafka_java_argv(java, libs, configs.KAFKA_MIN_HEAP, log4j, "kafka.tools.StorageTool",
                                  *configs.kafka_format_args(configs.kafka_cluster_id(), props),
                                  jvm_flags=configs.KAFKA_TOOL_JVM_FLAGS)
    with open(artifacts / "kafka-format.log", "wb") as out:
        try:
            res = topology.run(svc.host, fmt, stdout=out, stderr=subprocess.STDOUT, timeout=KAFKA_FORMAT_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise ServiceError(f"formatting Kafka storage in {data} took over {KAFKA_FORMAT_TIMEOUT_S:.0f} s") from e
    if res.returncode != 0:
        tail = (artifacts / "kafka-format.log").read_text(errors="replace").strip().splitlines()[-LOG_LINES:]
        raise ServiceError(f"formatting Kafka storage (kafka.tools.StorageTool) exited {res.returncode}:\n"
                           + "\n".join(tail))
    argv = configs.kafka_java_argv(java, libs, int(s["heap"]), log4j, "kafka.Kafka", str(props))
    ns, ip = topology.ns(svc.host), addrs[0]
    topic = kafka_topic(run)

    def probe_for(for_run: Run, deadline: float) -> str:
        r = probes.probe_kafka(ns, ip, port, PROBE_IO_TIMEOUT_S, kafka_topic(for_run), kafka_partitions(for_run),
                               deadline)
        return f"Kafka cluster {r.cluster_id}: topic {r.topic} with {r.partitions} partition(s) led"

    prep = _Prepared(argv, artifacts / "kafka.log", lambda deadline: probe_for(run, deadline), port)
    prep.reprobe = probe_for
    prep.topic = topic
    prep.ports = dict(zip(addrs, configs.kafka_listener_ports(addrs, port)))
    return prep


def _prepare_zenoh_router(svc: Service, run: Run, topology, artifacts: Path) -> _Prepared:
    agent = find_binary("roughnet-agent")
    if agent is None:
        raise ServiceError(f"roughnet-agent is not built (build it: `{INSTALL_HINT['roughnet-agent']}`)")
    addrs = host_addresses(topology, svc.host)
    port = PORTS["zenoh-router"]
    ns, ip = topology.ns(svc.host), addrs[0]
    log_path = artifacts / "zenoh-router.log"  # its JSON lines (stdout) and its logs (stderr)

    def probe(_deadline: float) -> str:
        if not ready_line_seen(log_path):
            raise probes.ProbeFailed(f"no {{\"type\":\"ready\"}} line in {log_path.name} yet")
        return "ready line, " + probes.probe_tcp(ns, ip, port, PROBE_IO_TIMEOUT_S)

    return _Prepared(configs.zenoh_router_argv(str(agent), addrs, port), log_path, probe, port)


def ready_line_seen(path: Path) -> bool:
    """True when ``path`` holds a JSON line with ``"type": "ready"`` (the agent's ready line)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "ready":
            return True
    return False


_PREPARE = {
    "mosquitto": _prepare_mosquitto,
    "nats": _prepare_nats,
    "kafka": _prepare_kafka,
    "zenoh-router": _prepare_zenoh_router,
}


def _tail(path: Path, lines: int = LOG_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    rows = text.strip().splitlines()[-lines:]
    return "\n".join(rows) if rows else "(log is empty)"


def start_service(svc: Service, run: Run, topology, artifacts: Path) -> ServiceHandle:
    """Start one service and wait until its probe succeeds; ServiceError (with its log) otherwise."""
    if svc.kind not in _PREPARE:
        raise ServiceError(f"unknown service kind {svc.kind!r}; expected one of {', '.join(SERVICE_KINDS)}")
    artifacts.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    prep = _PREPARE[svc.kind](svc, run, topology, artifacts)
    t_start = time.monotonic()
    # Emptied first (a retried run starts a new log), then opened in append mode: a service
    # may also write its log file itself (mosquitto does).
    prep.log_path.write_bytes(b"")
    with open(prep.log_path, "ab") as logf:
        proc = topology.popen(svc.host, prep.argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT)
    handle = ServiceHandle(kind=svc.kind, host=svc.host, port=prep.port, proc=proc, log_path=prep.log_path,
                           topology=topology, setup_s=t_start - t0, agent_options=dict(prep.agent_options),
                           topic=prep.topic, ports=dict(prep.ports), started_by=run.run_id,
                           reprobe=prep.reprobe or (lambda _run, deadline: prep.probe(deadline)),
                           argv=list(prep.argv), probe_once=prep.probe)
    try:
        handle.probe = _wait_ready(handle, prep.probe, t_start + READY_TIMEOUT_S[svc.kind], "before it was ready", "")
    except BaseException:
        handle.stop()
        raise
    handle.ready_s = time.monotonic() - t_start
    _start_sampler(handle)
    log.info("%s ready in %.2f s (setup %.2f s): %s", handle.describe(), handle.ready_s, handle.setup_s,
             handle.probe)
    return handle


def start_again(handle: ServiceHandle) -> str:
    """Start a service whose process an event ended, as it was started (same argv, configuration, data folder
    and log, appended), and wait for its probe; its description. ServiceError when it does not come back."""
    if handle.alive():
        raise ServiceError(f"{handle.describe()} is still running; expected it stopped or killed first")
    if handle.sampler is not None:
        handle.sampler.stop()
        handle.cpu_before_s += handle.sampler.snapshot()["cpu_s"]
    with open(handle.log_path, "ab") as logf:
        proc = handle.topology.popen(handle.host, handle.argv, stdin=subprocess.DEVNULL, stdout=logf,
                                     stderr=subprocess.STDOUT)  # fmt: skip
    handle.proc = proc
    handle.restarts += 1
    assert handle.probe_once is not None
    handle.probe = _wait_ready(handle, handle.probe_once, time.monotonic() + READY_TIMEOUT_S[handle.kind],
                               "when started again", " of starting again")
    _start_sampler(handle)
    return handle.probe


def _wait_ready(handle: ServiceHandle, probe: Callable[[float], str], deadline: float, exited: str,
                within: str) -> str:
    """Probe ``handle``'s process until ``probe`` succeeds (its description) or the deadline; ServiceError naming
    the last probe and the log's tail when the process exits, the probe is fatal or time runs out."""
    kind, host, proc = handle.kind, handle.host, handle.proc
    last = "no attempt finished"
    while True:
        if proc.poll() is not None:
            raise ServiceError(f"{kind} on host {host} exited with code {proc.returncode} {exited} (last probe: "
                               f"{last}); its log ({handle.log_path}):\n{handle.log_tail(LOG_LINES)}")
        try:
            return probe(deadline)
        except probes.ProbeFatal as e:
            raise ServiceError(f"{kind} on host {host}: {e}") from e
        except (OSError, ServiceError) as e:
            last = f"{type(e).__name__}: {e}" if isinstance(e, OSError) else str(e)
        if time.monotonic() > deadline:
            raise ServiceError(f"{kind} on host {host} was not ready within {READY_TIMEOUT_S[kind]:g} s{within} "
                               f"(last probe: {last}); its log ({handle.log_path}):\n{handle.log_tail(LOG_LINES)}")
        time.sleep(PROBE_INTERVAL_S)


def _start_sampler(handle: ServiceHandle) -> None:
    """CPU and RSS sampling of the service's process (in a pod, backends.kubernetes, through the pod's /proc)."""
    sampler_for = getattr(handle.topology, "usage_sampler", None)
    handle.sampler = sampler_for(handle.proc) if sampler_for else UsageSampler(handle.proc.pid)
    handle.sampler.start()


def start_services(run: Run, topology, artifacts: Path) -> list[ServiceHandle]:
    """Start every service of ``run`` in order; on a failure stop those started and raise ServiceError."""
    handles: list[ServiceHandle] = []
    try:
        for svc in run.services:
            handles.append(start_service(svc, run, topology, artifacts))
    except BaseException:
        stop_services(handles)
        raise
    return handles


def stop_services(handles: Iterable[ServiceHandle]) -> dict[str, dict]:
    """Stop every service (last started first); usage per service, keyed "<kind>@<host>".  Never raises
    for a service that already died."""
    out: dict[str, dict] = {}
    for h in reversed(list(handles)):
        try:
            out[f"{h.kind}@{h.host}"] = h.stop()
        except Exception as e:  # noqa: BLE001 - stopping the others matters more
            log.error("stopping %s failed: %s", h.describe(), e)
            out[f"{h.kind}@{h.host}"] = {**h.usage(), "stopped": False, "error": str(e)}
    return out


def check_alive(handles: Iterable[ServiceHandle]) -> str | None:
    """None when every service still runs; else "<kind> on host <host> died (exit N): <last log lines>".
    Services stopped by ``stop_services`` are not counted as dead."""
    for h in handles:
        if not h.stopped and not h.alive():
            return (f"{h.kind} on host {h.host} died (exit {h.proc.returncode}); last lines of "
                    f"{h.log_path.name}:\n{h.log_tail(LOG_LINES)}")
    return None
