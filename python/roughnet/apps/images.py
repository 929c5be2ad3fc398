"""A [[process]] with ``image``: the user's OCI image run by runc in its host's network namespace.

Glue between a run's process (``apps.launch.AppProcess``) and the image tools (``apps.oci``: loading and
unpacking an image archive or layout; ``apps.ocibundle``: the runtime bundle, runc, cleanup).  The image is
unpacked once into the cache (``/var/cache/roughnet/oci``) and each start gets a bundle of its own beside
the process's working folder (``/var/lib/roughnet/work/<token>/<name>.bundle<N>``, N its restarts), whose writable layer is an overlay mounted in a private
mount namespace (nothing is mounted in the root one).  The process's working folder is bind-mounted at
``/work`` inside the container; its /etc/hosts names the scenario's hosts.  Every container is ledgered
before it starts (``{"kind": "container", "cleaner": "roughnet.apps.images", ...}``), so ``roughnet clean``
ends one that a killed roughnet left (``clean_entry``).  The container runs as the process's user, as a
command does (the unprivileged default unless the scenario says ``user = "root"``), not as the image's USER.
"""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import PreflightError
from ..topo.ledger import process_start_time
from . import oci, ocibundle
from .etc import RESOLV_CONF, hosts_file

log = logging.getLogger(__name__)

#: Where the working folder appears inside a container.
WORK_MOUNT = "/work"


@dataclass
class Container:
    id: str
    bundle: Path
    proc: subprocess.Popen
    image: Any
    unpacked_now: bool
    unpack_s: float


def preflight(processes) -> None:
    """runc is here and every image loads (ImageError, exit 2, names the file and what is wrong)."""
    try:
        ocibundle.runc_path()
    except oci.ImageError as e:
        raise PreflightError(f"[[process]] with `image`: {e}") from e
    seen: set[str] = set()
    for p in processes:
        path = p.path(p.image)
        if path in seen:
            continue
        seen.add(path)
        try:
            oci.load_image(Path(path))
        except oci.ImageError as e:
            raise PreflightError(f"process {p.name!r}: image {p.image}: {e}") from e


def start(app, ledger, out, err) -> Container:
    """Unpack (cached), prepare a bundle and start ``app``'s image in the foreground under runc."""
    spec = app.spec
    t = time.monotonic()
    image = oci.load_image(Path(spec.path(spec.image)))
    rootfs, unpacked_now = oci.unpack(image)
    unpack_s = time.monotonic() - t
    cid = f"rn-{app.token}-{spec.name}-{app.restarts}"
    bundle = app.workdir.parent / f"{spec.name}.bundle{app.restarts}"
    ocibundle.prepare_bundle(
        image, rootfs, bundle, netns=app.ns,
        args=list(spec.args) if spec.args is not None else None,
        entrypoint=list(spec.entrypoint) if spec.entrypoint is not None else None,
        env={"ROUGHNET_HOST": spec.host, "ROUGHNET_PROCESS": spec.name, "ROUGHNET_RUN_ID": app.run.run_id,
             **spec.env},
        cwd=spec.workdir, uid=app.user.uid, gid=app.user.gid,
        hosts=hosts_file(app.topology, app.run, spec.host), resolv=RESOLV_CONF,
        binds=[(str(app.workdir), WORK_MOUNT, False)], hostname=spec.host, container_id=cid)
    ledger.add("container", id=cid, bundle=str(bundle), runc_root=str(ocibundle.RUNC_ROOT),
               cleaner="roughnet.apps.images", process=spec.name)
    proc = subprocess.Popen(ocibundle.run_argv(bundle, cid), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                            start_new_session=True)
    ledger.add("process", pid=proc.pid, start_time=process_start_time(proc.pid), ns=app.ns, argv0="runc",
               process=spec.name)
    app.image_info = {"digest": image.digest, "unpacked_now": unpacked_now, "unpack_s": round(unpack_s, 3),
                      "entrypoint": image.entrypoint, "cmd": image.cmd, "working_dir": image.working_dir}
    log.info("process %s: image %s (%s, %s in %.2f s) in container %s", spec.name, spec.image, image.digest[:19],
             "unpacked" if unpacked_now else "cached", unpack_s, cid)
    return Container(cid, bundle, proc, image, unpacked_now, unpack_s)


def remove(c: Container) -> None:
    """End the container if runc still knows it, and remove its bundle; never raises."""
    try:
        ocibundle.kill_container(c.id, bundle=c.bundle)
        ocibundle.remove_bundle(c.bundle)
    except Exception as e:  # noqa: BLE001 - the teardown's ledger pass tries again
        log.warning("removing container %s: %s", c.id, e)


def clean_entry(entry: dict[str, Any]) -> str | None:
    """A ledgered container of a dead run: ended and forgotten by runc, its bundle removed (topo.ledger)."""
    cid = str(entry.get("id", ""))
    if not cid.startswith("rn-"):
        log.warning("ledger names container %r, not one of roughnet's; left alone", cid)
        return None
    bundle = Path(str(entry["bundle"])) if entry.get("bundle") else None
    known = ocibundle.container_state(cid) is not None
    ocibundle.kill_container(cid, bundle=bundle)
    if bundle is not None and bundle.exists():
        ocibundle.remove_bundle(bundle)
        return f"container {cid} (bundle {bundle})"
    return f"container {cid}" if known else None
