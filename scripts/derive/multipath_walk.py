import os
"""Aydin, Fund, Panwar (CNERT 2023) Multipath-Wireless-Link-Traces: Wi-Fi and cellular walk traces."""
import io, re, subprocess
import numpy as np, pandas as pd
from common import pct, longest_run, save_json, save_md, fmt

GIT = os.path.join(os.environ.get("DATASETS", "/work/.mirror"), "yguruprasad+Multipath-Wireless-Link-Traces/repo")
HEAD = subprocess.check_output(["git", "--git-dir", GIT, "rev-parse", "HEAD"]).decode().strip()
names = subprocess.check_output(["git", "--git-dir", GIT, "ls-tree", "-r", "--name-only", HEAD, "Traces"]).decode().splitlines()
allnames = subprocess.check_output(["git", "--git-dir", GIT, "ls-tree", "-r", "--name-only", HEAD]).decode().splitlines()
lic = [n for n in allnames if re.search(r"licen[cs]e|copying", n, re.I)]
NEAR0 = 0.1   # Mbit/s

traces = {}
for n in names:
    m = re.match(r"Traces/(\d+)_(\d+)_(wifi|cellular)\.csv$", n)
    if not m: continue
    raw = subprocess.check_output(["git", "--git-dir", GIT, "show", f"{HEAD}:{n}"]).decode()
    d = pd.read_csv(io.StringIO(raw), header=None, names=["t", "Bps"])
    # fill any missing seconds with 0 (check continuity)
    full = d.set_index("t").reindex(range(int(d.t.min()), int(d.t.max()) + 1))
    gaps = int(full.Bps.isna().sum())
    mbps = full.Bps.fillna(0).values * 8 / 1e6
    traces[n] = dict(path=int(m.group(1)), trial=int(m.group(2)), net=m.group(3), mbps=mbps, gaps=gaps)

def stats(arrs):
    v = np.concatenate(arrs)
    return {"seconds": int(v.size), "capacity_mbps": pct(v, (10, 50, 90)), "mean_mbps": round(float(v.mean()), 3),
            "zero_fraction": round(float((v == 0).mean()), 4), "near_zero_fraction_lt_0.1mbps": round(float((v < NEAR0).mean()), 4),
            "longest_zero_run_s": int(max(longest_run(a == 0) for a in arrs)),
            "longest_near_zero_run_s": int(max(longest_run(a < NEAR0) for a in arrs))}

site = lambda p: "SBU" if p < 20 else "FSC"
out = {"repo": "yguruprasad/Multipath-Wireless-Link-Traces", "commit": HEAD, "groups": {}, "per_trace": {}}
for net in ("wifi", "cellular"):
    out["groups"][f"{net} all"] = stats([t["mbps"] for t in traces.values() if t["net"] == net])
    for s in ("SBU", "FSC"):
        out["groups"][f"{net} {s}"] = stats([t["mbps"] for t in traces.values() if t["net"] == net and site(t["path"]) == s])
    for p in sorted({t["path"] for t in traces.values()}):
        out["groups"][f"{net} path {p}"] = stats([t["mbps"] for t in traces.values() if t["net"] == net and t["path"] == p])
for n, t in sorted(traces.items()):
    st = stats([t["mbps"]]); st["missing_seconds_filled_0"] = t["gaps"]; out["per_trace"][n.split("/")[-1]] = st
save_json("multipath_walk", out)

L = ["## 6. Wi-Fi + cellular walk traces (Aydin, Fund, Panwar, IEEE INFOCOM 2023 CNERT workshop)\n",
     f"- Repository: https://github.com/yguruprasad/Multipath-Wireless-Link-Traces, commit `{HEAD}` (README links also to github.com/aydini/Multipath-Wireless-Link-Traces).",
     f"- Files: `Traces/<pathID>_<trial>_<wifi|cellular>.csv`, {len(traces)} files ({len(traces)//2} simultaneous Wi-Fi/cellular pairs): SBU (Stony Brook Univ.) paths 7, 8, 11, 12, 13 (5/5/5/3/5 trials) and FSC (Farmingdale State College) paths 21, 22, 23 (2/2/3 trials). "
     "Format (Traces/README.md): `timeInSeconds,BytesPerSecond`, no header.",
     f"- Licence: **no licence file** in the repository (licence-like paths: {lic or 'none'}). Cite: Ilknur Aydin, Fraida Fund, Shivendra Panwar, \"A Data Set and Reference Experiments for Multipath Wireless Emulation on Public Testbeds\", IEEE INFOCOM 2023 CNERT Workshop.",
     "- Method (`multipath_walk.py`): capacity Mbit/s = BytesPerSecond x 8 / 1e6 for each 1-s row (missing seconds inside a trace would be filled with 0: none found). "
     "Percentiles over all seconds of all traces in the group. Zero = 0 B in that second; near-zero = < 0.1 Mbit/s (values like 66 B / 1436 B per second are single packets). "
     "Longest run = longest run of consecutive zero (near-zero) seconds within a single trace (max over traces). Note these are throughput of a saturating transfer measured while walking, used by the authors as capacity traces.\n",
     "| group | seconds | p10 / p50 / p90 Mbit/s | mean | zero frac | <0.1 Mbit/s frac | longest zero run s | longest <0.1 run s |", "|---|---|---|---|---|---|---|---|"]
for k, o in out["groups"].items():
    L.append(f"| {k} | {o['seconds']} | {fmt(o['capacity_mbps'])} | {o['mean_mbps']} | {o['zero_fraction']} | {o['near_zero_fraction_lt_0.1mbps']} | {o['longest_zero_run_s']} | {o['longest_near_zero_run_s']} |")
L.append("\nPer-trace figures are in results.json (`multipath_walk.per_trace`).")
save_md(6, "multipath_walk", "\n".join(L))
print("\n".join(L))
