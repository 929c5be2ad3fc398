"""manifests/kubernetes/role.yaml is exactly what the kubernetes backend uses (docs/kubernetes.md, "Permissions").

On roughnet's local cluster, whose API server audits every request of namespace roughnet's service accounts
(cluster.configs.AUDIT_POLICY): the shipped manifest is applied with its subjects bound to a fresh service
account, a whole scenario (an impaired link, so the pod wire's exec calls; a user process; the pods' creation,
readiness and deletion) runs with a kubeconfig of that account only, and the audit log then says which verb on
which resource the backend asked for. Every permission the manifest grants was used (none unused) and no request
was refused (none missing).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from cli_run import ROUGHNET

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "kubernetes" / "role.yaml"

SCENARIO = """
[scenario]
name = "k8s-role"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
delay = "2 ms"
[workload]
pattern = "stream"
protocol = "tcp"
from = "a"
to = ["b"]
messages = 50
rate = "100 msg/s"
payload = "100 B"
[[process]]
name = "looker"
host = "b"
command = ["sleep", "1"]
"""


def admin(cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    res = subprocess.run([*cluster.kubectl_argv(), *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, f"kubectl {' '.join(args)}: {res.stderr}"
    return res


def granted(docs: list[dict]) -> set[tuple[str, str]]:
    """(resource, verb) pairs the Role and ClusterRole of the manifest grant (core API group)."""
    out = set()
    for d in docs:
        if d and d.get("kind") in ("Role", "ClusterRole"):
            for rule in d["rules"]:
                assert rule["apiGroups"] == [""], rule
                out |= {(r, v) for r in rule["resources"] for v in rule["verbs"]}
    return out


def test_the_shipped_role_is_exactly_what_a_run_uses(local_cluster, tmp_path: Path):
    account = f"rn-role-{uuid.uuid4().hex[:6]}"
    docs = list(yaml.safe_load_all(MANIFEST.read_text()))
    for d in docs:
        if d and d.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
            d["metadata"]["name"] = f"{d['metadata']['name']}-{account}"
            d["subjects"] = [{"kind": "ServiceAccount", "name": account, "namespace": "roughnet"}]
    admin(local_cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    try:
        admin(local_cluster, "--namespace", "roughnet", "create", "serviceaccount", account)
        token = admin(local_cluster, "--namespace", "roughnet", "create", "token", account, "--duration",
                      "1h").stdout.strip()
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "role",
            "clusters": [{"name": "local", "cluster": {"server": local_cluster.apiserver,
                                                       "certificate-authority": f"{local_cluster.data_dir}/pki/ca.crt"}}],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": "role", "context": {"cluster": "local", "user": account, "namespace": "roughnet"}}],
        }))
        scenario = tmp_path / "k8s-role.toml"
        scenario.write_text(SCENARIO)
        audit = Path(local_cluster.data_dir) / "logs" / "audit.log"
        before = audit.stat().st_size if audit.exists() else 0
        res = subprocess.run([*ROUGHNET, "run", str(scenario), "--backend", "kubernetes", "--kubeconfig",
                              str(kubeconfig), "--cluster", local_cluster.name, "--no-report", "--results",
                              str(tmp_path / "results")], capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        with open(audit) as f:
            f.seek(before)
            events = [json.loads(line) for line in f if line.strip()]
    finally:
        for d in docs:
            if d and d.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
                ns = ["--namespace", "roughnet"] if d["kind"] == "RoleBinding" else []
                subprocess.run([*local_cluster.kubectl_argv(), *ns, "delete", d["kind"].lower(), d["metadata"]["name"],
                                "--ignore-not-found"], capture_output=True, timeout=60)
        subprocess.run([*local_cluster.kubectl_argv(), "--namespace", "roughnet", "delete", "serviceaccount", account,
                        "--ignore-not-found"], capture_output=True, timeout=60)
    user = f"system:serviceaccount:roughnet:{account}"
    mine = [e for e in events if e.get("user", {}).get("username") == user and e.get("stage") == "ResponseComplete"]
    assert mine, f"no audited request of {user} (is the API server's audit policy cluster.configs.AUDIT_POLICY?)"
    refused = sorted({(e["verb"], e.get("requestURI")) for e in mine if e["responseStatus"]["code"] == 403})
    assert not refused, f"requests the shipped Role does not allow: {refused}"
    used = set()
    for e in mine:
        ref = e.get("objectRef") or {}
        if ref.get("resource") and not ref.get("apiGroup"):  # the core group: what role.yaml is about
            used.add((ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else ""), e["verb"]))
    assert used == granted(docs), (f"used but not granted: {sorted(used - granted(docs))}; "
                                   f"granted but unused: {sorted(granted(docs) - used)}")
