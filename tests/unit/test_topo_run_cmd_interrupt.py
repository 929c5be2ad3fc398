"""topo.system.run_cmd: an interrupt that arrives while a command starts cannot leave the command running on its
own (found by bench/self_chaos.py: an `ip netns add` interrupted inside Popen() made its namespace after the
teardown had looked). No root needed: the command is `sleep`."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from roughnet.topo import system


class Stop(BaseException):
    pass


def test_an_interrupt_while_the_command_starts_ends_the_command_too(monkeypatch):
    started: list[subprocess.Popen] = []
    real = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        p = real(*args, **kwargs)
        started.append(p)
        os.kill(os.getpid(), signal.SIGTERM)  # Ctrl-C/SIGTERM just as the child has started
        return p

    def handler(signum, frame):
        raise Stop()

    old = signal.signal(signal.SIGTERM, handler)
    monkeypatch.setattr(system.subprocess, "Popen", popen_then_signal)
    try:
        with pytest.raises(Stop):
            system.run_cmd(["sleep", "30"], "sleeping")
    finally:
        signal.signal(signal.SIGTERM, old)
    (p,) = started
    assert p.returncode is not None, "the command outlived the interrupt"  # killed and waited for, not orphaned
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # nothing stays held


def test_a_command_runs_to_its_end_with_its_output():
    res = system.run_cmd(["sh", "-c", "echo out; echo err >&2; exit 3"], "echoing", check=False)
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert system.run_cmd(["cat"], "catting", input="in").stdout == "in"
