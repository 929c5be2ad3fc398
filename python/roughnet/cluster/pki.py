"""The cluster's certificates and kubeconfigs, made with the openssl command line.

Owns the PKI of a local cluster: one CA; the API server's serving certificate (SANs: its
address, the ``kubernetes`` Service IP, 127.0.0.1 and the ``kubernetes.default...`` names);
client certificates for the admin (``O=system:masters``), the API server towards kubelets,
the controller-manager, the scheduler, kube-proxy and each kubelet (``system:node:<node>``,
``O=system:nodes``); each kubelet's serving certificate (its node address); the
service-account key pair; and a kubeconfig per client (JSON, which kubectl and every
component read as YAML). Keys are ECDSA P-256 (fast to make; Kubernetes takes them for
TLS and for service-account tokens, ES256). Certificates are valid 10 years: a cluster
lives for a session, its files go with `cluster down`.

Every openssl call gets an argument list and a config file written here (subjects and
SANs never pass through a shell). Files are written with mode 0600 (keys) or 0644.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .layout import API_SERVICE_IP, CLUSTER_DOMAIN, Layout
from .state import ClusterError

DAYS = 3650
CLIENT, SERVER, BOTH = "client", "server", "both"


@dataclass(frozen=True)
class CertSpec:
    """One certificate to issue: file stem, subject and what it is for."""

    stem: str  # files <stem>.crt and <stem>.key
    cn: str
    orgs: tuple[str, ...] = ()
    usage: str = CLIENT  # client | server | both
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class Kubeconfig:
    """One kubeconfig to write: for ``user`` with certificate ``stem``, against ``server``."""

    path: Path
    user: str
    stem: str
    server: str


def _openssl(argv: Sequence[str], what: str) -> None:
    try:
        proc = subprocess.run(["openssl", *argv], capture_output=True, text=True, timeout=60, check=False,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        raise ClusterError(f"{what}: openssl is not installed (apt-get install openssl)") from e
    if proc.returncode != 0:
        raise ClusterError(f"{what}: `openssl {' '.join(argv)}` exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-400:]}")


def _dn_value(value: str) -> str:
    # A value in an openssl config file: these names come from roughnet (no user strings), but
    # stay safe anyway: only characters that need no quoting in a config value.
    if not value or any(c in value for c in "\n\r\"'\\$#;[]"):
        raise ClusterError(f"certificate subject value {value!r} has characters openssl config cannot hold")
    return value


def req_config(spec: CertSpec | None, ca: bool = False, cn: str = "") -> str:
    """The openssl ``req`` config: the subject in ``[dn]``, the extensions in ``[ext]``."""
    lines = ["[req]", "distinguished_name = dn", "prompt = no", "[dn]"]
    orgs = spec.orgs if spec else ()
    for i, org in enumerate(orgs):
        lines.append(f"{i}.O = {_dn_value(org)}")
    lines.append(f"CN = {_dn_value(spec.cn if spec else cn)}")
    lines.append("[ext]")
    if ca:
        lines += ["basicConstraints = critical,CA:TRUE", "keyUsage = critical,keyCertSign,cRLSign,digitalSignature",
                  "subjectKeyIdentifier = hash"]
        return "\n".join(lines) + "\n"
    assert spec is not None
    eku = {CLIENT: "clientAuth", SERVER: "serverAuth", BOTH: "clientAuth,serverAuth"}[spec.usage]
    lines += ["basicConstraints = critical,CA:FALSE", "keyUsage = critical,digitalSignature,keyEncipherment",
              f"extendedKeyUsage = {eku}", "authorityKeyIdentifier = keyid"]
    sans = [f"DNS:{_dn_value(d)}" for d in spec.dns] + [f"IP:{ipaddress.ip_address(i)}" for i in spec.ips]
    if sans:
        lines.append("subjectAltName = " + ",".join(sans))
    return "\n".join(lines) + "\n"


def _new_key(path: Path) -> None:
    _openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)],
             f"making key {path.name}")
    os.chmod(path, 0o600)


def make_ca(pki: Path, cn: str = "roughnet-local-cluster-ca") -> None:
    """``ca.key`` and a self-signed ``ca.crt`` in ``pki``."""
    pki.mkdir(parents=True, exist_ok=True, mode=0o700)
    _new_key(pki / "ca.key")
    cnf = pki / "ca.cnf"
    cnf.write_text(req_config(None, ca=True, cn=cn))
    _openssl(["req", "-x509", "-new", "-key", str(pki / "ca.key"), "-config", str(cnf), "-extensions", "ext",
              "-days", str(DAYS), "-out", str(pki / "ca.crt")], "making the cluster CA")
    cnf.unlink()


def issue(pki: Path, spec: CertSpec) -> tuple[Path, Path]:
    """A key and a certificate signed by the CA in ``pki``: (crt, key)."""
    key, crt, cnf = pki / f"{spec.stem}.key", pki / f"{spec.stem}.crt", pki / f"{spec.stem}.cnf"
    _new_key(key)
    cnf.write_text(req_config(spec))
    _openssl(["req", "-x509", "-new", "-key", str(key), "-config", str(cnf), "-extensions", "ext",
              "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"), "-days", str(DAYS), "-out", str(crt)],
             f"issuing certificate {spec.stem} (CN={spec.cn})")
    cnf.unlink()
    return crt, key


def service_account_keys(pki: Path) -> None:
    """``sa.key`` (signs service-account tokens) and ``sa.pub`` (verifies them)."""
    _new_key(pki / "sa.key")
    _openssl(["pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")],
             "making the service-account public key")


def kubeconfig_dict(server: str, ca: Path, crt: Path, key: Path, user: str, cluster: str = "roughnet") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
        "preferences": {},
    }


def write_kubeconfig(pki: Path, kc: Kubeconfig, cluster: str) -> Path:
    data = kubeconfig_dict(kc.server, pki / "ca.crt", pki / f"{kc.stem}.crt", pki / f"{kc.stem}.key", kc.user,
                           cluster)
    kc.path.parent.mkdir(parents=True, exist_ok=True)
    kc.path.write_text(json.dumps(data, indent=1) + "\n")
    os.chmod(kc.path, 0o600)
    return kc.path


@dataclass
class ClusterPki:
    """What ``make_cluster_pki`` wrote: the certificate specs and kubeconfig paths by name."""

    dir: Path
    certs: list[CertSpec] = field(default_factory=list)
    kubeconfigs: dict[str, Path] = field(default_factory=dict)  # "admin", "controller-manager", "node1", ...

    def crt(self, stem: str) -> Path:
        return self.dir / f"{stem}.crt"

    def key(self, stem: str) -> Path:
        return self.dir / f"{stem}.key"

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"


def cert_specs(layout: Layout) -> list[CertSpec]:
    """Every certificate a cluster needs (pure: what ``make_cluster_pki`` issues)."""
    api_dns = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
               "localhost")
    specs = [
        CertSpec("apiserver", "kube-apiserver", usage=SERVER, dns=api_dns,
                 ips=(layout.cp_address, str(API_SERVICE_IP), "127.0.0.1")),
        # The API server towards kubelets (exec, logs, port-forward): cluster admin, like kubeadm's.
        CertSpec("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)),
        CertSpec("admin", "roughnet-admin", ("system:masters",)),
        CertSpec("controller-manager", "system:kube-controller-manager"),
        CertSpec("scheduler", "system:kube-scheduler"),
        CertSpec("kube-proxy", "system:kube-proxy"),
    ]
    for n in layout.nodes:
        specs.append(CertSpec(f"kubelet-{n.name}", f"system:node:{n.name}", ("system:nodes",)))
        specs.append(CertSpec(f"kubelet-{n.name}-serving", n.name, usage=SERVER, dns=(n.name,), ips=(n.address,)))
    return specs


def kubeconfig_specs(layout: Layout) -> dict[str, Kubeconfig]:
    """Every kubeconfig a cluster needs, by name (pure)."""
    server = layout.apiserver_url
    d = layout.data_dir / "kubeconfigs"
    out = {
        "admin": Kubeconfig(layout.admin_kubeconfig, "roughnet-admin", "admin", server),
        "controller-manager": Kubeconfig(d / "controller-manager.kubeconfig", "system:kube-controller-manager",
                                         "controller-manager", server),
        "scheduler": Kubeconfig(d / "scheduler.kubeconfig", "system:kube-scheduler", "scheduler", server),
        "kube-proxy": Kubeconfig(d / "kube-proxy.kubeconfig", "system:kube-proxy", "kube-proxy", server),
    }
    for n in layout.nodes:
        out[n.name] = Kubeconfig(d / f"kubelet-{n.name}.kubeconfig", f"system:node:{n.name}", f"kubelet-{n.name}",
                                 server)
    return out


def make_cluster_pki(layout: Layout) -> ClusterPki:
    """CA, every certificate, the service-account keys and every kubeconfig of ``layout``'s cluster."""
    pki = ClusterPki(layout.pki_dir)
    make_ca(pki.dir)
    for spec in cert_specs(layout):
        issue(pki.dir, spec)
        pki.certs.append(spec)
    service_account_keys(pki.dir)
    for name, kc in kubeconfig_specs(layout).items():
        pki.kubeconfigs[name] = write_kubeconfig(pki.dir, kc, f"roughnet-{layout.name}")
    return pki
