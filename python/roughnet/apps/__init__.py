"""The user's own programs on the scenario's hosts ([[process]], docs/applications.md).

``launch`` (one process: user, environment, working folder, start, readiness, signals, judging),
``supervisor`` (a run's processes on their schedule from t0, events, the end), ``sockdiag`` (their TCP
sockets as the kernel sees them), ``appmetrics`` (the numbers they offer), ``images`` and ``oci`` (OCI
images run by runc), ``results`` (their rows in the record).  The runner (``run.runner``) prepares a
``Supervisor`` after the services and starts it at t0.
"""

from __future__ import annotations


def preflight(sweep) -> None:
    """What this machine needs for the sweep's processes (users, programs, images); PreflightError (exit 2)."""
    from . import launch

    procs = [p for run in sweep.runs for p in run.processes]
    launch.preflight(procs)  # users of every process, programs of the commands
    images = [p for p in procs if p.image]
    if images:
        from . import images as img

        img.preflight(images)
