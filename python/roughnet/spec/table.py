"""The base of every table model of the scenario format, and the kinds several tables share.

``Table`` forbids unknown keys and coerces nothing; ``key_noun`` / ``key_owner`` let
a table say what its keys are in the "unknown key" error ("not a knob of protocol
\"zenoh\"").  ``field`` is ``pydantic.Field`` with the description first (the
descriptions are the generated reference).  ``HOST`` is the kind of a host name, used
by [[host]], [[link]], [workload] and [[service]].
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from . import kinds

HOST_NAME = r"^[a-z][a-z0-9]{0,7}$"
HOST = kinds.name(HOST_NAME, "a host name of a lowercase letter then up to 7 lowercase letters or digits, like \"a\" "
                  "or \"car1\"")  # fmt: skip


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=False)

    #: What the keys of this table are, for the "unknown key" error: ("knob", 'protocol "zenoh"')
    #: gives "unknown key: not a knob of protocol "zenoh"". Empty: a plain "unknown key".
    key_noun: ClassVar[str] = ""
    key_owner: ClassVar[str] = ""


def field(description: str, default: Any = ..., **kw: Any) -> Any:
    return Field(default, description=description, **kw)
