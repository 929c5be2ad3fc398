"""OCI image archives built without a registry (roughnet.kube.image): structure, digests, reproducibility."""

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from roughnet.kube import image as img


def _spec(tmp_path: Path, compress=True) -> img.ImageSpec:
    tool = tmp_path / "tool"
    tool.write_bytes(b"#!/bin/sh\necho hello\n")
    os.utime(tool, (1_700_000_000, 1_700_000_000))
    data = tmp_path / "data.txt"
    data.write_text("some data\n")
    return img.ImageSpec(
        name="roughnet.local/test", tag="1.2.3",
        entries=[
            img.FileEntry(tool, "/usr/local/bin/tool", 0o755),
            img.FileEntry(data, "/etc/data.txt", 0o600),
            img.Symlink("/bin/t", "../usr/local/bin/tool"),
            img.DataEntry(b"root:x:0:0:root:/root:/bin/sh\n", "/etc/passwd"),
            img.Directory("/tmp", 0o1777),
        ],
        entrypoint=["/usr/local/bin/tool"], cmd=["--flag"], compress=compress,
    )


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


@pytest.mark.parametrize("compress", [True, False])
def test_archive_is_an_oci_layout_whose_digests_match_their_blobs(tmp_path, compress):
    out = tmp_path / "out" / "test.tar"
    built = img.write_archive(_spec(tmp_path, compress), out)
    assert built.path == out and built.size == out.stat().st_size and built.ref == "roughnet.local/test:1.2.3"
    files = _members(out)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2 and len(index["manifests"]) == 1
    desc = index["manifests"][0]
    assert desc["annotations"]["io.containerd.image.name"] == "roughnet.local/test:1.2.3"
    assert desc["annotations"]["org.opencontainers.image.ref.name"] == "1.2.3"
    assert desc["platform"] == {"architecture": "amd64", "os": "linux"}
    assert desc["digest"] == built.manifest_digest

    def blob(d):
        data = files["blobs/sha256/" + d["digest"].split(":", 1)[1]]
        assert _sha(data) == d["digest"] and len(data) == d["size"]
        return data

    manifest = json.loads(blob(desc))
    assert manifest["mediaType"] == desc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    config = json.loads(blob(manifest["config"]))
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/tool"] and config["config"]["Cmd"] == ["--flag"]
    assert any(e.startswith("PATH=") for e in config["config"]["Env"])
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    (layer_desc,) = manifest["layers"]
    layer = blob(layer_desc)
    assert layer_desc["mediaType"].endswith("tar+gzip" if compress else ".tar")
    raw = gzip.decompress(layer) if compress else layer
    assert config["rootfs"] == {"type": "layers", "diff_ids": [_sha(raw)]}
    # Every blob is referenced; nothing else lies in blobs/.
    blobs = {k for k in files if k.startswith("blobs/")}
    assert blobs == {"blobs/sha256/" + d["digest"].split(":")[1] for d in (desc, manifest["config"], layer_desc)}

    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    by = {m.name.rstrip("/"): m for m in members}
    for d in ("usr", "usr/local", "usr/local/bin", "etc", "bin"):
        assert by[d].isdir() and by[d].mode == 0o755
    assert by["tmp"].isdir() and by["tmp"].mode == 0o1777
    assert by["usr/local/bin/tool"].isfile() and by["usr/local/bin/tool"].mode == 0o755
    assert by["etc/data.txt"].mode == 0o600
    assert by["bin/t"].issym() and by["bin/t"].linkname == "../usr/local/bin/tool"
    assert all(m.uid == 0 and m.gid == 0 and m.mtime == img.EPOCH for m in members)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        assert tar.extractfile("usr/local/bin/tool").read() == b"#!/bin/sh\necho hello\n"
        assert tar.extractfile("etc/passwd").read().startswith(b"root:x:0:0:")


def test_second_build_gives_the_same_bytes(tmp_path):
    a = img.write_archive(_spec(tmp_path), tmp_path / "a.tar")
    src = tmp_path / "tool"
    os.utime(src, (1_800_000_000, 1_800_000_000))  # source mtimes do not leak into the image
    b = img.write_archive(_spec(tmp_path), tmp_path / "b.tar")
    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.manifest_digest == b.manifest_digest


def test_bad_entries_are_refused(tmp_path):
    with pytest.raises(img.ImageError, match="'..'"):
        img.layer_tar([img.DataEntry(b"x", "/etc/../../x")])
    with pytest.raises(img.ImageError, match="given twice"):
        img.layer_tar([img.DataEntry(b"x", "/a"), img.DataEntry(b"y", "/a")])
    with pytest.raises(img.ImageError, match="cannot read"):
        img.write_archive(img.ImageSpec("r/x", "1", [img.FileEntry(tmp_path / "missing", "/m")]), tmp_path / "x.tar")


def test_references_and_archive_paths(tmp_path):
    from roughnet import __version__

    assert img.image_ref("pause") == "roughnet.local/pause:3.10"
    assert img.image_ref("roughnet") == f"roughnet.local/roughnet:{__version__}"
    assert img.image_archive("pause", tmp_path) == tmp_path / "pause-3.10.tar"
    assert img.image_archive("roughnet") == img.IMAGES_DIR / f"roughnet-{__version__}.tar"
    with pytest.raises(img.ImageError):
        img.image_ref("kafka")


@pytest.mark.skipif(not (shutil.which("ldd") and Path("/bin/sh").exists()), reason="needs ldd")
def test_shared_libraries_of_a_dynamic_binary_include_the_loader():
    libs = img.shared_libraries(Path("/bin/sh").resolve())
    assert any("libc.so" in p for p in libs)
    assert any("ld-linux" in p for p in libs)
    assert all(p.startswith("/") for p in libs)


def test_build_image_skips_an_up_to_date_archive_and_rebuilds_on_change(tmp_path, monkeypatch):
    spec = _spec(tmp_path)
    monkeypatch.setattr(img, "pause_spec", lambda directory=None: spec)
    first = img.build_image("pause", tmp_path / "images")
    assert first.built and first.path == tmp_path / "images" / "pause-3.10.tar"
    assert not img.build_image("pause", tmp_path / "images").built
    # A newer mtime with the same content (make build reinstalls bin/): kept, only touched.
    future = first.path.stat().st_mtime + 100
    os.utime(tmp_path / "tool", (future, future))
    again = img.build_image("pause", tmp_path / "images")
    assert not again.built and again.manifest_digest == first.manifest_digest
    assert first.path.stat().st_mtime >= future
    # New content: rebuilt, another digest.
    (tmp_path / "tool").write_bytes(b"#!/bin/sh\necho changed\n")
    os.utime(tmp_path / "tool", (future + 100, future + 100))
    changed = img.build_image("pause", tmp_path / "images")
    assert changed.built and changed.manifest_digest != first.manifest_digest
    assert img.build_image("pause", tmp_path / "images", force=True).built


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("strip")), reason="needs gcc and strip")
def test_strip_debug_entries_lose_their_debug_sections(tmp_path):
    import subprocess

    src = tmp_path / "hello.c"
    src.write_text("int main(void) { return 0; }\n")
    binary = tmp_path / "hello"
    subprocess.run(["gcc", "-g", "-O0", "-o", str(binary), str(src)], check=True)
    plain = img.layer_tar([img.FileEntry(binary, "/hello")])
    stripped = img.layer_tar([img.FileEntry(binary, "/hello", strip_debug=True)])
    with tarfile.open(fileobj=io.BytesIO(plain)) as a, tarfile.open(fileobj=io.BytesIO(stripped)) as b:
        full, small = a.extractfile("hello").read(), b.extractfile("hello").read()
    assert b".debug_info" in full and b".debug_info" not in small
    assert small.startswith(b"\x7fELF") and len(small) < len(full)
    assert img.layer_tar([img.FileEntry(binary, "/hello", strip_debug=True)]) == stripped  # reproducible


def test_an_unwritable_output_is_an_image_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(img.ImageError, match="failed|cannot"):
        img.build_image("pause", blocker / "images")
