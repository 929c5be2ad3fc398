"""The impairments of one direction: which keys apply, and how they become ``runspec.Direction`` fields.

This module owns the merge of a link's impairment keys with its ``[link.forward]`` /
``[link.reverse]`` table (key by key; ``loss`` and ``loss_model`` are one choice, so a
direction table that sets either replaces both of the link's), the same merge along a
``[[link.schedule]]`` (each entry patches the state the entries before it left), and
the conversion of every impairment key into ``runspec.Direction`` fields in base units
(``DIRECTION_FIELDS``, tied to the model's keys by an assertion so that no key is
silently ignored).  It raises nothing for bad input: values were checked before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import runspec, units
from .kinds import parse_queue, to_base
from .model import DIRECTION_KEYS, DirectionTable
from .wire import LossModelTable, loss_model_json

#: Keys that choose the loss of a direction: setting one replaces the other.
LOSS_KEYS = ("loss", "loss_model")


def _queue(value: str) -> dict[str, Any]:
    packets, size = parse_queue(value)
    return {"queue_packets": packets, "queue_bytes": size}


def _base(key: str) -> Callable[[Any], Any]:
    """The model's own conversion of ``key`` into base units (its ``ToBase`` metadata)."""
    metadata = DirectionTable.model_fields[key].metadata
    return lambda v: to_base(metadata, v)


def _loss_model(table: LossModelTable) -> dict[str, Any]:
    return {"loss_model": loss_model_json(table)}


#: Scenario key -> Direction fields.  A key missing here would be silently ignored, so
#: the assertion below ties this table to the model's direction keys.
DIRECTION_FIELDS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "rate": lambda v: {"rate_bps": units.parse_rate_bps(v)},
    "delay": lambda v: {"delay_ns": units.parse_duration_ns(v)},
    "jitter": lambda v: {"jitter_ns": units.parse_duration_ns(v)},
    "loss": lambda v: {"loss": units.parse_fraction(v)},
    "queue": _queue,
    "jitter_distribution": lambda v: {"jitter_dist": v},
    "jitter_correlation": lambda v: {"jitter_correlation": _base("jitter_correlation")(v)},
    "reorder_by_jitter": lambda v: {"allow_reorder": v},
    "reorder": lambda v: {"reorder": units.parse_fraction(v)},
    "reorder_gap": lambda v: {"reorder_gap": v},
    "loss_model": _loss_model,
    "duplicate": lambda v: {"duplicate": units.parse_fraction(v)},
    "corrupt": lambda v: {"corrupt": units.parse_fraction(v)},
    "overhead": lambda v: {"overhead_bytes": units.parse_size_bytes(v)},
    "capacity_trace": lambda v: {"capacity_trace": v},  # as written; plan makes it absolute (spec.capacity)
}
assert set(DIRECTION_FIELDS) == set(DIRECTION_KEYS), "spec.directions.DIRECTION_FIELDS is out of date"


def patch(values: dict[str, Any], table: DirectionTable, keys: tuple[str, ...] = DIRECTION_KEYS) -> dict[str, Any]:
    """``values`` with every key ``table`` sets replaced (``loss`` / ``loss_model`` as one choice)."""
    out = dict(values)
    given = [key for key in keys if getattr(table, key) is not None]
    if any(key in LOSS_KEYS for key in given):
        for key in LOSS_KEYS:
            out[key] = None
    for key in given:
        out[key] = getattr(table, key)
    return out


def merged_direction(link: DirectionTable, override: DirectionTable | None) -> dict[str, Any]:
    """The impairment keys of one direction: the link's values overridden by the direction table's."""
    values = {key: getattr(link, key) for key in DIRECTION_KEYS}
    return patch(values, override) if override is not None else values


def fields_of(values: dict[str, Any]) -> dict[str, Any]:
    """``runspec.Direction`` fields of merged impairment keys (unset keys give no field)."""
    fields: dict[str, Any] = {}
    for key, value in values.items():
        if value is not None:
            fields.update(DIRECTION_FIELDS[key](value))
    return fields


def direction(link: DirectionTable, override: DirectionTable | None) -> runspec.Direction:
    """One direction of a link: the link's impairments, overridden key by key by ``override``."""
    return runspec.Direction(**fields_of(merged_direction(link, override)))


#: Direction fields as wire-core's ``DirectionConfig`` JSON names them, where they differ.
_JSON_NAMES = {"loss_model": "loss"}


def direction_config_json(d: runspec.Direction, mtu: int | None) -> dict[str, Any]:
    """wire-core's ``DirectionConfig`` JSON of ``d``: only the fields that differ from the defaults
    (serde fills in the rest), ``loss`` as a ``bernoulli`` model, ``mtu`` when given.

    Used for the directions of ``[[link.schedule]]`` entries (``runspec.Link.schedule``); sparse, so
    that the wire engine can merge a link's profile under it as under the link's own directions.
    """
    defaults = runspec.Direction()
    out: dict[str, Any] = {}
    for name in runspec.Direction.__dataclass_fields__:
        value = getattr(d, name)
        if value == getattr(defaults, name) or name == "loss":
            continue
        out[_JSON_NAMES.get(name, name)] = value
    if d.loss:
        out["loss"] = {"model": "bernoulli", "p": d.loss}
    if mtu is not None:
        out["mtu"] = mtu
    return out
