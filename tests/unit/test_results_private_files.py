"""What roughnet writes as root into a results folder (issue 26): the writer's lock is opened without
following a symlink (one in its place is refused, its target untouched), TLS keys and certificates are in
folders only root can enter, and packet captures are files only root can read. No namespaces: the capture
test stands in for tcpdump and the topology."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from roughnet import capture
from roughnet.errors import ResultsError
from roughnet.results.store import WRITER_LOCK, Store
from roughnet.services import tls


def test_a_symlinked_writer_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    root = tmp_path / "res"
    root.mkdir()
    target = tmp_path / "precious"
    target.write_text("do not truncate me\n")
    (root / WRITER_LOCK).symlink_to(target)
    with pytest.raises(ResultsError, match="is a symlink") as info:
        Store(root, hold=False)
    assert str(root / WRITER_LOCK) in str(info.value) and "expected" in str(info.value)
    assert target.read_text() == "do not truncate me\n"


def test_a_writer_lock_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "res"
    root.mkdir()
    os.mkfifo(root / WRITER_LOCK)
    with pytest.raises(ResultsError, match="not a regular file"):
        Store(root, hold=False)


def test_a_regular_writer_lock_still_works(tmp_path: Path) -> None:
    with Store(tmp_path / "res", hold=False) as store:
        assert (store.root / WRITER_LOCK).read_text() == str(os.getpid())


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_tls_folders_are_private_before_a_key_is_written(tmp_path: Path) -> None:
    sweep = tmp_path / "runs" / "sweep"
    ca, ca_key = tls.ensure_ca(sweep / "tls")
    assert _mode(sweep / "tls") == 0o700
    files = tls.server_cert(ca, ca_key, sweep / "run" / "tls", "mosquitto", ["198.18.0.1"])
    assert _mode(sweep / "run" / "tls") == 0o700
    assert _mode(files.key) == 0o600 and _mode(ca_key) == 0o600


def test_an_existing_open_tls_folder_is_closed_and_a_symlink_refused(tmp_path: Path) -> None:
    open_folder = tmp_path / "tls"
    open_folder.mkdir(mode=0o755)
    open_folder.chmod(0o755)
    tls.private_folder(open_folder)
    assert _mode(open_folder) == 0o700
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Exception, match="is a symlink"):
        tls.private_folder(tmp_path / "link")


def test_a_capture_file_is_created_private_for_tcpdump(tmp_path: Path, monkeypatch) -> None:
    artifacts = tmp_path / "run"
    artifacts.mkdir()
    stale = artifacts / "capture-0-a.pcap"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep")
    stale.symlink_to(elsewhere)  # a symlink where the capture goes: removed, not followed
    started = []
    monkeypatch.setattr(capture, "planned", lambda run, topo: [(0, "a", "rn-x-a", "rn0-b", "198.18.0.1")])
    monkeypatch.setattr(capture, "_mac", lambda topo, ns, ifname: None)
    monkeypatch.setattr(capture.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(capture.Tcpdump, "start", lambda self, topo, snaplen: started.append(self.path))
    caps = capture.start(SimpleNamespace(run_id="r"), object(), artifacts)
    assert started == [stale] and len(caps.items) == 1
    assert not stale.is_symlink() and stale.is_file() and _mode(stale) == 0o600
    assert elsewhere.read_text() == "keep"
