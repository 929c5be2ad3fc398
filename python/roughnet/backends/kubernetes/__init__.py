"""The Kubernetes backend: each host of a run is a pod of a real cluster.

Owns what happens before any pod exists: which kubeconfig (``--kubeconfig``,
``$KUBECONFIG``, or roughnet's local cluster), which image, the preflight
(the API answers, the permissions of manifests/kubernetes/role.yaml are
granted, the namespace exists, the named nodes exist and are Ready, the image
is on them or may be pulled, and every link, service and option of the
scenario can be realised here) and the placement of hosts on nodes:
``node = "..."`` on a ``[[host]]`` pins it; the others go, in file order, round
robin over the Ready nodes that take pods (no NoSchedule/NoExecute taint),
sorted by name.  A run's pods are ``env.PodEnvironment``'s.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any

from ... import __version__
from ...errors import PreflightError
from . import apps, podwire
from .env import PodEnvironment
from .kubectl import KUBE_VERSION, Kubectl, KubeError, find_kubectl

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "roughnet"
#: The image ``roughnet image build`` writes and ``roughnet cluster up`` loads into the local cluster.
DEFAULT_IMAGE = f"roughnet.local/roughnet:{__version__}"
#: Services the image carries (Kafka needs a JVM, which the image leaves out).
IMAGE_SERVICES = frozenset({"mosquitto", "nats", "zenoh-router"})
#: The permissions the backend needs (manifests/kubernetes/role.yaml grants exactly these).
NEEDED = (
    ("create", "pods", True), ("get", "pods", True), ("list", "pods", True), ("delete", "pods", True),
    ("get", "pods/exec", True), ("list", "nodes", False),
)


def _local_cluster(name: str | None):
    """The state of roughnet's local cluster ``name`` (default "local"), or None when it is not up."""
    try:
        from ...cluster import state
    except ImportError:
        return None
    try:
        return state.load(name or "local")
    except Exception as e:  # noqa: BLE001 - "not up" in whatever form; the caller says what to do
        log.debug("local cluster %s: %s", name or "local", e)
        return None


def _cluster_serving(kubeconfig: Path):
    """The local cluster whose files (its CA) ``kubeconfig`` names, or None.  Every local cluster's API server
    has the same address, in its own namespaces, so the address cannot tell them apart: pass --cluster."""
    try:
        from ...cluster import state
        text = kubeconfig.read_text(errors="replace")
        return next((c for c in state.list_clusters() if f"{c.data_dir}/" in text), None)
    except Exception:  # noqa: BLE001 - no local cluster: an ordinary kubeconfig
        return None


class KubernetesBackend:
    name = "kubernetes"
    processes = "remote"  # user processes run in the hosts' pods (backends.kubernetes.apps)

    def __init__(self, kubectl: Kubectl, image: str, local: bool, cluster_name: str | None = None):
        self.kubectl = kubectl
        self.image = image
        self.local = local
        self.cluster_name = cluster_name
        self.pull_policy = "Never" if local else "IfNotPresent"
        self.placement: dict[str, dict[str, str]] = {}  # run_id -> host -> node
        self.wires: dict[str, dict[str, Any]] = {}  # run_id -> host -> the impaired link its pod's wire carries
        self.facts: dict[str, Any] = {}
        self.app_refs: dict[str, dict[str, str]] = {}  # run_id -> process -> its image's name in the cluster

    @classmethod
    def from_options(cls, kubeconfig: Path | str | None = None, image: str | None = None,
                     namespace: str | None = None, cluster: str | None = None) -> KubernetesBackend:
        """Resolve the kubeconfig (explicit, $KUBECONFIG, the local cluster's) and kubectl; PreflightError if none."""
        kubectl = find_kubectl()
        if kubectl is None:
            raise PreflightError("kubectl not found: run `make cluster` (it builds kubectl " + KUBE_VERSION +
                                 "), put kubectl on PATH or set $ROUGHNET_KUBECTL")
        local = None
        if kubeconfig is None and cluster is None and os.environ.get("KUBECONFIG"):
            kubeconfig = os.environ["KUBECONFIG"].split(os.pathsep)[0]
        if kubeconfig is None:
            local = _local_cluster(cluster)
            if local is None:
                raise PreflightError(f"no cluster: pass --kubeconfig FILE, set $KUBECONFIG, or start roughnet's local "
                                     f"cluster{'' if cluster is None else ' ' + cluster!r} with `roughnet cluster up`")
            # Its API server is reachable only from the cluster's namespaces (cluster.state): kubectl runs in
            # the control-plane namespace, through the same prefix `roughnet cluster` uses.
            full = local.kubectl_argv()
            prefix, kubectl, kubeconfig = full[:-3], full[-3], full[-1]
        else:
            kubeconfig = Path(kubeconfig)
            if not kubeconfig.is_file():
                raise PreflightError(f"--kubeconfig {kubeconfig}: no such file; expected a kubeconfig")
            prefix = []
            # A kubeconfig of roughnet's local cluster (another user's, say): its API server is reached
            # from the control-plane namespace, as for the cluster's own admin kubeconfig.
            local = _local_cluster(cluster) if cluster is not None else _cluster_serving(kubeconfig)
            if cluster is not None and local is None:
                raise PreflightError(f"--cluster {cluster}: no such local cluster is up (`roughnet cluster status`)")
            if local is not None:
                full = local.kubectl_argv()
                prefix, kubectl = full[:-3], full[-3]
        k = Kubectl(kubectl, Path(kubeconfig), namespace or DEFAULT_NAMESPACE, prefix)
        return cls(k, image or DEFAULT_IMAGE, local is not None, getattr(local, "name", None))

    # ---- preflight -----------------------------------------------------------------

    def probe(self) -> dict[str, Any]:
        """The cluster answers, we may do what we need, the namespace exists: its facts (nodes, versions)."""
        try:
            version = self.kubectl.json("version", namespaced=False, timeout=20)
        except KubeError as e:
            raise PreflightError(f"the cluster of {self.kubectl.kubeconfig} does not answer: {e}") from e
        server = (version.get("serverVersion") or {}).get("gitVersion")
        if not server:
            raise PreflightError(f"the cluster of {self.kubectl.kubeconfig} gave no server version")
        ns = self.kubectl.namespace
        missing = [f"{verb} {res}" for verb, res, namespaced in NEEDED
                   if not self.kubectl.can_i(verb, res, namespaced=namespaced)]
        if missing:
            raise PreflightError(f"the kubeconfig's user may not {', '.join(missing)} (namespace {ns}); grant "
                                 f"manifests/kubernetes/role.yaml (docs/kubernetes.md, \"Permissions\")")
        # The Role grants nothing on namespaces (manifests/kubernetes/role.yaml): look only when allowed (a
        # missing namespace then shows when the first pod is created, naming it)
        if self.kubectl.can_i("get", "namespaces", namespaced=False):
            res = self.kubectl.call("get", "namespace", ns, "-o", "name", check=False, namespaced=False)
        else:
            res = subprocess.CompletedProcess([], 0, "", "")
        if res.returncode != 0 and "NotFound" in res.stderr:
            if not self.local:
                raise PreflightError(f"namespace {ns} does not exist on the cluster; create it "
                                     f"(manifests/kubernetes/role.yaml does) or pass --k8s-namespace")
            try:
                self.kubectl.call("create", "namespace", ns, namespaced=False)
            except KubeError as e:
                raise PreflightError(f"namespace {ns} does not exist and cannot be created: {e}") from e
        elif res.returncode != 0 and "Forbidden" not in res.stderr:  # Forbidden: the Role reads no namespaces
            raise PreflightError(f"cannot look up namespace {ns}: {res.stderr.strip()[-300:]}")
        nodes = self.kubectl.json("get", "nodes", namespaced=False)
        info: dict[str, dict[str, Any]] = {}
        for n in nodes.get("items", []):
            st = n.get("status", {})
            ni = st.get("nodeInfo", {})
            taints = [t for t in (n.get("spec", {}).get("taints") or [])
                      if t.get("effect") in ("NoSchedule", "NoExecute")]
            info[n["metadata"]["name"]] = {
                "ready": any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions", [])),
                "schedulable": not n.get("spec", {}).get("unschedulable") and not taints,
                "kernel": ni.get("kernelVersion"), "os": ni.get("osImage"), "kubelet": ni.get("kubeletVersion"),
                "runtime": ni.get("containerRuntimeVersion"),
                "pod_cidr": n.get("spec", {}).get("podCIDR"),
                "images": sorted({name for img in st.get("images") or [] for name in img.get("names") or []}),
            }
        self.facts = {"server_version": server, "nodes": info}
        return self.facts

    def _network(self) -> str | None:
        local = _local_cluster(self.cluster_name) if self.local else None
        return getattr(local, "network", None)

    def check(self, sweep: Any, caps: Any) -> None:
        """Every run can happen on this cluster: links, services, options, nodes, image; placement chosen."""
        nodes = (caps or self.facts).get("nodes", {})
        usable = sorted(n for n, i in nodes.items() if i["ready"] and i["schedulable"])
        for run in sweep.runs:
            where = f"run {run.index} ({', '.join(f'{k}={v}' for k, v in run.params.items()) or 'single run'})"
            w = run.workload
            # events on the user's processes alone, in a run of processes only: the supervisor's, as on the
            # namespace backend (apps.supervisor); every other event needs the timeline runner
            process_events = w is None and all(e.kind == "process" for e in run.events)
            delayed = w is not None and (w.also_from or w.start_ns)
            if (run.events and not process_events) or run.workloads or delayed:
                raise PreflightError(f"{where}: several workloads or senders, delayed starts and [[event]]s (other "
                                     f"than on the processes of a run without a workload) run on the namespace "
                                     f"backend only for now (docs/timelines.md)")
            self.wires[run.run_id] = podwire.plan(run, where)
            for link in run.links:
                if link.capture:
                    raise PreflightError(f"{where}: link {link.index} asks for capture = true; the kubernetes "
                                         f"backend does not capture packets yet")
                if link.overlay != "none":
                    raise PreflightError(f"{where}: link {link.index} asks for overlay = {link.overlay!r}; on the "
                                         f"kubernetes backend the cluster's network plugin is the overlay")
            for svc in run.services:
                if svc.kind not in IMAGE_SERVICES:
                    raise PreflightError(f"{where}: service {svc.kind!r} on host {svc.host} is not in roughnet's "
                                         f"image (it carries {', '.join(sorted(IMAGE_SERVICES))}; Kafka needs a "
                                         f"JVM the image leaves out)")
            self.placement[run.run_id] = self._place(run, nodes, usable, where)
            if run.processes:  # the user's own programs, in the hosts' pods (backends.kubernetes.apps)
                self.app_refs[run.run_id] = apps.check(run, where, self.local)
        wanted = sorted({n for p in self.placement.values() for n in p.values()})
        lacking = [n for n in wanted if self.image not in nodes[n]["images"]
                   and not any(name.endswith("/" + self.image) for name in nodes[n]["images"])]
        if lacking and self.pull_policy == "Never":
            raise PreflightError(f"image {self.image} is not on node(s) {', '.join(lacking)} and this cluster pulls "
                                 f"nothing; `roughnet cluster up` loads it (build it: `roughnet image build`)")
        if lacking:
            log.warning("image %s is not on node(s) %s yet; the kubelet will pull it", self.image, ", ".join(lacking))

    def _place(self, run: Any, nodes: dict[str, dict[str, Any]], usable: list[str], where: str) -> dict[str, str]:
        out: dict[str, str] = {}
        i = 0
        for host in run.hosts:
            node = getattr(host, "node", None)
            if node is not None:
                if node not in nodes:
                    raise PreflightError(f"{where}: host {host.name} asks for node {node!r}, which the cluster does "
                                         f"not have; it has {', '.join(sorted(nodes)) or 'no nodes'}")
                if not nodes[node]["ready"]:
                    raise PreflightError(f"{where}: host {host.name} asks for node {node!r}, which is not Ready")
                out[host.name] = node
                continue
            if not usable:
                raise PreflightError(f"{where}: no Ready node takes pods (nodes: "
                                     f"{', '.join(sorted(nodes)) or 'none'}), so host {host.name} has nowhere to go")
            out[host.name] = usable[i % len(usable)]
            i += 1
        return out

    # ---- per run -------------------------------------------------------------------

    def engines(self, run: Any, caps: Any) -> dict[int, str]:
        return {link.index: "pod-wire" if link.needs() else "cluster" for link in run.links}

    def environment(self, run: Any, ledger: Any, engines: dict[int, str], files: Any = None) -> PodEnvironment:
        placement = self.placement.get(run.run_id)
        if placement is None:
            raise PreflightError(f"run {run.run_id} was not checked by the kubernetes backend's preflight")
        refs = self.app_refs.get(run.run_id, {})

        def load_images() -> list[str]:
            cluster = _local_cluster(self.cluster_name)
            if cluster is None:
                raise PreflightError(f"the local cluster {self.cluster_name or 'local'} is no longer up")
            return apps.load_images(cluster, run, placement, refs)
        return PodEnvironment(run, ledger, self.kubectl, self.image, placement, self.pull_policy,
                              cluster=self.describe(), files=files, wires=self.wires.get(run.run_id),
                              app_refs=refs, load_images=load_images if refs else None)

    def describe(self) -> dict[str, Any]:
        nodes = {n: {k: v for k, v in i.items() if k in ("kernel", "os", "kubelet", "runtime", "pod_cidr")}
                 for n, i in self.facts.get("nodes", {}).items()}
        return {"backend": "kubernetes", "cluster_version": self.facts.get("server_version"),
                "local_cluster": self.cluster_name if self.local else None, "network": self._network(),
                "nodes": nodes}
