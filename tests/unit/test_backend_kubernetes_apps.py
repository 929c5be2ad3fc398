"""User processes on the kubernetes backend without a cluster: what preflight refuses, the pods' parts, the argv
rn-exec gets, the usage read from a pod's /proc, deaths by signal from kubectl's exit codes.

On a real cluster: tests/integration/test_kubernetes_apps.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from roughnet.apps.launch import AppProcess
from roughnet.apps.ocibundle import build_test_image
from roughnet.backends.kubernetes import KubernetesBackend
from roughnet.backends.kubernetes.apps import (PodApps, check, container_name, image_ref, in_image, pod_parts,
                                               tree_usage)
from roughnet.backends.kubernetes.env import pod_manifest
from roughnet.backends.kubernetes.kubectl import Kubectl
from roughnet.errors import PreflightError
from roughnet.kube.image import RN_EXEC, RN_EXEC_SOURCE
from roughnet.spec import loads
from roughnet.plan import sweep_from_scenario

IMAGE = "roughnet.local/roughnet:test"
BASE = """
[scenario]
name = "k8s-apps"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
delay = "5 ms"
"""


def plan(tmp_path: Path, procs: str):
    src = tmp_path / "s.toml"
    src.write_text(BASE + procs)
    return sweep_from_scenario(loads(src.read_text(), str(src)), str(src))


def facts() -> dict:
    node = {"ready": True, "schedulable": True, "kernel": "6.1", "os": "Debian", "kubelet": "v1.32.13",
            "runtime": "containerd://1.6.20", "pod_cidr": None, "images": [IMAGE]}
    return {"server_version": "v1.32.13", "nodes": {"node1": dict(node), "node2": dict(node)}}


def backend(local: bool = True) -> KubernetesBackend:
    return KubernetesBackend(Kubectl("kubectl", Path("/nonexistent"), "roughnet"), IMAGE, local)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("img")
    return build_test_image(d / "srv.oci.tar", name="roughnet.local/srv:t", entrypoint=["/bin/busybox", "sleep"],
                            cmd=["5"], working_dir="/data")


def image_proc(tmp_path: Path, archive: Path, name: str = "srv", host: str = "b", extra: str = "") -> str:
    (tmp_path / "srv.oci.tar").write_bytes(archive.read_bytes())
    return f'[[process]]\nname = "{name}"\nhost = "{host}"\nimage = "srv.oci.tar"\n{extra}'


def test_a_scenario_with_processes_passes_preflight_and_names_each_image_by_its_config_digest(tmp_path, archive):
    (tmp_path / "probe.sh").write_text("#!/bin/sh\nping -c 1 b\n")
    sweep = plan(tmp_path, image_proc(tmp_path, archive) +
                 '[[process]]\nname = "probe"\nhost = "a"\ncommand = ["./probe.sh"]\nfiles = ["probe.sh"]\n'
                 '[[process]]\nname = "sleeper"\nhost = "a"\ncommand = ["sleep", "1"]\n')
    b = backend()
    b.check(sweep, facts())
    run = sweep.runs[0]
    from roughnet.apps.oci import load_image

    digest = load_image(tmp_path / "srv.oci.tar").digest
    assert b.app_refs[run.run_id] == {"srv": image_ref(digest)}
    assert image_ref(digest) == "roughnet.local/app:" + digest.split(":")[1][:32]


@pytest.mark.parametrize("command,words", [
    ('["python3", "x.py"]', ["command 'python3' is not in roughnet's image", "image = ...", "files"]),
    ('["/usr/bin/iperf3", "-s"]', ["command '/usr/bin/iperf3' is not in roughnet's image"]),
    ('["./missing.sh"]', ["command './missing.sh' is not one of its files"]),
])
def test_a_command_the_pod_cannot_run_is_refused_before_any_pod_exists(tmp_path, command, words):
    sweep = plan(tmp_path, f'[[process]]\nname = "p"\nhost = "a"\ncommand = {command}\n')
    with pytest.raises(PreflightError) as e:
        backend().check(sweep, facts())
    for w in words:
        assert w in str(e.value)


def test_an_image_on_a_cluster_other_than_roughnets_local_one_is_refused(tmp_path, archive):
    sweep = plan(tmp_path, image_proc(tmp_path, archive))
    with pytest.raises(PreflightError, match="imports image archives into its local cluster only"):
        backend(local=False).check(sweep, facts())


def test_an_image_the_cluster_pulls_runs_its_given_entrypoint_on_any_cluster(tmp_path):
    sweep = plan(tmp_path, '[[process]]\nname = "app"\nhost = "b"\nimage_ref = "registry.example/team/app:1.4"\n'
                           'entrypoint = ["/app/bin/server"]\nargs = ["--port", "80"]\n')
    b = backend(local=False)
    b.check(sweep, facts())
    run = sweep.runs[0]
    assert b.app_refs[run.run_id] == {"app": "registry.example/team/app:1.4"}
    parts = pod_parts(run, "b", b.app_refs[run.run_id], IMAGE, "IfNotPresent", "deadbeef", privileged=False)
    (app,) = parts["containers"]
    assert app["image"] == "registry.example/team/app:1.4" and app["imagePullPolicy"] == "IfNotPresent"
    a, rt = _app(tmp_path, sweep, "app")
    argv, container, _ = rt.argv(a)
    assert container == "app-app" and argv[argv.index("--cwd") + 1] == "/"
    assert argv[argv.index("--") + 1:] == ["/app/bin/server", "--port", "80"]


def test_an_image_the_cluster_pulls_is_refused_on_the_namespace_backend(tmp_path):
    from roughnet.apps import preflight

    sweep = plan(tmp_path, '[[process]]\nname = "app"\nhost = "b"\nimage_ref = "r.example/app:1"\n'
                           'entrypoint = ["/app"]\n')
    with pytest.raises(PreflightError, match="image_ref 'r.example/app:1' is an image a cluster pulls"):
        preflight(sweep)


def test_a_malformed_image_is_refused_naming_it(tmp_path):
    (tmp_path / "bad.oci.tar").write_bytes(b"not a tar")
    sweep = plan(tmp_path, '[[process]]\nname = "p"\nhost = "a"\nimage = "bad.oci.tar"\n')
    with pytest.raises(PreflightError, match="process 'p': image bad.oci.tar"):
        backend().check(sweep, facts())


def test_two_names_that_make_one_container_name_are_refused(tmp_path, archive):
    sweep = plan(tmp_path, image_proc(tmp_path, archive, "a_b") + image_proc(tmp_path, archive, "a-b", "a"))
    with pytest.raises(PreflightError, match="would both be container app-a-b"):
        backend().check(sweep, facts())


def test_programs_of_roughnets_image_by_name_or_path():
    assert in_image("sleep") and in_image("/bin/sleep") and in_image("mosquitto") and in_image(RN_EXEC)
    assert not in_image("python3") and not in_image("/usr/bin/sleep") and not in_image("/bin/python3")


def test_a_pod_with_an_image_process_gets_its_container_rn_exec_and_shared_pids(tmp_path, archive):
    sweep = plan(tmp_path, image_proc(tmp_path, archive) +
                 '[[process]]\nname = "cmd"\nhost = "a"\ncommand = ["sleep", "1"]\n')
    run = sweep.runs[0]
    refs = {"srv": "roughnet.local/app:abc"}
    b_parts = pod_parts(run, "b", refs, IMAGE, "Never", "deadbeef", privileged=True)
    m = pod_manifest("deadbeef", run.run_id, "b", "node1", IMAGE, "Never", privileged=True, apps=b_parts)
    spec = m["spec"]
    assert spec["shareProcessNamespace"] is True
    host, app = spec["containers"]
    assert host["name"] == "host" and app["name"] == container_name("srv") == "app-srv"
    assert app["image"] == "roughnet.local/app:abc" and app["imagePullPolicy"] == "Never"
    assert app["command"] == ["/rn/rn-exec", "--idle"]
    assert app["securityContext"] == {"runAsUser": 0, "runAsGroup": 0,
                                      "capabilities": {"add": ["NET_ADMIN", "NET_RAW", "SYS_ADMIN"]}}
    assert host["securityContext"] == {"capabilities": {"add": ["NET_ADMIN", "NET_RAW", "SYS_ADMIN"]}}  # not privileged
    assert {"name": "rn-work", "mountPath": "/work", "subPath": "srv"} in app["volumeMounts"]
    assert {"name": "rn-work", "mountPath": "/var/lib/roughnet/work/deadbeef"} in host["volumeMounts"]
    (init,) = spec["initContainers"]
    assert init["image"] == IMAGE and init["command"] == ["/bin/busybox", "cp", RN_EXEC, "/rn/rn-exec"]
    # a pod with only commands: the folders, no other container, its own PID namespace
    a_parts = pod_parts(run, "a", refs, IMAGE, "Never", "deadbeef", privileged=False)
    a = pod_manifest("deadbeef", run.run_id, "a", "node1", IMAGE, "Never", apps=a_parts)["spec"]
    assert len(a["containers"]) == 1 and "shareProcessNamespace" not in a and "initContainers" not in a
    assert [v["name"] for v in a["volumes"]] == ["rn", "rn-work"]
    # an image container is not privileged when its pod carries no wire
    plain = pod_parts(run, "b", refs, IMAGE, "Never", "deadbeef", privileged=False)
    assert plain["containers"][0]["securityContext"] == {"runAsUser": 0, "runAsGroup": 0}
    # a pod without processes is as before
    assert pod_parts(run, "zz", refs, IMAGE, "Never", "deadbeef", privileged=False) == {}


def _app(tmp_path, sweep, name, env_extra=None):
    run = sweep.runs[0]
    spec = next(p for p in run.processes if p.name == name)
    topo = SimpleNamespace(ns=lambda h: f"ns-{h}")
    app = AppProcess(spec, topo, run, tmp_path, "deadbeef")
    wire = SimpleNamespace(inner_pid=42)
    env = SimpleNamespace(kubectl=None, pods={"a": "rn-deadbeef-a", "b": "rn-deadbeef-b"},
                          podwires={"a": wire}, _procs=[])
    return app, PodApps(env)


def test_rn_exec_argv_of_a_command_behind_the_pods_wire_and_of_an_image(tmp_path, archive):
    (tmp_path / "probe.sh").write_text("#!/bin/sh\n")
    sweep = plan(tmp_path, image_proc(tmp_path, archive, extra='env = { MODE = "x" }\nargs = ["7"]\n') +
                 '[[process]]\nname = "probe"\nhost = "a"\ncommand = ["./probe.sh", "-v"]\nfiles = ["probe.sh"]\n')
    app, rt = _app(tmp_path, sweep, "probe")
    argv, container, pidfile = rt.argv(app)
    assert container == "host" and pidfile == "/rn/probe-0.pid"
    sep = argv.index("--")
    assert argv[:3] == [RN_EXEC, "--pidfile", "/rn/probe-0.pid"]
    assert argv[3:5] == ["--netns-of", "42"]  # the wire's inner namespace
    assert argv[5:7] == ["--cwd", str(app.workdir)]
    assert argv[7:11] == ["--uid", "65534", "--gid", "65534"]
    assert argv[sep + 1:] == [str(app.workdir / "probe.sh"), "-v"]
    assert "--env" in argv and "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in argv
    app, rt = _app(tmp_path, sweep, "srv")
    argv, container, pidfile = rt.argv(app)
    sep = argv.index("--")
    assert container == "app-srv" and argv[0] == "/rn/rn-exec" and "--netns-of" not in argv  # host b: no wire
    assert argv[argv.index("--cwd") + 1] == "/data"  # the image's WorkingDir
    assert argv[sep + 1:] == ["/bin/busybox", "sleep", "7"]  # the image's entrypoint, args instead of its Cmd
    assert "MODE=x" in argv and not any(a.startswith("PATH=") for a in argv)  # the image keeps its own PATH


def test_the_rn_exec_source_is_what_the_image_ships():
    assert RN_EXEC_SOURCE.is_file() and RN_EXEC == "/usr/local/bin/rn-exec"


def test_rn_exec_drops_to_the_user_in_the_folder_with_the_variables_and_keeps_its_pid(tmp_path):
    import os
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (make system-deps installs it)")
    binary = tmp_path / "rn-exec"
    subprocess.run(["gcc", "-static", "-O2", "-o", str(binary), str(RN_EXEC_SOURCE)], check=True)
    pidfile = tmp_path / "p.pid"
    argv = [str(binary), "--pidfile", str(pidfile), "--cwd", "/", "--env", "X=1", "--", "/bin/sh", "-c",
            'echo "$$ $X $(pwd) $(id -u)"']
    if os.geteuid() == 0:
        argv[5:5] = ["--uid", "65534", "--gid", "65534"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == pidfile.read_text().strip()  # the program has the pid rn-exec wrote
    assert out[1:3] == ["1", "/"]
    assert out[3] == ("65534" if os.geteuid() == 0 else str(os.geteuid()))
    bad = subprocess.run([str(binary), "--pidfile", str(pidfile), "--", "/nonexistent/prog"], capture_output=True,
                         text=True)
    assert bad.returncode == 127 and "rn-exec: exec /nonexistent/prog" in bad.stderr
    assert subprocess.run([str(binary), "--uid", "1", "--", "true"], capture_output=True).returncode == 2


def test_usage_of_a_program_and_its_children_from_a_pods_proc():
    stat = ("1 (pause) S 0 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 1 1 1\n"
            "7 (sh) S 1 7 7 0 -1 0 0 0 0 0 100 50 30 20 20 0 1 0 1 1 1\n"
            "9 (iperf3) R 7 7 7 0 -1 0 0 0 0 0 200 100 0 0 20 0 1 0 1 1 1\n"
            "11 (other) S 1 11 11 0 -1 0 0 0 0 0 900 900 0 0 20 0 1 0 1 1 1\n"
            "12 (zombie) Z 9 12 12 0 -1 0 0 0 0 0 900 900 0 0 20 0 1 0 1 1 1\n")
    rss = ("/proc/1/status:VmRSS:\t     100 kB\n/proc/7/status:VmRSS:\t    1000 kB\n"
           "/proc/9/status:VmRSS:\t    3000 kB\n/proc/11/status:VmRSS:\t    9000 kB\n")
    cpu, mem = tree_usage(stat + rss, 7)
    import os

    tck = os.sysconf("SC_CLK_TCK")
    assert cpu == pytest.approx((100 + 50 + 30 + 20 + 200 + 100) / tck)
    assert mem == 4000 * 1024
    assert tree_usage(stat + rss, 99) is None


@pytest.mark.parametrize("code,final", [(143, {"signal": "SIGTERM"}), (137, {"signal": "SIGKILL"}),
                                        (130, {"signal": "SIGINT"}), (0, None), (3, None), (128, None),
                                        (255, None), (None, None)])
def test_kubectl_exit_codes_of_a_death_by_signal_are_the_signal(code, final):
    assert PodApps.final_state(code) == final
