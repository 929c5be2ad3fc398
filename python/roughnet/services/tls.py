"""Certificates for services with TLS: a CA per sweep, a server certificate per run.

Owns calling the ``openssl`` CLI (argument lists, no shell) to make an EC P-256
CA in the sweep's folder (kept across its runs, so every agent of the sweep
trusts one file, passed to agents as option ``tls_ca``) and a server
certificate signed by it whose subjectAltName lists every address of the
broker host (agents connect by IP address).

The folders holding them (the sweep's ``tls/`` and each run's ``tls/``) are private: created with mode
0700, and an existing one is set to 0700 after checking it is a real folder, so that no other user reads a
private key, even in the instant between openssl writing it and the ``chmod 0600`` of the key (issue 26).
Brokers and agents run as root and read them.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..errors import ServiceError
from .configs import TlsFiles

log = logging.getLogger(__name__)

CERT_DAYS = 30
OPENSSL_TIMEOUT_S = 30
OPENSSL_INSTALL = "apt-get install -y openssl"


def _openssl(args: Sequence[str], what: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise ServiceError(f"{what}: openssl is not installed; install it with `{OPENSSL_INSTALL}`")
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=OPENSSL_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise ServiceError(f"{what} failed: openssl {' '.join(args[:2])} exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-500:]}")


def private_folder(folder: Path) -> Path:
    """``folder`` created with mode 0700, or an existing folder (not a symlink) set to 0700; ServiceError
    otherwise."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode):  # a symlink too (lstat)
            raise ServiceError(f"{folder} is {'a symlink' if stat.S_ISLNK(st.st_mode) else 'not a folder'}; "
                               "expected a folder for TLS keys and certificates (remove it)")
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(folder, 0o700)
    except OSError as e:
        raise ServiceError(f"cannot make the TLS folder {folder} private ({e.strerror or e})") from None
    return folder


def ensure_ca(folder: Path) -> tuple[Path, Path]:
    """(ca.pem, ca.key) in ``folder``, made once and reused by later calls."""
    private_folder(folder)
    ca, key = folder / "ca.pem", folder / "ca.key"
    if ca.is_file() and key.is_file():
        return ca, key
    _openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
              "-keyout", str(key), "-out", str(ca), "-days", str(CERT_DAYS), "-subj", "/CN=roughnet test CA",
              "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
             "creating the sweep's TLS CA")
    key.chmod(0o600)
    log.info("TLS CA created in %s", folder)
    return ca, key


def server_cert(ca: Path, ca_key: Path, folder: Path, name: str, addresses: Sequence[str]) -> TlsFiles:
    """A server key and certificate for ``addresses`` (IP SANs) signed by the CA, in ``folder``."""
    private_folder(folder)
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    ext = folder / f"{name}.ext"
    san = ",".join(f"IP:{a}" for a in addresses)
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   f"extendedKeyUsage=serverAuth\n")
    _openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
              "-out", str(csr), "-subj", f"/CN={addresses[0]}"], f"creating the {name} key")
    _openssl(["x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
              "-out", str(cert), "-days", str(CERT_DAYS), "-extfile", str(ext)], f"signing the {name} certificate")
    key.chmod(0o600)
    return TlsFiles(ca=ca, cert=cert, key=key)


def zenoh_quic_options(configs: Sequence[dict], artifacts: Path) -> None:
    """Give the agents of a Zenoh-over-QUIC run their TLS files (agent options ``tls_*``).

    QUIC always runs TLS 1.3, so the listening agents (those with ``listen``) need a
    certificate naming their address, and every agent the CA that signed it.  One
    server certificate per run lists every listening address (IP SANs); the CA is the
    sweep's (``artifacts.parent / "tls"``, as for mosquitto).  Updates each config's
    ``options`` in place.
    """
    addresses = sorted({c["listen"].rsplit(":", 1)[0] for c in configs if c.get("listen")})
    if not addresses:  # client mode: the agents refuse quic there themselves, naming the reason
        return
    ca, ca_key = ensure_ca(artifacts.parent / "tls")
    files = server_cert(ca, ca_key, artifacts / "tls", "zenoh-quic", addresses)
    for c in configs:
        c["options"] = {**c.get("options", {}), "tls_ca": str(files.ca)}
        if c.get("listen"):
            c["options"] |= {"tls_cert": str(files.cert), "tls_key": str(files.key)}
