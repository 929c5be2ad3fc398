"""Where the wire's control sockets live (issue 26): never in a shared temp folder, and a folder that exists
already is used only if it is a real folder owned by root (or the running user) and writable by its owner
only; anything else stops the run with a LinkError naming the folder. No namespaces: a stand-in topology."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from roughnet.errors import LinkError
from roughnet.links import wire


def topo_with_ledger_in(root: Path) -> SimpleNamespace:
    return SimpleNamespace(token="abcd1234", ledger=SimpleNamespace(root=root / "ledger"))


LINK = SimpleNamespace(index=3)


def test_the_socket_goes_next_to_the_ledger_in_a_private_folder(tmp_path: Path) -> None:
    path = wire.control_path(topo_with_ledger_in(tmp_path), LINK)
    assert path == tmp_path / "wire" / "abcd1234-l3.sock"
    assert (tmp_path / "wire").stat().st_mode & 0o777 == 0o700


def test_a_long_ledger_path_falls_back_to_the_private_folder_not_tmp(tmp_path: Path, monkeypatch) -> None:
    # the stand-in for /run/roughnet: a short folder of its own (tmp_path is over 60 bytes under pytest-xdist,
    # too long for a socket path of its own), removed at the end
    short = Path(tempfile.mkdtemp(prefix="rnw-"))
    monkeypatch.setattr(wire, "PRIVATE_SOCKET_DIR", short / "wire")
    try:
        _falls_back(tmp_path, short / "wire")
    finally:
        shutil.rmtree(short)


def _falls_back(tmp_path: Path, private: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    path = wire.control_path(topo_with_ledger_in(deep), LINK)
    assert path == private / "abcd1234-l3.sock"
    assert not str(path).startswith(tempfile.gettempdir().rstrip("/") + "/roughnet-wire")
    assert private.stat().st_mode & 0o777 == 0o700


def test_the_fallback_is_under_run_roughnet() -> None:
    assert wire.PRIVATE_SOCKET_DIR == Path("/run/roughnet/wire")
    assert "tempfile" not in vars(wire)  # no temp-dir fallback left


@pytest.mark.parametrize("mode, words", [(0o777, "writable by group and others"), (0o770, "writable by group"),
                                         (0o703, "writable by others")])  # fmt: skip
def test_a_folder_writable_by_others_is_refused(tmp_path: Path, mode: int, words: str) -> None:
    folder = tmp_path / "wire"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(LinkError, match=words) as info:
        wire.control_path(topo_with_ledger_in(tmp_path), LINK)
    assert str(folder) in str(info.value) and "expected" in str(info.value)


def test_a_folder_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the folder away")
    folder = tmp_path / "wire"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(LinkError, match="owned by uid 65534"):
        wire.control_path(topo_with_ledger_in(tmp_path), LINK)


def test_a_symlinked_folder_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "wire").symlink_to(target)
    with pytest.raises(LinkError, match="is a symlink"):
        wire.control_path(topo_with_ledger_in(tmp_path), LINK)


def test_a_file_in_the_folders_place_is_refused(tmp_path: Path) -> None:
    (tmp_path / "wire").write_text("")
    with pytest.raises(LinkError, match="control socket folder"):
        wire.control_path(topo_with_ledger_in(tmp_path), LINK)
