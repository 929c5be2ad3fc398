"""The local cluster's PKI, made with openssl into a temporary directory (no root, nothing else created)."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess

import pytest

from roughnet.cluster import layout
from roughnet.cluster.pki import CertSpec, make_cluster_pki, req_config
from roughnet.cluster.state import ClusterError

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command line")


def _x509(path, *args) -> str:
    return subprocess.run(["openssl", "x509", "-in", str(path), "-noout", *args], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster-data")
    mp = pytest.MonkeyPatch()
    mp.setattr(layout, "DATA_ROOT", root)
    try:
        L = layout.make_layout("local", 2)
        yield L, make_cluster_pki(L)
    finally:
        mp.undo()


def test_every_certificate_verifies_against_the_ca(made):
    L, pki = made
    for spec in pki.certs:
        out = subprocess.run(["openssl", "verify", "-CAfile", str(pki.ca), str(pki.crt(spec.stem))],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        # each key matches its certificate
        pub_crt = subprocess.run(["openssl", "x509", "-in", str(pki.crt(spec.stem)), "-noout", "-pubkey"],
                                 capture_output=True, text=True, check=True).stdout
        pub_key = subprocess.run(["openssl", "pkey", "-in", str(pki.key(spec.stem)), "-pubout"],
                                 capture_output=True, text=True, check=True).stdout
        assert pub_crt == pub_key, spec.stem
        assert stat.S_IMODE(pki.key(spec.stem).stat().st_mode) == 0o600


def test_subjects_sans_and_usages(made):
    L, pki = made
    api = _x509(pki.crt("apiserver"), "-ext", "subjectAltName,extendedKeyUsage,basicConstraints")
    for want in ("IP Address:198.18.0.1", "IP Address:198.19.224.1", "DNS:kubernetes.default.svc.cluster.local",
                 "TLS Web Server Authentication", "CA:FALSE"):
        assert want in api
    admin = _x509(pki.crt("admin"), "-subject", "-ext", "extendedKeyUsage")
    assert "O = system:masters" in admin and "TLS Web Client Authentication" in admin
    kubelet = _x509(pki.crt("kubelet-node2"), "-subject")
    assert "O = system:nodes" in kubelet and "CN = system:node:node2" in kubelet
    serving = _x509(pki.crt("kubelet-node2-serving"), "-ext", "subjectAltName")
    assert "IP Address:198.18.0.3" in serving and "DNS:node2" in serving
    ca = _x509(pki.ca, "-ext", "basicConstraints")
    assert "CA:TRUE" in ca


def test_service_account_keys_and_kubeconfigs(made):
    L, pki = made
    assert (pki.dir / "sa.key").is_file() and "PUBLIC KEY" in (pki.dir / "sa.pub").read_text()
    kc = json.loads(pki.kubeconfigs["node1"].read_text())
    assert kc["clusters"][0]["cluster"] == {"server": "https://198.18.0.1:6443", "certificate-authority": str(pki.ca)}
    assert kc["users"][0]["user"]["client-certificate"] == str(pki.crt("kubelet-node1"))
    assert kc["current-context"] == "system:node:node1@roughnet-local"
    assert pki.kubeconfigs["admin"] == L.admin_kubeconfig
    # no openssl config files left behind
    assert not list(pki.dir.glob("*.cnf"))


def test_subject_values_that_openssl_config_cannot_hold_are_refused():
    with pytest.raises(ClusterError):
        req_config(CertSpec("x", "a\nb"))
    with pytest.raises(ClusterError):
        req_config(CertSpec("x", "ok", orgs=("$HOME",)))
