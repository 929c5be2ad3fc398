"""User images without a daemon or registry (roughnet.apps.oci, apps.ocibundle): loading the three forms,
bad input, unpacking with whiteouts and without escaping the root filesystem, the runtime bundle."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from roughnet.apps import oci, ocibundle
from roughnet.apps.oci import ImageError

# ---- building small images by hand -----------------------------------------------------------------


def _sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def _jb(obj) -> bytes:
    return json.dumps(obj, sort_keys=True).encode()


def layer(*entries) -> bytes:
    """A layer tar from (name, content) for files, (name, None) for directories, (name, "->target") for
    symlinks, (name, "=>target") for hard links; names as given (no checks)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 946684800
            if content is None:
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(ti)
            elif isinstance(content, str) and content.startswith("->"):
                ti.type, ti.linkname = tarfile.SYMTYPE, content[2:]
                tar.addfile(ti)
            elif isinstance(content, str) and content.startswith("=>"):
                ti.type, ti.linkname = tarfile.LNKTYPE, content[2:]
                tar.addfile(ti)
            else:
                data = content.encode() if isinstance(content, str) else content
                ti.size, ti.mode = len(data), 0o644
                tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def config(layers: list[bytes], *, entrypoint=None, cmd=None, env=None, workdir="", user="", arch="amd64") -> bytes:
    c = {"Env": env or ["PATH=/bin"], "WorkingDir": workdir, "User": user}
    if entrypoint is not None:
        c["Entrypoint"] = entrypoint
    if cmd is not None:
        c["Cmd"] = cmd
    return _jb({"architecture": arch, "os": "linux", "config": c,
                "rootfs": {"type": "layers", "diff_ids": [_sha(x) for x in layers]}})


def oci_layout(d: Path, layers: list[bytes], cfg: bytes | None = None, *, gz: bool = True, images: int = 1,
               platform: dict | None = None) -> dict:
    """An OCI image layout directory at ``d``; returns {name: bytes} of its files."""
    cfg = cfg if cfg is not None else config(layers, entrypoint=["/bin/app"], cmd=["--x"])
    blobs = [gzip.compress(x, mtime=0) if gz else x for x in layers]
    ltype = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gz else "")
    manifest = _jb({"schemaVersion": 2, "mediaType": oci.OCI_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _sha(cfg),
                               "size": len(cfg)},
                    "layers": [{"mediaType": ltype, "digest": _sha(b), "size": len(b)} for b in blobs]})
    desc = {"mediaType": oci.OCI_MANIFEST, "digest": _sha(manifest), "size": len(manifest),
            "annotations": {"org.opencontainers.image.ref.name": "t1"}}
    if platform is not None:
        desc["platform"] = platform
    descs = [desc] + [{**desc, "annotations": {"org.opencontainers.image.ref.name": f"t{i + 2}"}}
                      for i in range(images - 1)]
    files = {"oci-layout": _jb({"imageLayoutVersion": "1.0.0"}),
             "index.json": _jb({"schemaVersion": 2, "manifests": descs})}
    for b in [cfg, manifest, *blobs]:
        files["blobs/sha256/" + _sha(b)[7:]] = b
    for name, data in files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    return files


def tar_of(files: dict[str, bytes], out: Path) -> Path:
    with tarfile.open(out, "w") as tar:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return out


def docker_archive(out: Path, layers: list[bytes], cfg: bytes, *, images: int = 1, gz: bool = False) -> Path:
    files = {f"{_sha(cfg)[7:]}.json": cfg}
    names = []
    for i, x in enumerate(layers):
        names.append(f"layer{i}/layer.tar")
        files[names[-1]] = gzip.compress(x, mtime=0) if gz else x
    entry = {"Config": f"{_sha(cfg)[7:]}.json", "RepoTags": ["example/cam:1"], "Layers": names}
    files["manifest.json"] = _jb([entry] + [{**entry, "RepoTags": [f"example/other{i}:1"]} for i in range(images - 1)])
    return tar_of(files, out)


BASE = layer(("bin/", None), ("bin/app", "#!/bin/sh\n"), ("etc/", None),
             ("etc/passwd", "root:x:0:0::/root:/bin/sh\ncam:x:1000:1000::/home/cam:/bin/sh\n"),
             ("etc/group", "root:x:0:\ncam:x:1000:\nvideo:x:44:cam\n"))


# ---- loading ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["oci-layout", "oci-archive", "docker-archive", "docker-archive-gz"])
def test_load_reads_the_runtime_config_in_every_form(tmp_path, form):
    cfg = config([BASE], entrypoint=["/bin/app"], cmd=["--rate", "5"], env=["PATH=/bin", "A=1"],
                 workdir="/data", user="cam")
    if form == "oci-layout":
        oci_layout(tmp_path / "lay", [BASE], cfg)
        path = tmp_path / "lay"
    elif form == "oci-archive":
        path = tar_of(oci_layout(tmp_path / "lay", [BASE], cfg), tmp_path / "img.tar")
    else:
        path = docker_archive(tmp_path / "img.tar", [BASE], cfg, gz=form.endswith("gz"))
    im = oci.load_image(path)
    assert im.format == form.removesuffix("-gz")
    assert im.digest == _sha(cfg)
    assert (im.entrypoint, im.cmd, im.env, im.working_dir, im.user) == (
        ["/bin/app"], ["--rate", "5"], ["PATH=/bin", "A=1"], "/data", "cam")
    assert [x.diff_id for x in im.layers] == [_sha(BASE)]
    rootfs, now = oci.unpack(im, tmp_path / "cache")
    assert now and (rootfs / "bin" / "app").read_text() == "#!/bin/sh\n"


def _assert_names(exc: pytest.ExceptionInfo, path: Path, *words: str) -> None:
    msg = str(exc.value)
    assert str(path) in msg, msg
    for w in words:
        assert w in msg, msg


def test_not_a_tar_nor_a_layout(tmp_path):
    bad = tmp_path / "cam.oci.tar"
    bad.write_bytes(b"this is not a tar archive at all" * 40)
    with pytest.raises(ImageError) as exc:
        oci.load_image(bad)
    _assert_names(exc, bad, "not a tar")
    with pytest.raises(ImageError) as exc:
        oci.load_image(tmp_path / "missing.tar")
    _assert_names(exc, tmp_path / "missing.tar", "no such file")


def test_missing_manifest(tmp_path):
    path = tar_of({"hello.txt": b"hi"}, tmp_path / "img.tar")
    with pytest.raises(ImageError) as exc:
        oci.load_image(path)
    _assert_names(exc, path, "no manifest", "index.json", "manifest.json")


def test_digest_mismatch_and_missing_blob(tmp_path):
    files = oci_layout(tmp_path / "lay", [BASE])
    layer_name = next(n for n, b in files.items() if n.startswith("blobs/") and b[:2] == b"\x1f\x8b")
    (tmp_path / "lay" / layer_name).write_bytes(gzip.compress(BASE + b"\0" * 512, mtime=0))
    with pytest.raises(ImageError) as exc:
        oci.load_image(tmp_path / "lay")
    _assert_names(exc, tmp_path / "lay", "digest mismatch", layer_name)
    (tmp_path / "lay" / layer_name).unlink()
    with pytest.raises(ImageError) as exc:
        oci.load_image(tmp_path / "lay")
    _assert_names(exc, tmp_path / "lay", "missing", layer_name)


def test_docker_archive_layer_digest_mismatch(tmp_path):
    cfg = config([BASE])
    other = layer(("x", "y"))
    path = docker_archive(tmp_path / "img.tar", [other], cfg)
    with pytest.raises(ImageError) as exc:
        oci.load_image(path)
    _assert_names(exc, path, "digest mismatch", "layer0/layer.tar")


def test_two_images_are_refused_with_their_names(tmp_path):
    oci_layout(tmp_path / "lay", [BASE], images=2)
    with pytest.raises(ImageError) as exc:
        oci.load_image(tmp_path / "lay")
    _assert_names(exc, tmp_path / "lay", "2 images", "t1", "t2")
    path = docker_archive(tmp_path / "img.tar", [BASE], config([BASE]), images=2)
    with pytest.raises(ImageError) as exc:
        oci.load_image(path)
    _assert_names(exc, path, "2 images", "example/cam:1", "example/other0:1")


def test_platform_and_media_type(tmp_path):
    oci_layout(tmp_path / "arm", [BASE], platform={"os": "linux", "architecture": "arm64"})
    with pytest.raises(ImageError) as exc:
        oci.load_image(tmp_path / "arm")
    _assert_names(exc, tmp_path / "arm", "linux/amd64", "linux/arm64")
    oci_layout(tmp_path / "arm2", [BASE], config([BASE], arch="arm64"))
    with pytest.raises(ImageError) as exc:
        oci.load_image(tmp_path / "arm2")
    _assert_names(exc, tmp_path / "arm2", "linux/arm64", "expected linux/amd64")
    files = oci_layout(tmp_path / "zst", [BASE], gz=False)
    mname = next(n for n, b in files.items() if oci.OCI_MANIFEST.encode() in b and n.startswith("blobs/"))
    manifest = json.loads(files[mname])
    manifest["layers"][0]["mediaType"] = "application/vnd.oci.image.layer.v1.tar+zstd"
    mb = _jb(manifest)
    (tmp_path / "zst" / ("blobs/sha256/" + _sha(mb)[7:])).write_bytes(mb)
    index = json.loads(files["index.json"])
    index["manifests"][0].update(digest=_sha(mb), size=len(mb))
    (tmp_path / "zst" / "index.json").write_bytes(_jb(index))
    with pytest.raises(ImageError) as exc:
        oci.load_image(tmp_path / "zst")
    _assert_names(exc, tmp_path / "zst", "unsupported media type", "zstd")


# ---- unpacking ---------------------------------------------------------------------------------------


def _load(tmp_path: Path, layers: list[bytes], name="lay") -> oci.Image:
    oci_layout(tmp_path / name, layers, config(layers, cmd=["/bin/app"]))
    return oci.load_image(tmp_path / name)


def test_unpack_applies_whiteouts_in_order(tmp_path):
    l1 = layer(("a/", None), ("a/x", "x"), ("a/y", "y"), ("b/", None), ("b/old", "old"), ("b/sub/", None),
               ("b/sub/deep", "d"), ("c", "c1"))
    l2 = layer(("a/.wh.x", ""), ("b/new", "new"), ("b/.wh..wh..opq", ""), ("c", "c2"), ("d", "->c"))
    l3 = layer((".wh.d", ""), ("a/x", "x again"))
    rootfs, now = oci.unpack(_load(tmp_path, [l1, l2, l3]), tmp_path / "cache")
    assert now
    assert sorted(os.listdir(rootfs / "a")) == ["x", "y"] and (rootfs / "a" / "x").read_text() == "x again"
    assert sorted(os.listdir(rootfs / "b")) == ["new"]  # opaque: lower entries gone, this layer's kept
    assert (rootfs / "c").read_text() == "c2" and not os.path.lexists(rootfs / "d")
    assert not any(n.startswith(".wh.") for _, _, fs in os.walk(rootfs) for n in fs)


@pytest.mark.parametrize("entry", [("../evil", "x"), ("/etc/evil", "x"), ("a/../../evil", "x"),
                                   ("hl", "=>../outside")])
def test_unpack_refuses_path_traversal(tmp_path, entry):
    im = _load(tmp_path, [layer(("a/", None), entry)])
    with pytest.raises(ImageError) as exc:
        oci.unpack(im, tmp_path / "cache")
    assert "refused" in str(exc.value) and str(im.source) in str(exc.value)
    assert not (tmp_path / "evil").exists() and not list((tmp_path / "cache").glob("*/rootfs"))
    assert not list((tmp_path / "cache").glob(".tmp-*"))


def test_unpack_never_writes_through_symlinks(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text("host file\n")
    l1 = layer(("etc", f"->{outside}"), ("up", "->../../../../../../.."), ("pw", f"->{outside}/passwd"))
    l2 = layer(("etc/passwd", "image file\n"), (f"up{outside}/planted", "x"), ("pw", "replaced\n"))
    rootfs, _ = oci.unpack(_load(tmp_path, [l1, l2]), tmp_path / "cache")
    assert (outside / "passwd").read_text() == "host file\n" and not (outside / "planted").exists()
    # followed as the container would: inside the root filesystem
    assert (rootfs / str(outside).lstrip("/") / "passwd").read_text() == "image file\n"
    assert (rootfs / str(outside).lstrip("/") / "planted").read_text() == "x"
    assert (rootfs / "pw").read_text() == "replaced\n" and not (rootfs / "pw").is_symlink()


def test_unpack_is_cached_and_atomic(tmp_path):
    im = _load(tmp_path, [BASE])
    cache = tmp_path / "cache"
    stale = cache / f".tmp-{im.key}-99999"
    stale.mkdir(parents=True)
    (stale / "half").write_text("x")
    rootfs, now = oci.unpack(im, cache)
    assert now and rootfs == cache / im.key / "rootfs" and not stale.exists()
    assert json.loads((cache / im.key / "image.json").read_text())["digest"] == im.digest
    assert oci.unpack(im, cache) == (rootfs, False)
    # a layer whose content does not match its diff_id never becomes a cached root filesystem
    bad = oci.Image(**{**im.__dict__, "digest": "sha256:" + "1" * 64,
                       "layers": [oci.Layer(im.layers[0].name, im.layers[0].media_type, "sha256:" + "0" * 64)]})
    with pytest.raises(ImageError, match="digest mismatch"):
        oci.unpack(bad, cache)
    assert not (cache / bad.key).exists() and not list(cache.glob(".tmp-*"))


# ---- the runtime bundle ----------------------------------------------------------------------------


def _bundle(tmp_path: Path, image: oci.Image | None = None, **kw) -> dict:
    im = image or _load(tmp_path, [BASE], name=f"lay{len(list(tmp_path.iterdir()))}")
    rootfs, _ = oci.unpack(im, tmp_path / "cache")
    args = dict(netns="rn-abc-h1", args=None, entrypoint=None, env={}, cwd=None, uid=None, gid=None,
                hosts="198.18.0.1 a\n", resolv="options timeout:1\n", init=False)
    args.update(kw)
    b = tmp_path / f"bundle{len(list(tmp_path.glob('bundle*')))}"
    ocibundle.prepare_bundle(im, rootfs, b, **args)
    return json.loads((b / "config.json").read_text()) | {"_bundle": b}


def _image_with(tmp_path: Path, name: str, **cfg) -> oci.Image:
    oci_layout(tmp_path / name, [BASE], config([BASE], **cfg))
    return oci.load_image(tmp_path / name)


def test_bundle_args_follow_docker_semantics(tmp_path):
    im = _image_with(tmp_path, "i1", entrypoint=["/bin/app", "-v"], cmd=["--rate", "5"])
    assert _bundle(tmp_path, im)["process"]["args"] == ["/bin/app", "-v", "--rate", "5"]
    assert _bundle(tmp_path, im, args=["--rate", "9"])["process"]["args"] == ["/bin/app", "-v", "--rate", "9"]
    assert _bundle(tmp_path, im, args=[])["process"]["args"] == ["/bin/app", "-v"]
    # a given entrypoint drops the image's Cmd (docker run --entrypoint, Kubernetes command)
    assert _bundle(tmp_path, im, entrypoint=["/bin/sh", "-c"])["process"]["args"] == ["/bin/sh", "-c"]
    assert _bundle(tmp_path, im, entrypoint=["/bin/sh", "-c"], args=["echo"])["process"]["args"] == \
        ["/bin/sh", "-c", "echo"]
    im2 = _image_with(tmp_path, "i2", cmd=["/bin/app"])
    assert _bundle(tmp_path, im2)["process"]["args"] == ["/bin/app"]
    im3 = _image_with(tmp_path, "i3")
    with pytest.raises(ImageError, match="no Entrypoint or Cmd"):
        _bundle(tmp_path, im3)


def test_bundle_env_cwd_netns_mounts(tmp_path):
    im = _image_with(tmp_path, "i1", cmd=["/bin/app"], env=["A=1", "B=2"], workdir="/data")
    c = _bundle(tmp_path, im, env={"B": "3", "C": "4"}, binds=[(str(tmp_path), "/work", False),
                                                               (str(tmp_path / "i1"), "/in", True)],
                hostname="cam1")
    p = c["process"]
    assert p["env"] == ["A=1", "B=3", "C=4", f"PATH={oci.DEFAULT_PATH}"]
    assert p["cwd"] == "/data" and p["terminal"] is False
    assert "CAP_NET_RAW" in p["capabilities"]["effective"]
    assert set(ocibundle.RUNC_DEFAULT_CAPS) <= set(p["capabilities"]["bounding"])
    ns = {n["type"]: n.get("path") for n in c["linux"]["namespaces"]}
    assert ns == {"pid": None, "network": "/run/netns/rn-abc-h1", "ipc": None, "uts": None, "mount": None}
    assert c["linux"]["cgroupsPath"].startswith("/roughnet/") and c["hostname"] == "cam1"
    mounts = {m["destination"]: m for m in c["mounts"]}
    for d in ("/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys"):
        assert d in mounts
    b = c["_bundle"]
    assert mounts["/etc/hosts"]["source"] == str(b / "hosts") and "ro" in mounts["/etc/hosts"]["options"]
    assert (b / "hosts").read_text() == "198.18.0.1 a\n" and (b / "resolv.conf").read_text() == "options timeout:1\n"
    assert mounts["/work"]["source"] == str(tmp_path) and "rw" in mounts["/work"]["options"]
    assert "ro" in mounts["/in"]["options"]
    assert c["root"] == {"path": "rootfs", "readonly": False}
    ov = json.loads((b / "overlay.json").read_text())
    assert ov["lower"].endswith("/rootfs") and ov["upper"] == str(b / "overlay" / "upper")
    assert _bundle(tmp_path, im, cwd="/else")["process"]["cwd"] == "/else"
    assert _bundle(tmp_path, _image_with(tmp_path, "i2", cmd=["x"]))["process"]["cwd"] == "/"


@pytest.mark.parametrize("user,uid,gid,want", [
    ("", None, None, {"uid": 0, "gid": 0}),
    ("cam", None, None, {"uid": 1000, "gid": 1000, "additionalGids": [44]}),
    ("cam:video", None, None, {"uid": 1000, "gid": 44}),
    ("1000", None, None, {"uid": 1000, "gid": 1000, "additionalGids": [44]}),
    ("1234:5", None, None, {"uid": 1234, "gid": 5}),
    ("4321", None, None, {"uid": 4321, "gid": 0}),
    ("cam", 0, None, {"uid": 0, "gid": 0}),
    ("cam", 7, 8, {"uid": 7, "gid": 8}),
])
def test_bundle_user_resolution(tmp_path, user, uid, gid, want):
    im = _image_with(tmp_path, "u", cmd=["/bin/app"], user=user)
    user_cfg = _bundle(tmp_path, im, uid=uid, gid=gid)["process"]["user"]
    assert user_cfg == want


@pytest.mark.parametrize("user", ["nosuch", "cam:nogroup"])
def test_bundle_unresolvable_user(tmp_path, user):
    im = _image_with(tmp_path, "u", cmd=["/bin/app"], user=user)
    with pytest.raises(ImageError) as exc:
        _bundle(tmp_path, im)
    _assert_names(exc, im.source, user.split(":")[-1])


def test_bundle_init_and_run_argv(tmp_path):
    im = _image_with(tmp_path, "i", cmd=["/bin/app"])
    if ocibundle.find_init() is not None:
        c = _bundle(tmp_path, im, init=None)
        assert c["process"]["args"] == [ocibundle.INIT_IN_CONTAINER, "--", "/bin/app"]
        assert any(m["destination"] == ocibundle.INIT_IN_CONTAINER for m in c["mounts"])
    c = _bundle(tmp_path, im, init=False)
    assert c["process"]["args"] == ["/bin/app"]
    if shutil.which("runc") or os.path.exists("/usr/sbin/runc"):
        argv = ocibundle.run_argv(c["_bundle"], "rn-x-1", Path("/run/x"))
        assert argv[-6:] == ["--root", "/run/x", "run", "--bundle", str(c["_bundle"]), "rn-x-1"]
        assert argv[3] == str(c["_bundle"] / ocibundle.WRAPPER)
    with pytest.raises(ImageError):
        ocibundle.run_argv(c["_bundle"], "bad id/")
    with pytest.raises(ImageError, match="network namespace"):
        _bundle(tmp_path, im, netns="../x")


def test_remove_bundle_refuses_a_foreign_folder(tmp_path):
    (tmp_path / "keep").mkdir()
    with pytest.raises(ImageError, match="not a runtime bundle"):
        ocibundle.remove_bundle(tmp_path / "keep")
    c = _bundle(tmp_path)
    ocibundle.remove_bundle(c["_bundle"])
    assert not c["_bundle"].exists()
    ocibundle.remove_bundle(c["_bundle"])  # already gone: quiet


@pytest.mark.skipif(not Path("/bin/busybox").is_file(), reason="needs busybox-static (/bin/busybox)")
def test_build_test_image_is_reproducible(tmp_path):
    kw = dict(name="roughnet.local/t:1", entrypoint=["/bin/sh", "-c"], cmd=["echo hi"], env={"A": "1"},
              working_dir="/w")
    a = ocibundle.build_test_image(tmp_path / "a.tar", **kw)
    b = ocibundle.build_test_image(tmp_path / "b.tar", **kw)
    assert a.read_bytes() == b.read_bytes()
    im = oci.load_image(a)
    assert im.entrypoint == ["/bin/sh", "-c"] and im.cmd == ["echo hi"] and "A=1" in im.env and im.working_dir == "/w"
    rootfs, _ = oci.unpack(im, tmp_path / "cache")
    assert os.readlink(rootfs / "bin" / "sh") == "busybox" and (rootfs / "tmp").stat().st_mode & 0o7777 == 0o1777
    assert "nobody" in (rootfs / "etc" / "passwd").read_text() and (rootfs / "w").is_dir()
