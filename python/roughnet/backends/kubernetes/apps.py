"""User processes ([[process]], docs/applications.md) in a run's pods: the kubernetes backend's side.

A ``command`` runs in its host's pod, in roughnet's image: one of the image's programs (busybox's
applets, mosquitto, nats-server, roughnet-agent) or a script among the process's ``files`` (run by the
image's /bin/sh through its #! line).  An ``image`` runs as a container of its own in the host's pod: the
archive is imported into the local cluster's containerd (``load_images``, once per image and node; it
stays there as a cache) under ``roughnet.local/app:<config digest>``, and the container idles
(``rn-exec --idle``) until roughnet starts the image's program in it with ``kubectl exec``.

Either way ``rn-exec`` (scripts/kubernetes/rn-exec.c, static, in roughnet's image and copied into an
image's container by an init container) starts the program: it writes the pid file, joins the pod's
inner network namespace when the pod carries a wire (backends.kubernetes.podwire), changes to the
working folder, drops to the process's user, sets its variables and execs the program, which thus keeps
the pid roughnet signals.  A pod with processes has an emptyDir ``/rn`` (rn-exec, pid files) and one for
the working folders (``/var/lib/roughnet/work/<token>`` in the ``host`` container, a process's own folder
at ``/work`` in its image's container); a pod with an image shares one PID namespace between its
containers, so pid files, signals and /proc reads all go through the ``host`` container.  The working
folders are filled before the processes start and brought back to this machine when they have ended.

``PodApps`` is the runtime ``apps.launch.AppProcess`` and ``apps.supervisor.Supervisor`` use on this
backend (``PodEnvironment.process_runtime``).  What it cannot do (said in the record or refused at
preflight): sample the processes' sockets with sock_diag, tell a death by signal N from an exit with
128 + N (kubectl exec reports both as the exit code; both are taken as the signal), import an image into
a cluster other than roughnet's local one.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import PreflightError, TopologyError
from ...kube.image import BUSYBOX_APPLETS, RN_EXEC
from .kubectl import Kubectl
from .process import PodProcess

log = logging.getLogger(__name__)

#: The emptyDir of rn-exec and the pid files, in every container of a pod with processes.
RN_DIR = "/rn"
#: Where a process's working folder is inside its image's container (as on the namespace backend).
IMAGE_WORK = "/work"
#: Repository of the user's images in the local cluster's containerd (tag: the config digest).
APP_REPO = "roughnet.local/app"
#: roughnet's image's programs a command may name (besides busybox's applets), by name or image path.
IMAGE_PROGRAMS = {"roughnet-agent": "/usr/local/bin/roughnet-agent", "roughnet-wire": "/usr/local/bin/roughnet-wire",
                  "rn-exec": RN_EXEC, "mosquitto": "/usr/sbin/mosquitto", "nats-server": "/usr/bin/nats-server",
                  "ip": "/usr/bin/ip", "ethtool": "/usr/sbin/ethtool", "busybox": "/bin/busybox"}
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Why the record has no TCP figures of a process here.
NO_SOCKETS = "not sampled on the kubernetes backend (sock_diag reads this machine's namespaces, not a pod's)"
#: How long importing one image into one node may take.
IMPORT_TIMEOUT_S = 300


def image_ref(config_digest: str) -> str:
    """The name an imported image has in the local cluster: ``roughnet.local/app:<hex of its config digest>``."""
    return f"{APP_REPO}:{config_digest.split(':', 1)[-1][:32]}"


def container_name(name: str) -> str:
    """The container of an image process (a DNS label: the process name with '_' as '-')."""
    return "app-" + name.replace("_", "-")


def in_image(prog: str) -> bool:
    """Whether roughnet's image has the program a command names (a name, or an absolute path there)."""
    applets = set(BUSYBOX_APPLETS)
    if prog.startswith("/"):
        return prog in IMAGE_PROGRAMS.values() or (prog.startswith("/bin/") and prog[5:] in applets)
    return prog in IMAGE_PROGRAMS or prog in applets


def check(run: Any, where: str, local: bool) -> dict[str, str]:
    """The run's processes can run on this cluster; {process name: image ref} of its image processes."""
    from ...apps.oci import ImageError, load_image
    from ...apps.launch import resolve_user

    refs: dict[str, str] = {}
    names: dict[str, str] = {}
    for p in run.processes:
        resolve_user(p.user)
        c = container_name(p.name)
        if c in names:
            raise PreflightError(f"{where}: processes {names[c]!r} and {p.name!r} would both be container {c}; "
                                 f"rename one (on the kubernetes backend '_' and '-' are the same in a name)")
        names[c] = p.name
        if p.image_ref is not None:  # pulled by the cluster (entrypoint given: the spec requires it)
            refs[p.name] = p.image_ref
            continue
        if p.image:
            if not local:
                raise PreflightError(f"{where}: process {p.name!r} runs image {p.image}; on the kubernetes backend "
                                     f"roughnet imports image archives into its local cluster only (`roughnet "
                                     f"cluster up`); push the image to a registry this cluster pulls from and name "
                                     f"it with `image_ref` (with `entrypoint`), or run it on the namespace backend")
            try:
                refs[p.name] = image_ref(load_image(Path(p.path(p.image))).digest)
            except ImageError as e:
                raise PreflightError(f"{where}: process {p.name!r}: image {p.image}: {e}") from e
            continue
        prog = p.command[0]
        if "/" in prog and not prog.startswith("/"):
            if not any(os.path.normpath(prog) == Path(f).name for f in p.files):
                raise PreflightError(f"{where}: process {p.name!r}: command {prog!r} is not one of its files")
        elif not in_image(prog):
            raise PreflightError(
                f"{where}: process {p.name!r}: command {prog!r} is not in roughnet's image, where a command runs "
                f"on the kubernetes backend (it has busybox's applets, mosquitto, nats-server, roughnet-agent); "
                f"give the program as an image of your own (`image = ...`; `roughnet image pack` builds one) or "
                f"as a script in `files` (run with ./name)")
    return refs


def pod_parts(run: Any, host: str, refs: Mapping[str, str], image: str, pull_policy: str, token: str,
              privileged: bool) -> dict[str, Any]:
    """What ``host``'s pod gets for its processes: volumes, the host container's mounts, an init container
    (rn-exec for the images' containers), one container per image process, a shared PID namespace."""
    procs = [p for p in run.processes if p.host == host]
    if not procs:
        return {}
    from ...apps.launch import WORK_ROOT

    parts: dict[str, Any] = {
        "volumes": [{"name": "rn", "emptyDir": {}}, {"name": "rn-work", "emptyDir": {}}],
        "host_mounts": [{"name": "rn", "mountPath": RN_DIR},
                        {"name": "rn-work", "mountPath": str(WORK_ROOT / token)}],
        "containers": [],
    }
    images = [p for p in procs if p.in_container]
    if not images:
        return parts
    parts["shareProcessNamespace"] = True
    parts["initContainers"] = [{
        "name": "rn-exec", "image": image, "imagePullPolicy": pull_policy,
        "command": ["/bin/busybox", "cp", RN_EXEC, f"{RN_DIR}/rn-exec"],
        "volumeMounts": [{"name": "rn", "mountPath": RN_DIR}],
    }]
    for p in images:
        security: dict[str, Any] = {"runAsUser": 0, "runAsGroup": 0}
        if privileged:  # joining the inner namespace behind the pod's wire: setns needs CAP_SYS_ADMIN, and
            # opening the holder's /proc/<pid>/ns/net needs every capability the holder (the host container) has
            security["capabilities"] = {"add": ["NET_ADMIN", "NET_RAW", "SYS_ADMIN"]}
        parts["containers"].append({
            "name": container_name(p.name), "image": refs[p.name],
            # an archive imported into the nodes is there; a reference the cluster pulls, when it is not
            "imagePullPolicy": "Never" if p.image else "IfNotPresent",
            "command": [f"{RN_DIR}/rn-exec", "--idle"],
            "volumeMounts": [{"name": "rn", "mountPath": RN_DIR},
                             {"name": "rn-work", "mountPath": IMAGE_WORK, "subPath": p.name}],
            "securityContext": security,
        })
    return parts


def load_images(cluster: Any, run: Any, placement: Mapping[str, str], refs: Mapping[str, str]) -> list[str]:
    """Import the run's image archives into the containerd of every node that runs one (skipped where the image
    is already there); what was imported, as "ref on node"."""
    from ...apps.oci import load_image

    done: list[str] = []
    wanted: dict[str, dict[str, Path]] = {}
    for p in run.processes:
        if p.image:
            wanted.setdefault(placement[p.host], {})[refs[p.name]] = Path(p.path(p.image))
    for node_name, images in sorted(wanted.items()):
        node = cluster.node(node_name)

        def ctr(*args: str, timeout: float = 60, node=node) -> subprocess.CompletedProcess:
            return subprocess.run(node.mount_ns_argv(["ctr", "-a", node.containerd_socket, "-n", "k8s.io", *args]),
                                  capture_output=True, text=True, timeout=timeout, check=False)
        listed = set(ctr("images", "ls", "-q").stdout.split())
        for ref, path in sorted(images.items()):
            if ref in listed:
                continue
            src, tmp = path, None
            if path.is_dir():  # an OCI layout folder: ctr imports archives only
                tmp = _tar_layout(path)
                src = tmp
            try:
                res = ctr("images", "import", "--digests", str(src), timeout=IMPORT_TIMEOUT_S)
            finally:
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
            names = [line.split()[1] for line in res.stdout.splitlines() if line.startswith("unpacking ")]
            if res.returncode != 0 or not names:
                raise TopologyError(f"importing {path} into {node_name}'s containerd failed (exit {res.returncode}): "
                                    f"{(res.stderr or res.stdout).strip()[-300:]}")
            tag = ctr("images", "tag", "--force", names[-1], ref)
            if tag.returncode != 0:
                raise TopologyError(f"naming image {path} {ref} on {node_name} failed: {tag.stderr.strip()[-300:]}")
            extra = [n for n in names if n != ref and n not in listed]
            if extra:
                ctr("images", "rm", *extra)
            log.info("image %s imported into %s as %s (%s)", path, node_name, ref, load_image(path).digest[:19])
            done.append(f"{ref} on {node_name}")
    return done


def _tar_layout(folder: Path) -> Path:
    import tempfile

    fd, name = tempfile.mkstemp(prefix="rn-layout-", suffix=".tar")
    with open(fd, "wb") as f, tarfile.open(fileobj=f, mode="w") as tar:
        for item in sorted(folder.iterdir()):
            tar.add(item, arcname=item.name)
    return Path(name)


class PodApps:
    """The runtime of a run's user processes in its pods (see the module docstring)."""

    sockets_note = NO_SOCKETS

    def __init__(self, env: Any):
        self.env = env
        self.kubectl: Kubectl = env.kubectl
        self._remote_pids: dict[int, int] = {}  # local kubectl pid -> the program's pid in the pod

    def _pod(self, app: Any) -> str:
        return self.env.pods[app.spec.host]

    def write_etc(self, run: Any, host: str) -> None:
        """The run's hosts in the pod's /etc/hosts (kubelet's file, one per pod: every container sees it)."""
        lines = [f"{self.env.address(h, host)}\t{h}" for h in run.host_names() if h != host]
        text = f"\n# added by roughnet: the scenario's hosts\n{chr(10).join(lines)}\n"
        res = self.kubectl.exec(self.env.pods[host], ["/bin/sh", "-c", "cat >> /etc/hosts"], stdin=text, timeout=60,
                                text=True)
        if res.returncode != 0:
            raise TopologyError(f"writing /etc/hosts in pod {self.env.pods[host]}: {res.stderr.strip()[-300:]}")

    def stage(self, app: Any) -> None:
        """The process's working folder (made on this machine by AppProcess.prepare) copied into its pod."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for item in sorted(app.workdir.iterdir()):
                tar.add(item, arcname=item.name)
        u = app.user
        script = 'mkdir -p "$0" && tar -x -C "$0" && chown -R "$1" "$0" && chmod 700 "$0"'
        res = self.kubectl.exec(self._pod(app), ["/bin/sh", "-c", script, str(app.workdir), f"{u.uid}:{u.gid}"],
                                stdin=buf.getvalue(), timeout=120)
        if res.returncode != 0:
            raise TopologyError(f"copying the files of process {app.name} into pod {self._pod(app)}: "
                                f"{res.stderr.decode(errors='replace').strip()[-300:]}")

    def argv(self, app: Any) -> tuple[list[str], str, str]:
        """(rn-exec's argv, the container it runs in, its pid file) for starting ``app`` now."""
        from ...apps.oci import load_image
        from ...apps.ocibundle import image_argv

        spec = app.spec
        pidfile = f"{RN_DIR}/{spec.name}-{app.restarts}.pid"
        variables = app.environment()
        if spec.in_container:
            if spec.image:
                image = load_image(Path(spec.path(spec.image)))
                prog = image_argv(image, spec.args, spec.entrypoint)
                cwd = spec.workdir or image.working_dir or "/"
            else:  # pulled by the cluster: its config is not here, so the scenario gave the entrypoint
                prog = [*(spec.entrypoint or ()), *(spec.args or ())]
                cwd = spec.workdir or "/"
            container, rn_exec = container_name(spec.name), f"{RN_DIR}/rn-exec"
            variables.pop("PATH", None)  # the image's own PATH (its config's Env, which the container has)
        else:
            prog = list(spec.command)
            if "/" in prog[0] and not prog[0].startswith("/"):
                prog[0] = str(app.workdir / Path(prog[0]).name)
            container, rn_exec, cwd = "host", RN_EXEC, str(app.workdir)
            variables["PATH"] = SYSTEM_PATH
        argv = [rn_exec, "--pidfile", pidfile]
        wire = self.env.podwires.get(spec.host)
        if wire is not None and wire.inner_pid is not None:  # the pod's programs live behind its wire
            argv += ["--netns-of", str(wire.inner_pid)]
        argv += ["--cwd", cwd]
        if app.user.uid != 0:
            argv += ["--uid", str(app.user.uid), "--gid", str(app.user.gid)]
        for k, v in variables.items():
            argv += ["--env", f"{k}={v}"]
        return [*argv, "--", *prog], container, pidfile

    def start(self, app: Any, ledger: Any, out: Any, err: Any) -> PodProcess:
        argv, container, pidfile = self.argv(app)
        pod = self._pod(app)
        proc = PodProcess(self.kubectl, pod, argv, app.name, container=container, pidfile=pidfile,
                          stdout=out, stderr=err)
        self.env._procs.append(proc)  # the environment's teardown ends it if it still runs
        from ...topo.ledger import process_start_time

        ledger.add("process", pid=proc.pid, start_time=process_start_time(proc.pid), ns=f"pod {pod}",
                   argv0=f"kubectl exec {container}", process=app.name)
        return proc

    def usage_reader(self, proc: PodProcess):
        """A ``UsageSampler`` read function: CPU and RSS of the program and its descendants in the pod."""
        def read(_pid: int) -> tuple[float, int] | None:
            pid = self._remote_pids.get(proc.pid)
            if pid is None:
                pid = proc.remote_pid(wait_s=0)
                if pid is None:
                    return None
                self._remote_pids[proc.pid] = pid
            return self.read_tree(proc.pod, pid)
        return read

    def read_tree(self, pod: str, pid: int) -> tuple[float, int] | None:
        """(CPU seconds, RSS bytes) of ``pid`` and its descendants in ``pod``; None when it is gone."""
        res = self.kubectl.exec(pod, ["/bin/sh", "-c", "cat /proc/[0-9]*/stat; grep -H VmRSS /proc/[0-9]*/status"],
                                timeout=30, text=True)
        if res.returncode not in (0, 1, 2):  # 1/2: a process ended between the glob and the read
            return None
        return tree_usage(res.stdout, pid)

    def fetch(self, app: Any) -> None:
        """The process's working folder in the pod brought back over this machine's copy (before it is kept)."""
        from ...apps.launch import COPY_LIMIT_BYTES

        res = self.kubectl.exec(self._pod(app), ["tar", "-c", "-C", str(app.workdir), "."], timeout=120)
        if res.returncode != 0:
            log.warning("process %s: its working folder could not be brought back from pod %s: %s", app.name,
                        self._pod(app), res.stderr.decode(errors="replace").strip()[-300:])
            return
        try:
            with tarfile.open(fileobj=io.BytesIO(res.stdout), mode="r") as tar:
                members, total = [], 0
                for m in tar.getmembers():
                    if m.isfile():
                        total += m.size
                        if total > COPY_LIMIT_BYTES:
                            log.warning("process %s: working folder over %d MiB; the rest is not kept", app.name,
                                        COPY_LIMIT_BYTES >> 20)
                            break
                    if m.isfile() or m.isdir():
                        members.append(m)
                tar.extractall(app.workdir, members=members, filter="data")
        except (tarfile.TarError, OSError) as e:
            log.warning("process %s: bringing its working folder back: %s", app.name, e)

    @staticmethod
    def final_state(code: int | None) -> dict[str, Any] | None:
        """kubectl exec reports a death by signal N as exit 128 + N: the signal, as on the namespace backend."""
        if code is not None and 128 < code < 128 + signal.NSIG:
            try:
                return {"signal": signal.Signals(code - 128).name}
            except ValueError:
                return None
        return None


def tree_usage(text: str, root: int) -> tuple[float, int] | None:
    """(CPU s, RSS bytes) of ``root`` and its descendants from ``cat /proc/*/stat`` and ``grep VmRSS`` output."""
    from ...apps.launch import _CLK_TCK

    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    rss: dict[int, int] = {}
    for line in text.splitlines():
        if line.startswith("/proc/"):
            path, _, rest = line.partition(":VmRSS:")
            pid_s = path.split("/")[2]
            if pid_s.isdigit() and rest.split():
                rss[int(pid_s)] = int(rest.split()[0]) * 1024
            continue
        head, sep, tail = line.rpartition(")")
        if not sep or not head.split(" ", 1)[0].isdigit():
            continue
        fields = tail.split()
        if len(fields) < 16 or fields[0] in ("Z", "X"):
            continue
        pid = int(head.split(" ", 1)[0])
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / _CLK_TCK
    if root not in cpu:
        return None
    tree, frontier = {root}, [root]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier and p not in tree]
        tree.update(kids)
        frontier = kids
    return sum(cpu[p] for p in tree), sum(rss.get(p, 0) for p in tree)
