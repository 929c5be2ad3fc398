"""Field kinds of the scenario format: how one value is checked and described.

Each kind turns into a pydantic annotated type (``Annotated[Any, PlainValidator,
WithJsonSchema]``) so that this module alone decides (1) what a value may be,
(2) the "expected ..." text of its error messages, and (3) its JSON Schema.
Values are kept as written (``"10 ms"`` stays a string); ``spec.resolve``
converts them into base units once every placeholder is filled in.

A value holding a ``${key}`` placeholder is accepted as is where placeholders
are allowed (everything outside ``[scenario]``, ``[sweep]`` and ``[report]``)
and checked after substitution; ``spec.placeholders`` checks their syntax.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import PlainValidator, WithJsonSchema

from .. import units

#: Any placeholder inside a string (for text substitution): ``${key}``, or ``${key.field}``
#: for a field of a table axis; group 1 is the key, group 2 the field (None without one).
PLACEHOLDER = re.compile(r"\$\{([a-z_][a-z0-9_]*)(?:\.([a-z_][a-z0-9_]*))?\}")
#: A whole value that is exactly one placeholder: takes the swept value (or field) as is (any type).
PLACEHOLDER_FULL = re.compile("^" + PLACEHOLDER.pattern + "$")
PLACEHOLDER_SCHEMA = {
    "type": "string",
    "pattern": r"^\$\{[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?\}$",
    "description": "a ${key} placeholder naming a [sweep] key (${key.field} for a field of a table axis)",
}

NO_PLACEHOLDER = "placeholders are not allowed here"
#: A list kind's error about one entry starts with "@[<index>] " (turned into a key path).
ENTRY_PREFIX = "@["


def has_placeholder(value: object) -> bool:
    return isinstance(value, str) and "${" in value


def describe(value: object) -> str:
    """A value as it would be written in TOML, for "(got ...)"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, dict):  # an inline table
        return "{ " + ", ".join(f"{k} = {describe(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    return str(value)


class ToBase:
    """Field metadata: how a checked value becomes base units (``"10 ms"`` -> 10_000_000 ns).

    ``spec.knobs`` and ``spec.services`` read it to build options; values of kinds without
    it (booleans, integers, names) are passed on as written.
    """

    def __init__(self, convert: Callable[[Any], Any]) -> None:
        self.convert = convert


def to_base(metadata: Sequence[Any], value: Any) -> Any:
    """``value`` in base units, by the ``ToBase`` among a field's metadata (as is without one)."""
    for m in metadata:
        if isinstance(m, ToBase):
            return m.convert(value)
    return value


class Kind:
    """One kind of value: a check, the 'expected' text and a JSON Schema."""

    def __init__(self, expected: str, check: Callable[[Any], None], schema: dict[str, Any],
                 placeholders: bool = True, schema_placeholder: bool | None = None,
                 convert: Callable[[Any], Any] | None = None) -> None:  # fmt: skip
        self.expected = expected
        self.convert = convert  # into base units (quantities); None: kept as written
        # Whether json_schema() adds the "${key}" alternative (default: when placeholders are allowed).
        self.schema_placeholder = placeholders if schema_placeholder is None else schema_placeholder
        self.check = check
        self.schema = schema
        self.placeholders = placeholders

    def validate(self, value: Any) -> Any:
        if has_placeholder(value):
            if not self.placeholders:
                raise ValueError(f"{NO_PLACEHOLDER}; expected {self.expected}")
            return value
        self.check(value)
        return value

    def json_schema(self) -> dict[str, Any]:
        schema = dict(self.schema)
        constrained = schema.get("type") != "string" or "enum" in schema or "pattern" in schema
        if self.schema_placeholder and constrained:
            return {"anyOf": [schema, PLACEHOLDER_SCHEMA]}
        return schema

    def type(self) -> Any:
        """The pydantic annotated type of this kind."""
        if self.convert is not None:
            return Annotated[Any, PlainValidator(self.validate), WithJsonSchema(self.json_schema()),
                             ToBase(self.convert)]  # fmt: skip
        return Annotated[Any, PlainValidator(self.validate), WithJsonSchema(self.json_schema())]


def _fail(problem: str, expected: str) -> None:
    raise ValueError(f"{problem}; expected {expected}")


def quantity(parser: Callable[[Any], Any], expected: str, examples: Sequence[str], *,
             placeholders: bool = True) -> Kind:  # fmt: skip
    """A string with a unit, checked by one of ``roughnet.units``' parsers."""

    def check(value: Any) -> None:
        parser(value)  # its ValueError already says "...; expected ..."

    schema = {"type": "string", "examples": list(examples)}
    return Kind(expected, check, schema, placeholders, convert=parser)


def integer(lo: int, hi: int | None, expected: str, *, placeholders: bool = True) -> Kind:
    def check(value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail("not an integer", expected)
        if value < lo or (hi is not None and value > hi):
            _fail("out of range", expected)

    schema: dict[str, Any] = {"type": "integer", "minimum": lo}
    if hi is not None:
        schema["maximum"] = hi
    return Kind(expected, check, schema, placeholders)


def boolean(expected: str = "true or false", *, placeholders: bool = True) -> Kind:
    def check(value: Any) -> None:
        if not isinstance(value, bool):
            _fail("not a boolean", expected)

    return Kind(expected, check, {"type": "boolean"}, placeholders)


def choice(values: Sequence[str], *, placeholders: bool = True) -> Kind:
    expected = "one of " + ", ".join(f'"{v}"' for v in values)

    def check(value: Any) -> None:
        if not isinstance(value, str):
            _fail("not a string", expected)
        if value not in values:
            _fail("unknown value", expected)

    return Kind(expected, check, {"type": "string", "enum": list(values)}, placeholders)


def name(pattern: str, expected: str, *, placeholders: bool = True) -> Kind:
    compiled = re.compile(pattern)

    def check(value: Any) -> None:
        if not isinstance(value, str):
            _fail("not a string", expected)
        if not compiled.fullmatch(value):
            _fail("not a valid name", expected)

    return Kind(expected, check, {"type": "string", "pattern": pattern}, placeholders)


def text(expected: str = "a string", *, placeholders: bool = True) -> Kind:
    def check(value: Any) -> None:
        if not isinstance(value, str):
            _fail("not a string", expected)

    return Kind(expected, check, {"type": "string"}, placeholders)


def name_list(item: Kind, min_items: int, expected: str, *, single: bool = False) -> Kind:
    """A list of names (each checked by ``item``); ``single`` also admits one bare name."""

    def check(value: Any) -> None:
        items = [value] if single and isinstance(value, str) else value
        if not isinstance(items, list):
            _fail("not a list", expected)
        if len(items) < min_items:
            _fail(f"too few entries ({len(items)})", expected)
        for i, entry in enumerate(items):
            try:
                item.validate(entry)
            except ValueError as e:
                if items is value:  # name the entry: problems.from_validation_error reads this prefix
                    raise ValueError(f"{ENTRY_PREFIX}{i}] {e}") from None
                raise

    array = {"type": "array", "items": item.json_schema(), "minItems": min_items}
    schema = {"anyOf": [item.json_schema(), array]} if single else array
    # Entries are checked one by one (placeholders inside lists are allowed); a whole
    # value "${key}" is allowed where a single name is (it fills in one name).
    return Kind(expected, check, schema, placeholders=single, schema_placeholder=False)


# ----------------------------------------------------------------------------- the kinds used

DURATION = "a duration like '10 ms' (units: ns, us, ms, s, min)"
RATE = "a rate like '10 Mbit/s' (bit/s, kbit/s, Mbit/s, Gbit/s, bps, Mbps, B/s, kB/s, MB/s)"
SIZE = "a size like '64 KiB' (B, kB, MB, GB, KiB, MiB, GiB)"
PERCENT = "a percentage like '5%' (0% to 100%)"
QUEUE = "a queue limit like '100 packets' or a size like '64 KiB'"
MSG_RATE = "a message rate like '200 msg/s' or 'max'"


def parse_queue(value: Any) -> tuple[int | None, int | None]:
    """``"100 packets"`` -> (100, None); ``"64 KiB"`` -> (None, 65536)."""
    if isinstance(value, str) and re.search(r"(?i)(packets?|pkts?)\s*$", value):
        return units.parse_packets(value), None
    try:
        size = units.parse_size_bytes(value)
    except ValueError as e:
        problem = str(e).split("; expected ", 1)[0]
        raise ValueError(f"{problem}; expected {QUEUE}") from None
    if size < 1:
        raise ValueError(f"a queue limit must be above 0; expected {QUEUE}")
    return None, size


def duration(**kw: Any) -> Kind:
    return quantity(units.parse_duration_ns, DURATION, ["10 ms", "1.5 s", "250 us"], **kw)


def rate() -> Kind:
    return quantity(units.parse_rate_bps, RATE, ["10 Mbit/s", "1 Gbit/s", "500 kB/s"])


def size() -> Kind:
    return quantity(units.parse_size_bytes, SIZE, ["1 KiB", "1500 B", "64 KiB"])


def percent() -> Kind:
    return quantity(units.parse_fraction, PERCENT, ["0%", "5%", "0.1%"])


def queue() -> Kind:
    return quantity(parse_queue, QUEUE, ["100 packets", "64 KiB"])


def msg_rate() -> Kind:
    return quantity(units.parse_msg_rate, MSG_RATE, ["200 msg/s", "max"])


def _bounded(parser: Callable[[Any], int], fmt: Callable[[int], str], what: str, lo: int, hi: int | None,
             examples: Sequence[str], multiple: tuple[int, str] | None = None) -> Kind:  # fmt: skip
    """A quantity whose value in base units lies in [lo, hi] (and is a multiple of ``multiple[0]``)."""
    expected = f"{what}, {fmt(lo)} to {fmt(hi)}" if hi is not None else f"{what}, at least {fmt(lo)}"
    if multiple is not None:
        expected += f", a whole number of {multiple[1]}"

    def check(value: Any) -> None:
        try:
            n = parser(value)
        except ValueError as e:
            problem = str(e).split("; expected ", 1)[0]
            raise ValueError(f"{problem}; expected {expected}") from None
        if n < lo:
            _fail(f"below {fmt(lo)}", expected)
        if hi is not None and n > hi:
            _fail(f"above {fmt(hi)}", expected)
        if multiple is not None and n % multiple[0]:
            _fail(f"not a whole number of {multiple[1]}", expected)

    return Kind(expected, check, {"type": "string", "examples": list(examples)}, convert=parser)


def _size_text(n: int) -> str:
    """``"16 MiB"``, or ``"2147483647 B"`` where a unit would need many decimals."""
    text = units.format_size_bytes(n)
    return text if len(text) <= 10 else f"{n} B"


def bounded_size(lo: int, hi: int | None, examples: Sequence[str] = ("1 KiB", "64 KiB", "1 MB")) -> Kind:
    """A size (``SIZE``) from ``lo`` to ``hi`` bytes."""
    return _bounded(units.parse_size_bytes, _size_text, SIZE, lo, hi, examples)


def bounded_duration(lo: int, hi: int | None, examples: Sequence[str] = ("5 ms", "500 ms", "30 s"),
                     whole_seconds: bool = False) -> Kind:  # fmt: skip
    """A duration (``DURATION``) from ``lo`` to ``hi`` ns (``whole_seconds``: a multiple of 1 s)."""
    multiple = (1_000_000_000, "seconds") if whole_seconds else None
    return _bounded(units.parse_duration_ns, units.format_duration_ns, DURATION, lo, hi, examples, multiple)

