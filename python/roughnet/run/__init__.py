"""Running a sweep: preflight, then each run from topology to teardown (see runner.py)."""

from .runner import Interrupted, Preflight, execute_run, preflight
from .sweep import pending_runs, run_sweep

__all__ = ["Interrupted", "Preflight", "execute_run", "pending_runs", "preflight", "run_sweep"]
