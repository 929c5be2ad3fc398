"""topo.system.run_cmd: an interrupt that arrives while a command starts cannot leave the command running on its
own (found by bench/self_chaos.py: an `ip netns add` interrupted inside Popen() made its namespace after the
teardown had looked). No root needed: the command is `sleep`."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from roughnet.topo import system


class Stop(BaseException):
    pass


@pytest.mark.parametrize("other_thread", [False, True], ids=["one-thread", "another-thread-takes-the-signal"])
def test_an_interrupt_while_the_command_starts_ends_the_command_too(monkeypatch, other_thread):
    """With another thread that does not block SIGTERM (roughnet's samplers, pytest-xdist's), the kernel hands
    the signal to that thread and Python runs the handler on the main thread at once, whatever the main thread's
    mask: the hold must not rest on the mask alone (CI under xdist, once: the command outlived the interrupt)."""
    if other_thread:  # a thread that runs Python: the main thread is made to look at pending signals within ms
        stop = threading.Event()

        def spin() -> None:
            while not stop.is_set():
                pass

        t = threading.Thread(target=spin, daemon=True)
        t.start()
    started: list[subprocess.Popen] = []
    real = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        p = real(*args, **kwargs)
        started.append(p)
        os.kill(os.getpid(), signal.SIGTERM)  # Ctrl-C/SIGTERM just as the child has started
        if other_thread:
            time.sleep(0.05)  # still inside Popen(): the other thread takes the GIL, the main thread gets it back
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
        if other_thread:
            stop.set()
            t.join()
    (p,) = started
    outlived = p.returncode is None
    if outlived:  # end it here, so that the failure is this test's alone (not ResourceWarnings in the next one)
        p.kill()
        p.communicate()
    assert not outlived, "the command outlived the interrupt"  # killed and waited for, not orphaned
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # nothing stays held


def test_a_command_runs_to_its_end_with_its_output():
    res = system.run_cmd(["sh", "-c", "echo out; echo err >&2; exit 3"], "echoing", check=False)
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert system.run_cmd(["cat"], "catting", input="in").stdout == "in"
