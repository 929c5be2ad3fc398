"""The roughnet command line: the only code that prints.

Each command is thin: it calls the library (spec, plan, run, results, report, topo, analysis) and renders
what comes back with rich.  One module per group of verbs: ``run`` (validate, show, run), ``results``
(results, import, report, export), ``watch`` (a running sweep), ``compare`` and ``search`` (over stored runs), ``machine`` (clean, schema,
doctor, calibrate, image, cluster, mobility), ``profiles`` (the link profile table and its check), ``trace`` (capacity traces); ``common`` holds what they share (the app, consoles, the store,
exit codes: 0 success, 1 a failure while running, 2 bad input or a machine that cannot run the scenario,
nothing created, 130 interrupted).
"""

from __future__ import annotations

# Each adds its commands to the app, in the order `roughnet --help` lists them.
from . import run  # noqa: F401  # isort: skip
from . import results  # noqa: F401  # isort: skip
from . import watch  # noqa: F401  # isort: skip
from . import machine  # noqa: F401  # isort: skip
from . import profiles  # noqa: F401  # isort: skip
from . import trace  # noqa: F401  # isort: skip
from .common import app
from .compare import register as _register_compare

_register_compare(app)  # roughnet compare, roughnet search


def main() -> None:
    app()


__all__ = ["app", "main"]
