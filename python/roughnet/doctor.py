"""What this machine can do, as a list of checks (``roughnet doctor``).

Owns nothing but the list; the probes themselves live where the knowledge
is (``links.probe_capabilities`` for qdiscs and namespaces, ``binaries`` for
roughnet's own programs).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from .binaries import FULL_AGENT_TARGET, agent_drivers, agent_version, find_binary


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True


#: External tools: (name, required, what needs it)
TOOLS = (
    ("ip", True, "namespaces, veth, addresses, routes (iproute2)"),
    ("tc", True, "rate shaping (iproute2)"),
    ("nft", True, "random loss on the kernel engine (nftables)"),
    ("ethtool", True, "turning offloads off on emulated links"),
    ("iperf3", False, "benchmarks, link tests and `roughnet profiles check` (rates)"),
    ("ping", False, "`roughnet profiles check` (round trips and loss; iputils-ping)"),
    ("sockperf", False, "latency benchmark against an independent tool"),
    ("tcpdump", False, "packet captures (capture = true)"),
)


def checks() -> list[Check]:
    out: list[Check] = []
    root = os.geteuid() == 0
    out.append(Check("root", root, "running as root" if root else "roughnet run needs root (namespaces)"))
    for name, required, why in TOOLS:
        path = shutil.which(name)
        out.append(Check(f"tool {name}", path is not None, path or f"missing: needed for {why}", required))
    agent = find_binary("roughnet-agent")
    if agent is None:
        out.append(Check("roughnet-agent", False, "not built (make build)"))
    else:
        try:
            v = agent_version(str(agent))
            built, missing = agent_drivers(v)
            kind = v.get("build") or ("full" if not missing else "custom")
            out.append(Check("roughnet-agent", True, f"{agent} {v.get('agent')} ({kind} build)"))
            out.append(Check("agent drivers", not missing, f"{', '.join(built)}" + (
                f"; without {', '.join(missing)}: `{FULL_AGENT_TARGET}` adds them" if missing else ""), False))
        except Exception as e:  # noqa: BLE001 - a doctor reports, it does not stop
            out.append(Check("roughnet-agent", False, f"{agent} does not run: {e}"))
    wire = find_binary("roughnet-wire")
    out.append(Check("roughnet-wire", wire is not None, str(wire) if wire else "not built: no delay/jitter without sch_netem", False))
    from .ros2 import launch as ros2_launch

    lacking = ros2_launch.missing()
    out.append(Check("ROS 2 (protocol ros2)", not lacking, "rclpy, std_msgs, rmw_fastrtps_cpp" if not lacking
                     else f"missing {', '.join(lacking)}: {ros2_launch.INSTALL_HINT}", False))
    out += kubernetes_checks()
    from .backends.ns3.sim import version as ns3_version

    ns3 = ns3_version()  # the package's metadata: ns-3 itself is not imported (that takes ~15 s)
    out.append(Check("ns-3", ns3 is not None, f"ns3 {ns3} (--backend ns3)" if ns3
                     else "missing: `make extras` installs it (pip install -e '.[sim]'); the ns3 backend needs it", False))
    if root:
        from .links import probe_capabilities

        try:
            caps = probe_capabilities()
        except Exception as e:  # noqa: BLE001
            out.append(Check("capability probe", False, f"failed: {e}"))
            return out
        out.append(Check("network namespaces", caps.netns, "ip netns add works" if caps.netns else "ip netns add failed"))
        out.append(Check("sch_netem", caps.netem, "netem qdisc available" if caps.netem
                         else "no sch_netem in this kernel: delay and jitter need the wire engine", False))
        out.append(Check("tbf", caps.tbf, "token bucket shaping" if caps.tbf else "no sch_tbf"))
        out.append(Check("htb", caps.htb, "hierarchical token bucket" if caps.htb else "no sch_htb", False))
        out.append(Check("nftables netdev", caps.nft, "ingress drop rules" if caps.nft else "no nftables netdev ingress"))
    return out


def kubernetes_checks() -> list[Check]:
    """kubectl, the local cluster's binaries and images, and the local clusters that are up (all optional)."""
    from .backends.kubernetes.kubectl import KUBE_BIN_DIR, KUBE_VERSION, find_kubectl

    out: list[Check] = []
    kubectl = find_kubectl()
    out.append(Check("kubectl", kubectl is not None, kubectl or "missing: `make cluster` builds it (the kubernetes "
                     "backend needs it)", False))
    missing = [b for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
               if not (KUBE_BIN_DIR / b).is_file()]
    out.append(Check("local cluster binaries", not missing, f"Kubernetes {KUBE_VERSION} in {KUBE_BIN_DIR}" if not missing
                     else f"missing {', '.join(missing)}: `make cluster` builds them", False))
    if not missing:
        from .cluster.up import network_refusals

        refusals = network_refusals()
        usable = [n for n, why in refusals.items() if why is None]
        detail = ", ".join(usable) + "".join(f"; not {n}: {why}" for n, why in refusals.items() if why)
        out.append(Check("pod networks (cluster up --network)", bool(usable), detail, False))
    try:
        from .cluster import state

        up = state.list_clusters()
    except Exception as e:  # noqa: BLE001 - a doctor reports, it does not stop
        out.append(Check("local clusters", False, f"cannot list them: {e}", False))
        return out
    detail = ", ".join(f"{c.name} ({len(c.nodes)} nodes, {c.network})" for c in up) or "none up (`roughnet cluster up`)"
    out.append(Check("local clusters", True, detail, False))
    return out
