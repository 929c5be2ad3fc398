"""Fixtures of the integration tests: the shared local Kubernetes cluster (``local_cluster``).

The fixture itself lives in conftest_cluster.py. This file also keeps ``from conftest
import ...`` working for the tests here: pytest imports every conftest.py as the module
``conftest``, so this one stands in for tests/conftest.py and re-exports its helpers
(the very same objects: found among the loaded modules, else loaded from its path).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import types
from pathlib import Path

import pytest

from conftest_cluster import local_cluster  # noqa: F401  (a fixture: pytest finds it here)

_TOP = Path(__file__).resolve().parents[1] / "conftest.py"


def _top_conftest() -> types.ModuleType:
    for obj in gc.get_objects():
        if isinstance(obj, types.ModuleType) and getattr(obj, "__file__", None) and \
                Path(obj.__file__).resolve() == _TOP and obj.__name__ != __name__:
            return obj
    spec = importlib.util.spec_from_file_location("roughnet_tests_conftest", _TOP)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_top = _top_conftest()
# Helpers only: its fixtures and hooks are pytest's already (tests/conftest.py applies here too).
for _name, _value in vars(_top).items():
    if _name.startswith("__") or _name.startswith("pytest_") or _name in globals():
        continue
    if hasattr(_value, "_pytestfixturefunction") or type(_value).__name__ == "FixtureFunctionDefinition":
        continue
    globals()[_name] = _value


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order of make test's first group (``-m slowlink`` on xdist workers, Makefile test-integration).

    Those tests spend their time waiting (slow links, timeouts, back-off) with the CPU mostly idle, so they run side
    by side. With fewer than two tests per worker, ``--dist load`` hands them out round-robin, one each, in this
    order, and each worker runs its own in turn: so the workers' longest first (the ``seconds`` of each test's
    ``slowlink`` mark, measured in CI), then the rest shortest first, which pairs the longest with the shortest.
    Any other selection keeps pytest's order."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    marks = [item.get_closest_marker("slowlink") for item in items]
    if workers < 1 or not items or any(m is None for m in marks):
        return
    seconds = {item.nodeid: float(m.kwargs.get("seconds", 0)) for item, m in zip(items, marks)}
    longest = sorted(items, key=lambda item: -seconds[item.nodeid])
    items[:] = longest[:workers] + sorted(longest[workers:], key=lambda item: seconds[item.nodeid])
