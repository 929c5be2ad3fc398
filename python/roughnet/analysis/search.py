"""The highest sustainable load: a bracketing search over one swept key, with repeats at the boundary.

Owns the search and what "sustainable" means, not the running of runs (the caller hands
in a ``probe`` that runs a load and returns its judged runs; ``cli.search`` runs them
with the ordinary runner and store):

- ``search``: climb from the lowest load by a factor (one run a load) until a run
  fails or the highest load passes; then confirm the last passing load with ``repeats``
  runs (walking back down while it does not hold) and bisect (geometric midpoint)
  between the highest load whose ``repeats`` runs all passed and the lowest load where a
  run failed, every midpoint run ``repeats`` times, until the two are within
  ``precision`` of each other;
- ``Criteria`` / ``judge``: a run passes when it is ok, not invalid, and within the
  limits given (message loss, latency p99, share of sends the protocol held back);
  suspect runs pass but are counted (at the boundary they say the machine, not the
  protocol, may be what gave out);
- ``probe_sweep``: the scenario file with the searched key set to one load, the other
  swept keys fixed to one point, ``repeat`` set: an ordinary ``runspec.Sweep`` (its sweep
  id is stable for that load, so an interrupted search continues where it stopped);
- ``load_kind`` / ``load_label``: loads as quantities ("2500 msg/s", "12.5 Mbit/s").

No I/O here but reading the scenario file.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roughnet.errors import SpecError
from roughnet.report import fmt

#: Probes one search may make (runs: probes x repeats at most), a guard against a runaway search.
MAX_PROBES = 40


# ------------------------------------------------------------------ judging runs


@dataclass(frozen=True)
class Criteria:
    """Limits a run must keep to count as sustaining its load (None: not checked)."""

    max_loss: float | None = 0.01  # fraction of messages
    max_p99_us: float | None = None
    max_held: float | None = 0.05  # sched_held_fraction: sends the protocol held back more than 1 ms

    def describe(self) -> str:
        parts = ["status ok and not invalid"]
        if self.max_loss is not None:
            parts.append(f"message loss <= {fmt.value('loss_ratio', self.max_loss)}")
        if self.max_p99_us is not None:
            parts.append(f"latency p99 <= {fmt.value('lat_p99_us', self.max_p99_us)}")
        if self.max_held is not None:
            parts.append(f"sends held back by the protocol <= {fmt.value('sched_held_fraction', self.max_held)}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Outcome:
    run_id: str
    repeat: int
    ok: bool
    suspect: bool
    reasons: tuple[str, ...]
    metrics: dict[str, Any]
    broken: tuple[tuple[str, str, float, float], ...] = ()  # (name, column, value, limit) of each limit broken


def judge(record: dict[str, Any], c: Criteria) -> Outcome:
    """Does this stored run sustain its load, and if not, why (every limit it broke)."""
    m = record.get("metrics") or {}
    reasons: list[str] = []
    broken: list[tuple[str, str, float, float]] = []
    if record.get("status") != "ok":
        reasons.append(f"failed: {record.get('failure_reason') or 'no reason recorded'}")
    elif record.get("validity") == "invalid":
        reasons.append("invalid: " + ("; ".join(record.get("validity_reasons") or []) or "no reason recorded"))
    else:
        checks = (("loss_ratio", c.max_loss, "message loss"), ("lat_p99_us", c.max_p99_us, "latency p99"),
                  ("sched_held_fraction", c.max_held, "sends held back"))  # fmt: skip
        for column, limit, name in checks:
            v = m.get(column)
            if limit is not None and v is not None and v > limit:
                reasons.append(f"{name} {fmt.value(column, v)} > {fmt.value(column, limit)}")
                broken.append((name, column, float(v), float(limit)))
    keep = {k: m.get(k) for k in ("loss_ratio", "lat_p50_us", "lat_p99_us", "throughput_bps", "sched_held_fraction")}
    return Outcome(str(record.get("run_id")), int(record.get("repeat") or 0), not reasons,
                   record.get("validity") == "suspect", tuple(reasons), keep, tuple(broken))


# ------------------------------------------------------------------ the search


@dataclass
class Probe:
    """One load and its judged runs (as many as asked for so far)."""

    load: float  # base units of the load's kind (msg/s, bit/s, or a plain number)
    label: str  # as put into the scenario
    sweep_id: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and all(o.ok for o in self.outcomes)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def why_not(self) -> str:
        """Why the load is not sustained, one item per limit: "message loss up to 3.05 % > 1.00 % (3 of 3 runs)"."""
        n = len(self.outcomes)
        items: dict[str, str] = {}
        worst: dict[str, tuple[str, float, float, int]] = {}
        for o in self.failures:
            if not o.broken:
                for r in o.reasons:  # failed or invalid
                    items.setdefault(r, r)
            for name, column, v, limit in o.broken:
                _, w, _, k = worst.get(name, (column, v, limit, 0))
                worst[name] = (column, max(w, v), limit, k + 1)
        for name, (column, w, limit, k) in worst.items():
            items[name] = (f"{name} {'up to ' if k > 1 else ''}{fmt.value(column, w)} > {fmt.value(column, limit)} "
                           f"({k} of {n} runs)")
        return "; ".join(items.values())

    def to_dict(self) -> dict[str, Any]:
        return {"load": self.load, "label": self.label, "sweep_id": self.sweep_id, "passed": self.passed,
                "runs": [{"run_id": o.run_id, "repeat": o.repeat, "ok": o.ok, "suspect": o.suspect,
                          "reasons": list(o.reasons), "metrics": o.metrics} for o in self.outcomes]}  # fmt: skip


@dataclass
class SearchResult:
    probes: list[Probe]  # in the order they were made
    best: Probe | None  # the highest load whose ``repeats`` runs all passed
    first_failing: Probe | None  # the lowest load above it where a run failed
    stop: str  # "bracketed", "highest load sustained", "lowest load not sustained", "probe limit"
    repeats: int
    precision: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "stop": self.stop, "repeats": self.repeats, "precision": self.precision,
            "best": None if self.best is None else self.best.to_dict(),
            "first_failing": None if self.first_failing is None else self.first_failing.to_dict(),
            "probes": [p.to_dict() for p in self.probes],
        }  # fmt: skip


#: probe(load, runs) -> the Probe of that load with at least ``runs`` judged runs.
ProbeFn = Callable[[float, int], Probe]


def search(probe: ProbeFn, low: float, high: float, *, factor: float = 2.0, precision: float = 0.1,
           repeats: int = 3, max_probes: int = MAX_PROBES) -> SearchResult:
    """Bracket the highest sustainable load between ``low`` and ``high`` (see the module docstring)."""
    if not 0 < low < high:
        raise SpecError(f"search range {low:g} to {high:g}: expected 0 < lowest < highest load")
    if factor <= 1.0:
        raise SpecError(f"--factor {factor:g}: expected more than 1")
    if precision <= 0.0:
        raise SpecError(f"--precision {precision:g}: expected more than 0")
    if repeats < 1:
        raise SpecError(f"--repeats {repeats}: expected 1 or more")
    made: dict[float, Probe] = {}
    order: list[Probe] = []

    def run(load: float, n: int) -> Probe:
        p = probe(load, n)
        if p.load in made:  # more runs of a load probed before: the new probe replaces the old one
            order[order.index(made[p.load])] = p
        else:
            order.append(p)
        made[p.load] = p
        return p

    def result(best: Probe | None, failing: Probe | None, stop: str) -> SearchResult:
        return SearchResult(order, best, failing, stop, repeats, precision)

    # climb: one run a load
    climbed: list[Probe] = []
    failing: Probe | None = None
    x = low
    while True:
        p = run(x, 1)
        if not p.passed:
            failing = p
            break
        climbed.append(p)
        if p.load >= high or len(made) >= max_probes:
            break
        x = min(x * factor, high)
    # confirm the highest passing load with repeats, walking back down while it fails
    best: Probe | None = None
    while climbed:
        p = run(climbed.pop().load, repeats)
        if p.passed:
            best = p
            break
        failing = p
    if best is None:
        return result(None, failing, "lowest load not sustained")
    if failing is None:
        return result(best, None, "highest load sustained" if best.load >= high else "probe limit")
    # bisect between best (repeats passed) and failing (a run failed)
    while failing.load / best.load > 1.0 + precision:
        if len(made) >= max_probes:
            return result(best, failing, "probe limit")
        mid = math.sqrt(best.load * failing.load)
        p = run(mid, repeats)
        if p.load in (best.load, failing.load):  # the label's rounding cannot split them further
            break
        if p.passed:
            best = p
        else:
            failing = p
    return result(best, failing, "bracketed")


# ------------------------------------------------------------------ loads as quantities


_KIND_UNITS = {"msg_rate": "msg/s", "rate": "bit/s", "number": ""}


def load_kind(value: Any, what: str) -> tuple[str, float]:
    """(kind, value in base units) of a load as written: "2000 msg/s", "10 Mbit/s" or a number."""
    parsed = fmt.axis_value(value)
    if parsed is None or parsed[0] not in _KIND_UNITS:
        raise SpecError(f"{what} is {value!r}; expected a message rate (\"2000 msg/s\"), a bit rate "
                        "(\"10 Mbit/s\") or a number")
    return parsed


def load_label(kind: str, value: float) -> str | int | float:
    """A load to put into the scenario, rounded to 3 significant digits, in the kind's unit."""
    v = float(f"{value:.3g}")
    if kind == "number":
        return int(v) if v.is_integer() else v
    if kind == "rate":
        for step, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
            if v >= step:
                return f"{v / step:g} {unit}"
        return f"{v:g} bit/s"
    return f"{v:g} {_KIND_UNITS[kind]}"


# ------------------------------------------------------------------ the scenario of one probe


def read_data(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise SpecError(f"{path}: cannot read the scenario ({e}); expected a scenario file `roughnet validate` "
                        "accepts") from None


def other_points(data: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    """The combinations of the other swept keys (each a dict key -> value as written), in file order."""
    import itertools

    sweep = data.get("sweep") or {}
    if key not in sweep:
        keys = ", ".join(k for k in sweep if k != "exclude") or "none"
        raise SpecError(f"{path}: [sweep] has no key {key!r} to search; expected one of its keys ({keys}), "
                        f"used as the load, e.g. rate = \"${{{key}}}\" in [workload]")
    others = {k: v for k, v in sweep.items() if k not in (key, "exclude")}
    return [dict(zip(others, combo, strict=True)) for combo in itertools.product(*others.values())]


def probe_sweep(path: Path, key: str, load: Any, repeats: int, fixed: dict[str, Any]):
    """The ``runspec.Sweep`` of one probe: ``key`` = [load], every other swept key = [its ``fixed`` value],
    ``repeat = repeats``."""
    from roughnet.plan import sweep_from_scenario
    from roughnet.spec.load import validate_data
    from roughnet.spec.problems import ScenarioError
    from roughnet.spec.schedule import expand_file_axes

    data = read_data(path)
    sweep = dict(data.get("sweep") or {})
    sweep[key] = [load]
    for k, v in fixed.items():
        sweep[k] = [v]
    data["sweep"] = sweep
    data["scenario"] = {**(data.get("scenario") or {}), "repeat": repeats}
    data, files, problems = expand_file_axes(data, Path(path).parent)
    if problems:
        raise ScenarioError(str(path), problems)
    model = validate_data(data, str(path))
    model._file_axes = files
    return sweep_from_scenario(model, str(path))
