"""docs/img/dds-k8s-networks.png: SEEDS S2's throughput rows per pod network, from the figures in
docs/scenarios.md's dds-k8s table (routed and flannel-vxlan measured 2026-11-25, flannel-host-gw and kube-router
2026-12-08; each a 5-node cluster at 100 Mbit/s, `roughnet run scenarios/dds-k8s.toml --backend kubernetes`).

    .venv/bin/python scripts/plots/s2_networks.py docs/img/dds-k8s-networks.png
"""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROWS = ["3: 1024 B", "4: 8192 B", "5: 63000 B", "7: 4 subscribers", "10: 1024 B batched"]
#: Mbit/s per subscriber, the table's rows 3, 4, 5, 7, 10.
NETWORKS = {
    "routed": [89.9, 96.1, 96.6, 22.0, 92.7],
    "flannel-vxlan": [86.1, 93.0, 93.2, 21.0, 89.1],
    "flannel-host-gw": [88.0, 96.4, 96.8, 22.1, 92.1],
    "kube-router": [88.9, 96.4, 96.8, 22.1, 92.7],
    "emulated, no overlay": [90.2, 96.5, 96.6, 22.4, 92.7],
    "emulated VXLAN": [86.5, 93.2, 93.2, 21.4, 89.2],
}


def main(out: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(NETWORKS)
    for i, (name, values) in enumerate(NETWORKS.items()):
        xs = [r + (i - (len(NETWORKS) - 1) / 2) * width for r in range(len(ROWS))]
        ax.bar(xs, values, width, label=name, hatch="//" if name.startswith("emulated") else None)
    ax.set_xticks(range(len(ROWS)), ROWS)
    ax.set_ylabel("throughput per subscriber (Mbit/s)")
    ax.set_title("DDS over Kubernetes pod networks (SEEDS S2 rows, 5 nodes, 100 Mbit/s node links)")
    ax.set_ylim(0, 128)
    ax.legend(fontsize=8, ncol=3, loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/img/dds-k8s-networks.png")
