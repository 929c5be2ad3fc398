"""The CLI's own flags and help texts as a new user meets them (issue 26, "small defects")."""

from __future__ import annotations

import subprocess
import sys

from roughnet import __version__

ROUGHNET = [sys.executable, "-m", "roughnet.cli"]


def test_version_prints_the_version_and_exits_0():
    out = subprocess.run([*ROUGHNET, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"roughnet {__version__}", out.stdout + out.stderr


def test_help_texts_keep_their_brackets():
    """Rich reads "[mobility]" as markup and drops it unless escaped: every TOML table named in a help text
    must come out as written."""
    out = subprocess.run([*ROUGHNET, "--help"], capture_output=True, text=True, timeout=60,
                         env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0
    assert "([mobility] fcd, [[host]] vehicle;" in out.stdout, out.stdout
