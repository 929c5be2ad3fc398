"""Talking to a Kubernetes cluster: kubectl as a subprocess, JSON in and out.

Owns finding kubectl (the one ``make cluster`` builds, ``$ROUGHNET_KUBECTL``, or
the PATH's), the argv of every call (kubeconfig, namespace, and a prefix such as
``ip netns exec <ns>`` for roughnet's local cluster, whose API server lives in a
namespace this process cannot route to), and turning failures into
``KubeError`` with kubectl's own message.  No user string reaches a shell:
every call is an argument list, and manifests go in on stdin as JSON.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import RoughnetError

log = logging.getLogger(__name__)

#: The Kubernetes release ``make cluster`` builds (scripts/build-kubernetes.sh).
KUBE_VERSION = "v1.32.13"
KUBE_BIN_DIR = Path("/var/cache/roughnet/kubernetes") / KUBE_VERSION / "bin"
#: How long one kubectl call may take before it is abandoned.
CALL_TIMEOUT_S = 60.0


class KubeError(RoughnetError):
    """A kubectl call failed; the message names the call and what kubectl said."""


def find_kubectl() -> str | None:
    """kubectl to use: $ROUGHNET_KUBECTL, the one `make cluster` built, or the PATH's; None if none."""
    env = os.environ.get("ROUGHNET_KUBECTL")
    if env:
        return env if Path(env).is_file() and os.access(env, os.X_OK) else None
    built = KUBE_BIN_DIR / "kubectl"
    if built.is_file():
        return str(built)
    return shutil.which("kubectl")


class Kubectl:
    """kubectl bound to one kubeconfig and namespace (and an optional argv prefix)."""

    def __init__(self, kubectl: str, kubeconfig: Path, namespace: str, prefix: Sequence[str] = ()):
        self.kubectl = kubectl
        self.kubeconfig = Path(kubeconfig)
        self.namespace = namespace
        self.prefix = list(prefix)

    def to_dict(self) -> dict[str, Any]:
        """What the ledger keeps to reach the same cluster again (``from_dict``)."""
        return {"kubectl": self.kubectl, "kubeconfig": str(self.kubeconfig), "namespace": self.namespace,
                "prefix": self.prefix}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Kubectl:
        return cls(str(d["kubectl"]), Path(d["kubeconfig"]), str(d["namespace"]), list(d.get("prefix") or []))

    def argv(self, *args: str, namespaced: bool = True) -> list[str]:
        ns = ["--namespace", self.namespace] if namespaced else []
        return [*self.prefix, self.kubectl, "--kubeconfig", str(self.kubeconfig), *ns, *args]

    def call(self, *args: str, stdin: str | None = None, timeout: float = CALL_TIMEOUT_S, check: bool = True,
             namespaced: bool = True) -> subprocess.CompletedProcess:
        argv = self.argv(*args, namespaced=namespaced)
        try:
            res = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            raise KubeError(f"kubectl {' '.join(args[:3])} did not answer within {timeout:.0f} s "
                            f"(kubeconfig {self.kubeconfig})") from e
        except OSError as e:
            raise KubeError(f"cannot run kubectl ({self.kubectl}): {e}") from e
        if check and res.returncode != 0:
            msg = (res.stderr or res.stdout).strip().splitlines()
            raise KubeError(f"kubectl {' '.join(args[:3])} failed (exit {res.returncode}): "
                            f"{' / '.join(msg[-3:]) or 'no output'}")
        return res

    def json(self, *args: str, namespaced: bool = True, timeout: float = CALL_TIMEOUT_S) -> Any:
        res = self.call(*args, "-o", "json", namespaced=namespaced, timeout=timeout)
        try:
            return json.loads(res.stdout)
        except json.JSONDecodeError as e:
            raise KubeError(f"kubectl {' '.join(args[:3])} printed no JSON: {res.stdout[:200]!r}") from e

    def create(self, manifest: dict[str, Any]) -> None:
        self.call("create", "-f", "-", stdin=json.dumps(manifest))

    def can_i(self, verb: str, resource: str, namespaced: bool = True) -> bool:
        res = self.call("auth", "can-i", verb, resource, check=False, namespaced=namespaced)
        return res.stdout.strip() == "yes"

    def exec_argv(self, pod: str, argv: Sequence[str], stdin: bool = False, container: str = "host") -> list[str]:
        """argv that runs ``argv`` in ``pod``'s container (kubectl exec; -i when stdin is passed on)."""
        flags = ["-i"] if stdin else []
        return self.argv("exec", *flags, pod, "-c", container, "--", *[str(a) for a in argv])

    def exec(self, pod: str, argv: Sequence[str], stdin: bytes | str | None = None,
             timeout: float = CALL_TIMEOUT_S, **kw: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` in ``pod`` to completion (subprocess.run semantics, not checked)."""
        kw.setdefault("capture_output", True)
        full = self.exec_argv(pod, argv, stdin=stdin is not None)
        try:
            return subprocess.run(full, input=stdin, timeout=timeout, check=False, **kw)
        except subprocess.TimeoutExpired as e:
            raise KubeError(f"exec in pod {pod} ({argv[0]}) did not finish within {timeout:.0f} s") from e
