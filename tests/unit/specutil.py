"""Planning scenario text as `roughnet validate` does, for the spec tests (tests/unit/test_spec*.py).

Owns: loading + planning a scenario given as text under a source name, and catching the
ScenarioError it raises.  The TOML pieces themselves (hosts, stream workload) are in
tests/conftest.py, shared with the integration tests.  Imported as ``from specutil import ...``.
"""

from __future__ import annotations

import pytest

from roughnet import runspec
from roughnet.plan import sweep_from_scenario
from roughnet.spec import ScenarioError, loads


def plan_text(text: str, source: str = "case.toml") -> runspec.Sweep:
    """The sweep of scenario ``text`` (load + plan); ``source`` is the file name errors give."""
    return sweep_from_scenario(loads(text, source), source)


def plan_error(text: str, source: str = "case.toml") -> ScenarioError:
    """The ScenarioError of planning ``text``; the test fails if there is none."""
    with pytest.raises(ScenarioError) as info:
        plan_text(text, source)
    return info.value
