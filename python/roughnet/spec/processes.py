"""The ``[[process]]`` tables: the user's own programs (a command or an OCI image) on a host of the scenario.

This module owns the shape of a process declaration (docs/applications.md): what runs (``command``,
or ``image`` with ``args``/``entrypoint``/``workdir``), as whom, with which environment and files,
when it starts (``start``, ``after``), when it counts as ready (``ready``), when and how it is stopped
(``stop``, ``stop_signal``, ``grace``), the final state it is expected to reach (``expect``) and the
numbers it offers (``metrics``); the rules between these keys (``check_processes``); and the
conversion into ``runspec.Process`` in base units (``resolve_process``).  Files are read at plan time
(``check_files``: they must exist); whether a command or an image can run on this machine is
preflight's (``roughnet.apps``).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

from pydantic import Field

from .. import runspec, units
from . import kinds
from .problems import Problem
from .table import HOST, Table, field

PROCESS_NAME = kinds.name(r"^[a-z][a-z0-9_-]{0,23}$", "a name of lowercase letters, digits, '_' and '-' (at most 24 "
                          "characters, starting with a letter), like \"gateway\"")  # fmt: skip
#: Signals a process may be stopped with, or expected to die of.
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2")
_SIGNAL = kinds.choice(SIGNALS)
_ARGV = kinds.name_list(kinds.text(), 1, "a non-empty list of strings (an argv: program, then arguments)")
_ARGS = kinds.name_list(kinds.text(), 0, "a list of strings")
_FILES = kinds.name_list(kinds.text("a path relative to the scenario file"), 1,
                         "a list of paths relative to the scenario file")
_USER = kinds.name(r"^([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10}(:[0-9]{1,10})?)$",
                   'a user name like "nobody", "root", or a numeric "uid" or "uid:gid"')
_PORT = kinds.integer(1, 65535, "a TCP port from 1 to 65535")
_UNIT = kinds.choice(("ns", "us", "ms", "s"))
#: Readiness timeout when ``ready`` gives none.
READY_TIMEOUT = "30 s"
#: Time between the stop signal and SIGKILL when ``grace`` is unset.
GRACE = "5 s"


class ReadyTable(Table):
    """``ready = { ... }``: when the process counts as ready (one of `tcp`, `log`, `delay`)."""

    tcp: _PORT.type() = field("Ready when a TCP connection to this port of the process's host (from inside "
                              "the host) is accepted.", None)
    log: kinds.text("a regular expression (Python syntax)").type() = field(
        "Ready when a line of the process's stdout or stderr matches this regular expression (Python syntax).", None)
    delay: kinds.duration().type() = field("Ready this long after it started: " + kinds.DURATION + ".", None)
    timeout: kinds.duration().type() = field(
        "A process not ready this long after it started fails the run: " + kinds.DURATION + ". Unset: "
        + READY_TIMEOUT + ".", None)


class ExpectTable(Table):
    """``expect = { ... }``: the final state the process must reach (one of `exit`, `running`, `signal`)."""

    exit: kinds.integer(0, 255, "an exit code from 0 to 255").type() = field(
        "It exits by itself (before its stop time, or the run's end) with this code.", None)
    running: kinds.boolean().type() = field(
        "`running = true`: it is still running when roughnet stops it (at `stop` or the run's end), and then "
        "ends by the stop signal (exit 0, or death by that signal) within `grace`.", None)
    signal: _SIGNAL.type() = field("It dies of this signal (sent by an event, by roughnet at `stop`, or by "
                                   "itself).", None)


class MetricsTable(Table):
    """``metrics = { ... }``: numbers the process offers itself (one of `json_lines`, `samples`, `prometheus`)."""

    json_lines: kinds.text('"stdout" or a file name in its working folder').type() = field(
        "One JSON object per line, from its stdout (\"stdout\") or a file it writes in its working folder: "
        "numeric keys are named values, `t` a time in seconds since the Unix epoch.", None)
    latency: kinds.text("a key of the JSON lines").type() = field(
        "With `json_lines`: the key whose values are latency samples (in `unit`).", None)
    samples: kinds.text("a file name in its working folder").type() = field(
        "A file it writes in its working folder with one number per line (a latency sample, in `unit`).", None)
    unit: _UNIT.type() = field('Unit of the latency samples: "ns", "us", "ms" or "s". Unset: "ms".', None)
    prometheus: kinds.text('a URL like "http://:9100/metrics"').type() = field(
        "A Prometheus text endpoint scraped every series interval (an empty host: the process's own host).", None)


class ProcessTable(Table):
    """``[[process]]``: one of the user's programs, run in a host's network namespace (docs/applications.md)."""

    name: PROCESS_NAME.type() = field("Name of the process, unique in the scenario: " + PROCESS_NAME.expected + ".")
    host: HOST.type() = field("Host whose network namespace runs it.")
    command: _ARGV.type() = field(
        "What to run: an argv list, no shell (write [\"sh\", \"-c\", \"...\"] to ask for one). A program name "
        "without '/' is looked up in PATH (roughnet's Python environment first); one with '/' is relative to the "
        "working folder. Not with `image`.", None)
    image: kinds.text("a path to an OCI image archive or OCI layout directory").type() = field(
        "An OCI image to run instead of a command: an image archive (`docker save`, `podman save`, "
        "`skopeo copy ... oci-archive:`) or an OCI layout directory, relative to the scenario file; run by runc "
        "in the host's network namespace with the image's ENTRYPOINT, CMD, Env and WorkingDir.", None)
    image_ref: kinds.text("an image reference, e.g. registry.example/team/app:1.4").type() = field(
        "Kubernetes backend only: an image the cluster pulls itself (one you pushed to a registry it reaches) "
        "instead of an archive here; its ENTRYPOINT and CMD cannot be read from here, so `entrypoint` is "
        "required (and `args` optional). Not with `command` or `image`.", None)
    args: _ARGS.type() = field("Image only: arguments replacing the image's CMD.", None)
    entrypoint: _ARGV.type() = field("Image only: replaces the image's ENTRYPOINT.", None)
    workdir: kinds.text("an absolute path inside the image").type() = field(
        "Image only: the working directory inside the container. Unset: the image's WorkingDir.", None)
    env: dict[str, str] | None = Field(None, description="Environment variables added to (and overriding) the "
                                       "default environment (docs/applications.md).")
    files: _FILES.type() = field(
        "Files copied into the process's working folder before it starts, relative to the scenario file.", None)
    user: _USER.type() = field(
        'Who runs it: a user name or numeric uid[:gid]; "root" only when written. Unset: the user who ran '
        "sudo (SUDO_UID), else \"nobody\".", None)
    start: kinds.duration().type() = field(
        "When it starts, after t0 (or after `after` is ready): " + kinds.DURATION + ". Unset: 0 s.", None)
    after: kinds.text("a process name or a service kind").type() = field(
        "Start only once this process (or service kind) of the scenario is ready; `start` then counts from "
        "there.", None)
    ready: ReadyTable | None = Field(None, description="When it counts as ready (an inline table, see `ready` "
                                     "below). Unset: as soon as it started.")
    stop: kinds.duration().type() = field(
        "When roughnet stops it, after t0: " + kinds.DURATION + ". Unset: at the run's end (a process expected "
        "to exit is waited for until the run's timeout).", None)
    stop_signal: _SIGNAL.type() = field("Signal that stops it. Unset: SIGTERM.", None)
    grace: kinds.duration().type() = field(
        "Time between the stop signal and SIGKILL: " + kinds.DURATION + ". Unset: " + GRACE + ".", None)
    expect: ExpectTable | None = Field(None, description="The final state it must reach (an inline table, see "
                                       "`expect` below); a mismatch fails the run. Unset: it exits by itself with "
                                       "code 0 (the run waits for it), or, with a `stop` time, it ends by its stop "
                                       "signal (exit 0, the signal, or 128 + the signal's number).")
    metrics: MetricsTable | None = Field(None, description="Numbers the process offers itself (an inline table, "
                                         "see `metrics` below).")


def _one_of(table: Table | None, keys: tuple[str, ...]) -> list[str]:
    return [k for k in keys if table is not None and getattr(table, k) is not None]


def check_processes(procs: list[ProcessTable], hosts: set[str] | None, services: set[str],
                    problems: list[Problem], timeout: str | None = None) -> None:
    """Rules between the keys of every [[process]] (values with placeholders are skipped); ``timeout``: the
    scenario's, which `start` and `stop` must come before."""
    names: dict[str, int] = {}
    limit = units.parse_duration_ns(timeout) if timeout is not None else None
    for i, p in enumerate(procs):
        path = f"process[{i}]"
        for key in ("start", "stop"):
            v = getattr(p, key)
            if limit is not None and v is not None and not kinds.has_placeholder(v) and \
                    units.parse_duration_ns(v) >= limit:
                problems.append(Problem(f"{path}.{key}", f"not before the end of the run ([scenario] timeout "
                                        f"{timeout})", "a time within the run", v))
        if isinstance(p.name, str) and not kinds.has_placeholder(p.name):
            if p.name in names:
                problems.append(Problem(f"{path}.name", f"same name as process[{names[p.name]}]",
                                        "a name unique among the processes", p.name))
            names[p.name] = i
        if hosts is not None and not kinds.has_placeholder(p.host) and p.host not in hosts:
            problems.append(Problem(f"{path}.host", "no host of this name", "one of " + ", ".join(sorted(hosts)),
                                    p.host))
        given = _one_of(p, ("command", "image", "image_ref"))
        if len(given) != 1:
            problems.append(Problem(path, "needs exactly one of `command`, `image` and `image_ref`",
                                    "command = [\"program\", \"arg\", ...] or image = \"file.oci.tar\" (or, on the "
                                    "kubernetes backend, image_ref = \"registry/name:tag\")",
                                    ", ".join(given) or "neither"))
        if p.image_ref is not None and p.entrypoint is None:
            problems.append(Problem(f"{path}.entrypoint", "missing for `image_ref`", "entrypoint = [\"/path/in/the/"
                                    "image\", ...] (roughnet cannot read a pulled image's ENTRYPOINT and CMD)", None))
        if p.command is not None:
            for key in ("args", "entrypoint", "workdir"):
                if getattr(p, key) is not None:
                    problems.append(Problem(f"{path}.{key}", "only for an image", "`image`, or leave it out of "
                                            "a `command` process", getattr(p, key)))
        if p.workdir is not None and not kinds.has_placeholder(p.workdir) and not p.workdir.startswith("/"):
            problems.append(Problem(f"{path}.workdir", "not an absolute path", "a path starting with '/'", p.workdir))
        for k, v in (p.env or {}).items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                problems.append(Problem(f"{path}.env.{k}", "not an environment variable name",
                                        "letters, digits and '_', not starting with a digit", k))
            if not isinstance(v, str):
                problems.append(Problem(f"{path}.env.{k}", "not a string", "a string", v))
        seen_files: dict[str, int] = {}
        for j, f in enumerate(p.files or []):
            if isinstance(f, str) and not kinds.has_placeholder(f) and (f.startswith("/") or ".." in Path(f).parts):
                problems.append(Problem(f"{path}.files[{j}]", "not inside the scenario's folder",
                                        "a path relative to the scenario file, without '..'", f))
            elif isinstance(f, str) and not kinds.has_placeholder(f):
                name = Path(f).name
                if name in seen_files:  # both would be copied to the same name in the working folder
                    problems.append(Problem(f"{path}.files[{j}]", f"same file name as files[{seen_files[name]}]",
                                            "files with distinct names (each is copied by its name into the "
                                            "working folder)", f))
                seen_files.setdefault(name, j)
        _check_ready(p, path, problems)
        _check_expect(p, path, problems)
        _check_metrics(p, path, problems)
    for i, p in enumerate(procs):
        if p.after is None or kinds.has_placeholder(p.after):
            continue
        if p.after not in names and p.after not in services:
            problems.append(Problem(f"process[{i}].after", "no process or service of this name",
                                    "one of " + (", ".join(sorted([*names, *services])) or "(none)"), p.after))
        elif p.after == p.name:
            problems.append(Problem(f"process[{i}].after", "names the process itself", "another process", p.after))
    _check_cycles(procs, names, problems)


def _check_ready(p: ProcessTable, path: str, problems: list[Problem]) -> None:
    if p.ready is None:
        return
    given = _one_of(p.ready, ("tcp", "log", "delay"))
    if len(given) != 1:
        problems.append(Problem(f"{path}.ready", "needs exactly one of tcp, log, delay",
                                'ready = { tcp = 1883 }, { log = "connected" } or { delay = "2 s" }',
                                ", ".join(given) or "none"))
    if p.ready.log is not None and not kinds.has_placeholder(p.ready.log):
        try:
            re.compile(p.ready.log)
        except re.error as e:
            problems.append(Problem(f"{path}.ready.log", f"not a regular expression ({e})",
                                    "a Python regular expression", p.ready.log))


def _check_expect(p: ProcessTable, path: str, problems: list[Problem]) -> None:
    if p.expect is None:
        return
    given = _one_of(p.expect, ("exit", "running", "signal"))
    if len(given) != 1:
        problems.append(Problem(f"{path}.expect", "needs exactly one of exit, running, signal",
                                'expect = { exit = 0 }, { running = true } or { signal = "SIGINT" }',
                                ", ".join(given) or "none"))
    if p.expect.running is False:
        problems.append(Problem(f"{path}.expect.running", "false says nothing",
                                "running = true, or expect = { exit = N }", False))


def _check_metrics(p: ProcessTable, path: str, problems: list[Problem]) -> None:
    m = p.metrics
    if m is None:
        return
    given = _one_of(m, ("json_lines", "samples", "prometheus"))
    if len(given) != 1:
        problems.append(Problem(f"{path}.metrics", "needs exactly one of json_lines, samples, prometheus",
                                'metrics = { json_lines = "stdout" }, { samples = "rtt.txt" } or '
                                '{ prometheus = "http://:9100/metrics" }', ", ".join(given) or "none"))
    if m.latency is not None and m.json_lines is None:
        problems.append(Problem(f"{path}.metrics.latency", "only with json_lines", "json_lines = ...", m.latency))
    if m.unit is not None and m.json_lines is None and m.samples is None:
        problems.append(Problem(f"{path}.metrics.unit", "only with json_lines or samples", "leave it out", m.unit))
    for key in ("json_lines", "samples"):
        v = getattr(m, key)
        if isinstance(v, str) and not kinds.has_placeholder(v) and v != "stdout" and (
                v.startswith("/") or ".." in Path(v).parts or v == ""):
            problems.append(Problem(f"{path}.metrics.{key}", "not a file of the working folder",
                                    'a relative file name like "rtt.txt"' + (' or "stdout"' if key == "json_lines"
                                                                              else ""), v))
    if key_value := m.prometheus:
        if not kinds.has_placeholder(key_value) and not re.fullmatch(r"http://[A-Za-z0-9.\-]*:\d{1,5}(/\S*)?",
                                                                     key_value):
            problems.append(Problem(f"{path}.metrics.prometheus", "not a plain http URL with a port",
                                    '"http://:9100/metrics" (an empty host: the process\'s own host)', key_value))


def _check_cycles(procs: list[ProcessTable], names: dict[str, int], problems: list[Problem]) -> None:
    for i, p in enumerate(procs):
        seen = {p.name}
        cur = p
        while cur.after in names:
            nxt = procs[names[cur.after]]
            if nxt.name in seen:
                problems.append(Problem(f"process[{i}].after", "the processes wait for each other in a circle",
                                        "an order that starts somewhere", p.after))
                break
            seen.add(nxt.name)
            cur = nxt


def content_digest(path: Path) -> str:
    """sha256 of a file, or of an OCI layout directory's index.json (which names every blob by digest)."""
    import hashlib

    target = path / "index.json" if path.is_dir() else path
    h = hashlib.sha256()
    try:
        with open(target, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return ""
    return "sha256:" + h.hexdigest()


def resolve_process(p: ProcessTable, base: Path) -> runspec.Process:
    """One declaration in base units (``base``: the scenario file's folder; file paths become absolute)."""
    ready: dict[str, Any] = {}
    if p.ready is not None:
        if p.ready.tcp is not None:
            ready["tcp"] = p.ready.tcp
        if p.ready.log is not None:
            ready["log"] = p.ready.log
        if p.ready.delay is not None:
            ready["delay_ns"] = units.parse_duration_ns(p.ready.delay)
    expect: dict[str, Any] | None = None
    if p.expect is not None:
        expect = {k: getattr(p.expect, k) for k in ("exit", "running", "signal") if getattr(p.expect, k) is not None}
    metrics: dict[str, Any] | None = None
    if p.metrics is not None:
        metrics = {k: v for k, v in p.metrics.model_dump(exclude_none=True).items()}
        if "json_lines" in metrics or "samples" in metrics:
            metrics.setdefault("unit", "ms")
    return runspec.Process(
        name=p.name,
        host=p.host,
        command=tuple(p.command or ()),
        image=p.image,
        image_ref=p.image_ref,
        args=tuple(p.args) if p.args is not None else None,
        entrypoint=tuple(p.entrypoint) if p.entrypoint is not None else None,
        workdir=p.workdir,
        env=dict(p.env or {}),
        files=tuple(p.files or ()),
        base=str(base.resolve()),
        # what runs is part of the run: a changed script or a rebuilt image is another run (run id)
        digests={f: content_digest(base / f) for f in [*(p.files or []), *([p.image] if p.image else [])]},
        user=p.user,
        start_ns=units.parse_duration_ns(p.start) if p.start is not None else 0,
        after=p.after,
        ready=ready,
        ready_timeout_ns=units.parse_duration_ns(p.ready.timeout if p.ready is not None and p.ready.timeout
                                                 else READY_TIMEOUT),
        stop_ns=units.parse_duration_ns(p.stop) if p.stop is not None else None,
        stop_signal=p.stop_signal or "SIGTERM",
        grace_ns=units.parse_duration_ns(p.grace or GRACE),
        expect=expect,
        metrics=metrics,
    )


def check_files(procs: list[ProcessTable], base: Path) -> list[Problem]:
    """Every file and image a process names exists (read at plan time, like trace files)."""
    problems: list[Problem] = []
    for i, p in enumerate(procs):
        for j, f in enumerate(p.files or []):
            path = base / f
            if not path.is_file():
                problems.append(Problem(f"process[{i}].files[{j}]", "no such file" if not path.exists()
                                        else "not a regular file", f"a file relative to the scenario file "
                                        f"(looked for {path})", f))
        if p.image is not None:
            path = base / p.image
            if not path.exists():
                problems.append(Problem(f"process[{i}].image", "no such file or directory",
                                        f"an OCI image archive or layout directory (looked for {path})", p.image))
    return problems


def signal_number(name: str) -> int:
    return int(getattr(signal, name))
