"""Starting the ROS 2 endpoint where the runner would start roughnet-agent.

Owns the endpoint's command line (this Python, ``-m roughnet.ros2.endpoint``), its environment, and
the preflight check that the ROS 2 wheels are installed.  The runner (``run.agents.start_agent``)
uses ``argv`` and ``environment`` for every agent of a ``ros2`` run; everything else (ready line,
result line, stop by SIGTERM) is the same as for roughnet-agent.

Environment: the wheels' rclpy needs no sourced ROS setup (its libraries are found beside the
Python modules), only a writable log directory: ``ROS_LOG_DIR`` is the run's folder
(``ros-log/``), so rcl's log files stay with the run and out of ``~/.ros``.  ``ROS_DOMAIN_ID`` is
left as the caller has it (each run's hosts are alone in their namespaces anyway).  What the
middleware itself needs (UDP only, static peers) the endpoint sets from its configuration.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from ..errors import PreflightError

PROTOCOL = "ros2"
#: The Python modules the endpoint imports, and the pip packages that bring them (pyproject's `ros2` extra).
NEEDS = {"rclpy": "ros-rclpy", "std_msgs": "ros-std-msgs", "rmw_fastrtps_cpp": "ros-rmw-fastrtps-cpp"}
INSTALL_HINT = "make extras (pip install -e '.[ros2]')"


def missing() -> list[str]:
    """The pip packages of the endpoint that this Python lacks."""
    out = []
    for module, package in NEEDS.items():
        if module == "rmw_fastrtps_cpp":
            try:
                from importlib.metadata import PackageNotFoundError, version

                version(package)
            except PackageNotFoundError:
                out.append(package)
            continue
        if importlib.util.find_spec(module) is None:
            out.append(package)
    return out


def preflight() -> None:
    """PreflightError naming the missing ROS 2 packages and how to install them."""
    lacking = missing()
    if lacking:
        raise PreflightError(f"protocol \"ros2\" needs the ROS 2 wheels in {sys.executable}: missing "
                             f"{', '.join(lacking)} (install them: {INSTALL_HINT})")


def argv(cfg_path: Path) -> list[str]:
    return [sys.executable, "-m", "roughnet.ros2.endpoint", "run", "--config", str(cfg_path)]


def environment(artifacts: Path) -> dict[str, str]:
    log_dir = artifacts / "ros-log"
    log_dir.mkdir(parents=True, exist_ok=True)
    return dict(os.environ) | {"ROS_LOG_DIR": str(log_dir)}
