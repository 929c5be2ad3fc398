"""The exceptions roughnet raises; one base class, a few kinds.

Every message names what was wrong and what was expected.  The CLI maps
``SpecError`` (and its subclasses) to exit code 2, everything else to 1.
"""

from __future__ import annotations


class RoughnetError(Exception):
    """Base of every error roughnet raises on purpose."""

    exit_code = 1


class SpecError(RoughnetError):
    """A scenario file (or a command line) is malformed; nothing was created."""

    exit_code = 2


class PreflightError(RoughnetError):
    """The scenario is well formed but this machine cannot run it."""

    exit_code = 2


class TopologyError(RoughnetError):
    """Creating or removing namespaces, interfaces, addresses or routes failed."""


class RunBusyError(TopologyError):
    """Another live roughnet process holds this run's ledger (the same run, run at the same time); nothing was
    created."""

    exit_code = 2


class LinkError(RoughnetError):
    """A link engine could not apply (or remove) an impairment."""


class ServiceError(RoughnetError):
    """A managed service (broker, router) failed to start, became unready or died."""


class AgentError(RoughnetError):
    """roughnet-agent failed, printed something unreadable or timed out."""


class ResultsError(RoughnetError):
    """The results database is unreadable, of an unknown format, or a sweep/run is missing."""


class UnknownResults(ResultsError):
    """A results folder without a database, or a sweep it does not hold, named by the user: bad input (exit 2)."""

    exit_code = 2
