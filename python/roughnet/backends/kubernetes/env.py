"""One run's environment on a Kubernetes cluster: a pod per host.

Owns the pods of one run: their manifests (labelled with the run token, placed
on the node the backend chose), creating them after the ledger names them,
waiting until they are Ready, the addresses the cluster gave them, starting
commands in them (``PodProcess``), copying the files a command names into the
pod first (configs, certificates: the same absolute paths as on this machine),
and deleting them again, waiting until they are gone.  It offers the same
methods as ``topo.Topology`` (the namespace backend's environment), so the
runner, the agents and the services modules use it unchanged.  Choosing nodes
and checking the cluster is the backend's (``backends.kubernetes``).
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import TopologyError
from ...links.wire import load_profile
from ...runspec import Link, Run
from ...topo.build import IfaceInfo
from ...topo.ledger import Ledger, process_start_time
from .apps import PodApps, pod_parts
from .kubectl import Kubectl, KubeError
from .podwire import OFFLOADS_OFF, PodWire, merge_counters, wire_config
from .process import PodConnector, PodProcess

log = logging.getLogger(__name__)

#: Label every pod of a run carries: its value is the run token (cleanup selects exactly these).
RUN_LABEL = "roughnet.io/run"
HOST_LABEL = "roughnet.io/host"
#: Where roughnet's own binaries are in its image (python/roughnet/kube/image.py puts them there).
IMAGE_BIN = "/usr/local/bin"
#: roughnet's own programs, which the image keeps in IMAGE_BIN wherever they are on this machine (the
#: brokers, mosquitto and nats-server, are in the image at the paths Debian gives them here).
IMAGE_PROGRAMS = frozenset({"roughnet-agent", "roughnet-wire"})
#: How long pods may take to become Ready (image already on the node: seconds).
READY_TIMEOUT_S = 180
#: Files larger than this are not copied into pods (configs and certificates are small).
STAGE_MAX_BYTES = 8 * 1024 * 1024
#: Files the run writes on this machine while it runs: never copied into a pod.
STAGE_SKIP_SUFFIXES = (".jsonl", ".stderr", ".log", ".pcap", ".pcapng")
#: Folder (in a staged folder) that receives the files a pod wrote there, at teardown.
FROM_POD_PREFIX = "from-pod-"


def pod_name(token: str, host: str) -> str:
    """``rn-<token>-<host>``: a DNS label (host names are ^[a-z][a-z0-9]{0,7}$, tokens 8 hex)."""
    return f"rn-{token}-{host}"


def pod_manifest(token: str, run_id: str, host: str, node: str, image: str, pull_policy: str,
                 privileged: bool = False, apps: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The pod of one host: one container ``host`` from roughnet's image that waits to be told what to run.

    ``privileged``: the pod carries a wire (backends.kubernetes.podwire), which needs a network namespace
    of its own inside the pod: CAP_SYS_ADMIN (unshare, nsenter) besides NET_ADMIN and NET_RAW, not a
    privileged container.  ``apps``: what the host's user processes add (backends.kubernetes.apps.pod_parts).
    """
    caps = ["NET_ADMIN", "NET_RAW", *(["SYS_ADMIN"] if privileged else [])]
    security: dict[str, Any] = {"capabilities": {"add": caps}}
    apps = apps or {}
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(token, host),
            "labels": {RUN_LABEL: token, HOST_LABEL: host, "app.kubernetes.io/managed-by": "roughnet"},
            "annotations": {"roughnet.io/run-id": run_id},
        },
        "spec": {
            # Pinned through the scheduler (as a DaemonSet pins its pods), so taints and resources still count.
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "containers": [{
                "name": "host",
                "image": image,
                "imagePullPolicy": pull_policy,
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"],
                "securityContext": security,
            }],
        },
    }
    spec = manifest["spec"]
    if apps.get("host_mounts"):
        spec["containers"][0]["volumeMounts"] = list(apps["host_mounts"])
    spec["containers"] += list(apps.get("containers", []))
    for key in ("volumes", "initContainers", "shareProcessNamespace"):
        if apps.get(key):
            spec[key] = apps[key]
    return manifest


class PodEnvironment:
    """The pods of one run (``topo.Topology``'s methods, for the runner)."""

    def __init__(self, run: Run, ledger: Ledger, kubectl: Kubectl, image: str, placement: Mapping[str, str],
                 pull_policy: str = "IfNotPresent", cluster: Mapping[str, Any] | None = None,
                 files: Path | None = None, wires: Mapping[str, Link] | None = None,
                 app_refs: Mapping[str, str] | None = None, load_images: Callable[[], Any] | None = None):
        self.spec = run
        self.ledger = ledger
        self.token = ledger.token
        self.kubectl = kubectl
        self.image = image
        self.placement = dict(placement)
        self.pull_policy = pull_policy
        self.cluster = dict(cluster or {})
        # Files a command names are copied into the pod only from here (the sweep's folder in the results).
        self.files = Path(files).resolve() if files is not None else None
        self._hosts = run.host_names()
        missing = [h for h in self._hosts if h not in self.placement]
        if missing:
            raise TopologyError(f"no node chosen for host(s) {', '.join(missing)}")
        self.pods = {h: pod_name(self.token, h) for h in self._hosts}
        self.wires = dict(wires or {})  # host -> the impaired link whose wire its pod carries
        self.app_refs = dict(app_refs or {})  # process name -> its image's name in the cluster (apps.image_ref)
        self._load_images = load_images  # imports the run's images into the nodes (apps.load_images)
        self.podwires: dict[str, PodWire] = {}
        self.ips: dict[str, str] = {}
        self.nodes: dict[str, str] = {}
        self._connectors = {h: PodConnector(kubectl, self.pods[h]) for h in self._hosts}
        self._procs: list[PodProcess] = []
        self._staged: dict[tuple[str, str], tuple[int, int]] = {}  # (host, path) -> (mtime_ns, size) copied
        self._staged_dirs: set[tuple[str, str]] = set()
        self.teardown_errors: list[str] = []
        self.build_s: float | None = None

    # ---- build ---------------------------------------------------------------------

    def build(self) -> None:
        """Create every host's pod (the ledger names them first) and wait until all are Ready."""
        t0 = time.monotonic()
        k = self.kubectl.to_dict()
        self.ledger.add("k8s-pods", selector=f"{RUN_LABEL}={self.token}", pods=sorted(self.pods.values()),
                        cleaner=__name__, what=f"{k['namespace']}/{RUN_LABEL}={self.token} on {k['kubeconfig']}", **k)
        if self._load_images is not None and self.app_refs:
            self._load_images()
        for host in self._hosts:
            parts = pod_parts(self.spec, host, self.app_refs, self.image, self.pull_policy, self.token,
                              privileged=host in self.wires)
            self.kubectl.create(pod_manifest(self.token, self.spec.run_id, host, self.placement[host], self.image,
                                             self.pull_policy, privileged=host in self.wires, apps=parts))
        self._wait_ready()
        if self.wires:  # frames cross a relay: every sender fills its checksums in (podwire's docstring)
            for host in self._hosts:
                res = self.kubectl.exec(self.pods[host], ["ethtool", "-K", "eth0", *OFFLOADS_OFF], timeout=60,
                                        text=True)
                if res.returncode != 0:
                    raise TopologyError(f"pod {self.pods[host]}: turning checksum offload off failed: "
                                        f"{res.stderr.strip()[-300:]}")
        self.build_s = round(time.monotonic() - t0, 3)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = ""
        while True:
            pods = self.kubectl.json("get", "pods", "-l", f"{RUN_LABEL}={self.token}")
            by_host = {p["metadata"]["labels"].get(HOST_LABEL): p for p in pods.get("items", [])}
            waiting = []
            for host in self._hosts:
                p = by_host.get(host)
                status = (p or {}).get("status", {})
                ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in status.get("conditions", []))
                if p is None or not ready or not status.get("podIP"):
                    waiting.append(f"{host}: {_why_waiting(p)}")
                    if status.get("phase") in ("Failed", "Succeeded"):
                        raise TopologyError(f"pod {self.pods[host]} ended before it was ready ({_why_waiting(p)})")
                    continue
                self.ips[host] = status["podIP"]
                self.nodes[host] = p["spec"].get("nodeName", "")
            if not waiting:
                break
            last = "; ".join(waiting)
            if time.monotonic() > deadline:
                raise TopologyError(f"pods of run {self.token} not ready within {READY_TIMEOUT_S} s: {last}")
            time.sleep(0.5)
        wrong = [f"{h} on {self.nodes[h]} (asked {self.placement[h]})" for h in self._hosts
                 if self.nodes[h] != self.placement[h]]
        if wrong:
            raise TopologyError(f"pods placed on other nodes than asked: {', '.join(wrong)}")
        log.info("run %s: pods ready: %s", self.token,
                 ", ".join(f"{h}={self.ips[h]}@{self.nodes[h]}" for h in self._hosts))

    # ---- what the runner asks ------------------------------------------------------

    def _check_host(self, host: str) -> None:
        if host not in self.pods:
            raise TopologyError(f"unknown host {host!r}; expected one of {self._hosts}")

    def ns(self, host: str) -> PodConnector:
        """Where to open connections from as ``host`` (the probes use it like a namespace name)."""
        self._check_host(host)
        return self._connectors[host]

    def address(self, host: str, seen_from: str) -> str:
        """The pod IP of ``host`` (one flat cluster network: the same from every host)."""
        for h in (host, seen_from):
            self._check_host(h)
        if host not in self.ips:
            raise TopologyError(f"pod of host {host} has no address yet; expected build() first")
        return self.ips[host]

    def interfaces(self) -> list[IfaceInfo]:
        """Each pod's one interface (eth0) with its pod IP, as link 0 of every host."""
        return [IfaceInfo(ns=self._connectors[h], ifname="eth0", link=0, role="member", host=h,  # type: ignore[arg-type]
                          position=i, address=self.ips.get(h)) for i, h in enumerate(self._hosts)]

    def namespaces(self) -> list[str]:
        return []

    def popen(self, host: str, argv: Sequence[str], **kw: Any) -> PodProcess:
        """Start ``argv`` in ``host``'s pod: roughnet's programs from the image, files it names copied in first."""
        self._check_host(host)
        remote = self._remote_argv(host, argv, kw.pop("env", None))
        name = f"{Path(str(argv[0])).name}-{len(self._procs)}"
        proc = PodProcess(self.kubectl, self.pods[host], remote, name, **kw)
        self._procs.append(proc)
        # The local kubectl, so that `roughnet clean` ends it after a SIGKILL (the program in the pod
        # goes with the pod).
        self.ledger.add("process", pid=proc.pid, start_time=process_start_time(proc.pid),
                        ns=f"pod {self.pods[host]}", argv0=f"kubectl exec {Path(str(argv[0])).name}")
        log.debug("started %s in pod %s (kubectl pid %d)", argv[0], self.pods[host], proc.pid)
        return proc

    def run(self, host: str, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` in ``host``'s pod to completion (subprocess.run semantics, 60 s timeout)."""
        self._check_host(host)
        remote = self._remote_argv(host, argv, kw.pop("env", None))
        timeout = kw.pop("timeout", 60)
        kw.pop("check", None)
        stdin = kw.pop("input", None)
        return self.kubectl.exec(self.pods[host], remote, stdin=stdin, timeout=timeout, **kw)

    def start_wires(self, link: Link) -> None:
        """Set up the wire of ``link`` in every pod that carries it (the ``pod-wire`` engine's apply)."""
        for pos, host in enumerate(link.hosts):
            if self.wires.get(host) is None or self.wires[host].index != link.index or host in self.podwires:
                continue
            profile = load_profile(link.profile) if link.profile else None
            seed = (int(self.spec.seed) + link.index + 7919 * pos) % (1 << 64)
            pw = PodWire(self.kubectl, self.pods[host], host, link, seed, wire_config(link, profile))
            self.podwires[host] = pw
            pw.setup()
            self._connectors[host].wrap = pw.inner

    def wire_counters(self, link: Link) -> dict[str, Any]:
        """``link``'s counters from the wires of the pods that carry it (stopping them: the run is over)."""
        per_pod = {h: pw.counters() for h, pw in self.podwires.items() if pw.link.index == link.index}
        if not link.shared and len(per_pod) == 1:
            (only,) = per_pod.values()
            return only
        return merge_counters(per_pod)

    def process_runtime(self) -> PodApps:
        """How the run's user processes start, are sampled and come back here (backends.kubernetes.apps)."""
        return PodApps(self)

    def usage_sampler(self, proc: PodProcess):
        """A UsageSampler of ``proc``'s program, read through the pod's /proc."""
        from ...services.handle import UsageSampler

        pid = proc.remote_pid()
        return UsageSampler(pid if pid is not None else -1, read=proc.read_usage)

    def describe(self) -> dict[str, Any]:
        """What the record keeps: the backend, the cluster, each host's pod, node and address."""
        return {
            "backend": "kubernetes",
            **self.cluster,
            "image": self.image,
            "namespace": self.kubectl.namespace,
            "pods_ready_s": self.build_s,
            "hosts": {h: {"pod": self.pods[h], "node": self.nodes.get(h), "ip": self.ips.get(h)} for h in self._hosts},
        }

    # ---- files and programs --------------------------------------------------------

    def _remote_argv(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None) -> list[str]:
        out = [str(a) for a in argv]
        if Path(out[0]).name in IMAGE_PROGRAMS:
            out[0] = f"{IMAGE_BIN}/{Path(out[0]).name}"
        for a in out[1:]:
            if self.files is not None and a.startswith("/") and os.path.isfile(a) \
                    and Path(a).resolve().is_relative_to(self.files):
                self._stage(host, Path(a).parent)
        if env:
            changed = [f"{k}={v}" for k, v in env.items() if os.environ.get(k) != v]
            if changed:
                out = ["env", *changed, *out]
        pw = self.podwires.get(host)
        if pw is not None and pw.inner_pid is not None:  # the pod's programs live behind its wire
            out = pw.inner(out)
        return out

    def _stage(self, host: str, folder: Path) -> None:
        """Copy ``folder``'s small files (new or changed since the last copy) into the pod at the same path."""
        buf = io.BytesIO()
        sent: dict[tuple[str, str], tuple[int, int]] = {}
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path in sorted(folder.rglob("*")):
                rel = path.relative_to(folder)
                if rel.parts and rel.parts[0].startswith(FROM_POD_PREFIX):
                    continue
                try:
                    st = path.stat()
                except OSError:
                    continue
                if path.is_dir():
                    tar.add(path, arcname=str(rel), recursive=False)
                    continue
                if (not path.is_file() or path.name.endswith(STAGE_SKIP_SUFFIXES) or st.st_size > STAGE_MAX_BYTES):
                    continue
                key = (host, str(path))
                if self._staged.get(key) == (st.st_mtime_ns, st.st_size):
                    continue
                tar.add(path, arcname=str(rel), recursive=False)
                sent[key] = (st.st_mtime_ns, st.st_size)
        if not sent and (host, str(folder)) in self._staged_dirs:
            return
        res = self.kubectl.exec(self.pods[host], ["/bin/sh", "-c", 'mkdir -p "$0" && tar -x -C "$0"', str(folder)],
                                stdin=buf.getvalue(), timeout=60)
        if res.returncode != 0:
            raise TopologyError(f"copying {folder} into pod {self.pods[host]} failed: "
                                f"{res.stderr.decode(errors='replace').strip()[-300:]}")
        self._staged.update(sent)
        self._staged_dirs.add((host, str(folder)))

    def _fetch_back(self) -> None:
        """Bring the files programs wrote in the pods' copies of staged folders (logs, data) back here."""
        for host, folder in sorted(self._staged_dirs):
            res = self.kubectl.exec(self.pods[host], ["tar", "-c", "-C", folder, "."], timeout=60)
            if res.returncode != 0 or not res.stdout:
                continue
            dest = Path(folder) / f"{FROM_POD_PREFIX}{host}"
            try:
                with tarfile.open(fileobj=io.BytesIO(res.stdout), mode="r") as tar:
                    members = [m for m in tar.getmembers() if m.isfile() and m.size <= STAGE_MAX_BYTES
                               and not m.name.lstrip("./").startswith(FROM_POD_PREFIX)]
                    fresh = [m for m in members if not (Path(folder) / m.name).is_file()
                             or m.name.endswith(".log") or (Path(folder) / m.name).stat().st_size != m.size]
                    if fresh:
                        dest.mkdir(parents=True, exist_ok=True)
                        tar.extractall(dest, members=fresh, filter="data")
            except (tarfile.TarError, OSError) as e:
                log.warning("could not bring files back from pod %s: %s", self.pods[host], e)

    # ---- teardown ------------------------------------------------------------------

    def teardown(self) -> None:
        """Stop what we started, bring written files back, delete the pods and wait until they are gone.

        Idempotent and never raises; problems go to ``teardown_errors`` and the ledger then stays for
        ``roughnet clean``.
        """
        errors: list[str] = []
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    proc.kill()
                except Exception as e:  # noqa: BLE001 - teardown goes on
                    errors.append(f"stopping {proc.args[0]} in {proc.pod}: {e}")
        for pw in self.podwires.values():
            try:
                pw.stop()
            except Exception as e:  # noqa: BLE001
                log.warning("stopping the wire in pod %s: %s", pw.pod, e)
        for c in self._connectors.values():
            c.close()
        if self.ips:
            try:
                self._fetch_back()
            except Exception as e:  # noqa: BLE001
                log.warning("bringing files back from the pods of run %s: %s", self.token, e)
        try:
            delete_run_pods(self.kubectl, self.token)
        except KubeError as e:
            errors.append(str(e))
        if errors:
            self.teardown_errors.extend(errors)
            for msg in errors:
                log.error("teardown of run %s: %s", self.token, msg)
            return
        try:
            self.ledger.remove_file()
        except Exception as e:  # noqa: BLE001
            self.teardown_errors.append(str(e))


#: How long deleting a run's pods may take (their grace period is 2 s).
DELETE_TIMEOUT_S = 120


def delete_run_pods(kubectl: Kubectl, token: str) -> list[str]:
    """Delete the pods labelled with run ``token`` (and only those) and wait until they are gone; their names."""
    selector = f"{RUN_LABEL}={token}"
    names = kubectl.call("get", "pods", "-l", selector, "-o", "name").stdout.split()
    if names:
        kubectl.call("delete", "pods", "-l", selector, "--wait=true", f"--timeout={DELETE_TIMEOUT_S}s",
                     timeout=DELETE_TIMEOUT_S + 10)
    left = kubectl.call("get", "pods", "-l", selector, "-o", "name").stdout.split()
    if left:
        raise KubeError(f"pods of run {token} still there after deleting them: {', '.join(left)}")
    return names


def clean_entry(entry: dict[str, Any]) -> str | None:
    """`roughnet clean` of a dead Kubernetes run's ``k8s-pods`` ledger entry (topo.ledger.run_cleaner): exactly the
    pods labelled with its token deleted; their description, or None when none was left."""
    selector = str(entry.get("selector", ""))
    label, _, token = selector.partition("=")
    if label != RUN_LABEL or not token:
        raise TopologyError(f"ledger entry {entry} has no {RUN_LABEL}=<token> selector; its pods were left alone")
    kubectl = Kubectl.from_dict(entry)
    names = [name.removeprefix("pod/") for name in delete_run_pods(kubectl, token)]
    return f"pods {kubectl.namespace}/{', '.join(names)} (label {selector})" if names else None


def _why_waiting(pod: dict[str, Any] | None) -> str:
    if pod is None:
        return "not created"
    status = pod.get("status", {})
    for cs in status.get("containerStatuses", []) or []:
        state = cs.get("state", {})
        for key in ("waiting", "terminated"):
            if key in state:
                s = state[key]
                return f"{key} ({s.get('reason', '?')}: {str(s.get('message', ''))[:200]})"
    conds = [f"{c.get('type')}={c.get('status')}" + (f" ({c.get('reason')}: {c.get('message')})" if c.get("reason")
             else "") for c in status.get("conditions", []) if c.get("status") != "True"]
    return f"{status.get('phase', 'Pending')}" + (f", {'; '.join(conds)}" if conds else "")
