import os
"""NUWiNS sigcomm-5gmemu-5g-mmWave-uplink-data (Ghoshal et al., 5G-MeMU 2022): ping and uplink throughput."""
import re, subprocess, collections
import numpy as np
from common import pct, save_json, save_md, fmt

GIT = os.path.join(os.environ.get("DATASETS", "/work/.mirror"), "NUWiNS+sigcomm-5gmemu-5g-mmWave-uplink-data/repo")
HEAD = subprocess.check_output(["git", "--git-dir", GIT, "rev-parse", "HEAD"]).decode().strip()
names = subprocess.check_output(["git", "--git-dir", GIT, "ls-tree", "-r", "--name-only", HEAD]).decode().splitlines()
lic = [n for n in names if re.search(r"licen[cs]e|copying", n, re.I)]

def parse(path):
    txt = subprocess.check_output(["git", "--git-dir", GIT, "show", f"{HEAD}:{path}"]).decode()
    runs, bad = [], collections.Counter()
    for block in re.split(r"#+\s*\n", txt):
        lines = [l for l in block.strip().splitlines() if l.strip()]
        if not lines: continue
        body = ",".join(l for l in lines if not l.lower().startswith("run"))
        vals = []
        for tok in body.split(","):
            tok = tok.strip()
            if not tok: continue
            try: vals.append(float(tok))
            except ValueError: bad[tok] += 1
        if vals: runs.append(np.array(vals))
    return runs, bad

data, badall, nruns = collections.defaultdict(list), collections.Counter(), collections.Counter()
for n in names:
    if not n.endswith(".list"): continue
    kind, scen, radio = n.split("/")[:3]
    runs, bad = parse(n)
    badall.update(bad)
    nruns[(kind, scen, radio)] += len(runs)
    for r in runs: data[(kind, scen, radio)].append(r)

out = {"repo": "NUWiNS/sigcomm-5gmemu-5g-mmWave-uplink-data", "commit": HEAD, "ping_rtt_ms": {}, "ul_tput_mbps": {}}
for (kind, scen, radio), rs in sorted(data.items()):
    v = np.concatenate(rs)
    key = f"{scen} {radio}"
    if kind == "ping":
        d = pct(v); d["runs"] = nruns[(kind, scen, radio)]
        d["mean_abs_diff_consecutive_ms"] = round(float(np.mean(np.concatenate([np.abs(np.diff(r)) for r in rs if r.size > 1]))), 3)
        out["ping_rtt_ms"][key] = d
    else:
        d = pct(v, (10, 50, 90)); d["runs"] = nruns[(kind, scen, radio)]
        d["zero_fraction"] = round(float((v == 0).mean()), 4)
        out["ul_tput_mbps"][key] = d
# pooled by radio and by scenario
for kind, outk, ps in (("ping", "ping_rtt_ms", (10, 50, 90, 99)), ("throughput", "ul_tput_mbps", (10, 50, 90))):
    for radio in ("5g", "lte"):
        v = np.concatenate([np.concatenate(rs) for (k, s, r), rs in data.items() if k == kind and r == radio])
        out[outk][f"ALL scenarios {radio}"] = pct(v, ps)
    for scen in ("static", "walking", "driving"):
        v = np.concatenate([np.concatenate(rs) for (k, s, r), rs in data.items() if k == kind and s == scen])
        out[outk][f"{scen} (5g+lte)"] = pct(v, ps)
# ping: first-sample effect (static runs start with 200-300 ms values: radio wake-up from idle)
first = [r[:3] for (k, s, r_), rs in data.items() if k == "ping" for r in rs]
out["ping_first3_of_run_median_ms"] = round(float(np.median(np.concatenate(first))), 1)
out["ping_excluding_first3_of_each_run"] = {}
for (kind, scen, radio), rs in sorted(data.items()):
    if kind == "ping":
        out["ping_excluding_first3_of_each_run"][f"{scen} {radio}"] = pct(np.concatenate([r[3:] for r in rs]))
out["non_numeric_tokens"] = dict(badall)
save_json("nuwins_5g_uplink", out)

L = ["## 5. NUWiNS 5G mmWave uplink data (Ghoshal et al., ACM SIGCOMM 5G-MeMU 2022)\n",
     f"- Repository: https://github.com/NUWiNS/sigcomm-5gmemu-5g-mmWave-uplink-data, commit `{HEAD}`.",
     "- Files: `ping/{static,walking,driving}/{5g,lte}/*.list` and `throughput/{static,walking,driving}/{5g,lte}/*.list` "
     "(static: away/toward x positions p1–p3; walking: away/lateral/toward; driving: one file). Each file = runs separated by `#####` lines and `Run k`, values comma-separated.",
     f"- Licence: **no licence file** (repo contains only README.md and the data; licence-like paths found: {lic or 'none'}). README asks for citation: M. Ghoshal, Z. J. Kong, Q. Xu, Z. Lu, S. Aggarwal, I. Khan, Y. Li, Y. C. Hu, D. Koutsonikolas, "
     "\"An In-Depth Study of Uplink Performance of 5G mmWave Networks\", 2nd ACM SIGCOMM Workshop on 5G and Beyond Network Measurements, Modeling, and Use Cases (5G-MeMU), 2022.",
     "- Units/sampling are **not stated** in the README: ping values taken as RTT in ms (iputils style, e.g. 12.1, 313.0); throughput values taken as uplink Mbit/s per reporting interval (interval not stated). "
     "Samples per run differ a lot between folders (e.g. static 5g ~150/run, static lte ~910/run, walking 5g 520–2300/run, driving 5g 12k–23k/run), so the reporting interval evidently differs between sets and pooled percentiles weight sets by sample count; a fine interval also inflates the zero fraction. "
     "Maxima: static 5g 173, walking 5g 162, driving 5g **807**, LTE sets ~65. The driving-5g upper tail (p90 402) is far above the static/walking 5g sets — treat driving-5g UL throughput as suspect/unverified (could be a different unit or interval). "
     "Per the paper abstract (DOI 10.1145/3538394.3546042) the study covers 3 US cities and 2 mobile operators; operator and city are not recorded in the files.",
     "- Method (`nuwins_5g_uplink.py`): all values of all runs in a scenario/radio pooled; percentiles linear. "
     f"No timeouts are encoded (non-numeric tokens found: {dict(badall) or 'none'}), so **loss is not derivable**. Jitter-like figure: mean |x_i - x_(i-1)| within a run. "
     "Static/walking ping runs start with 2–3 samples of 100–300 ms (radio promotion from idle), which inflates p99; figures excluding the first 3 samples of each run are also given.\n",
     "### Ping RTT (ms)\n", "| scenario radio | runs | n | p10 / p50 / p90 / p99 | mean abs diff consec. | p10/p50/p90/p99 excl. first 3 per run |", "|---|---|---|---|---|---|"]
for k, d in out["ping_rtt_ms"].items():
    ex = out["ping_excluding_first3_of_each_run"].get(k)
    L.append(f"| {k} | {d.get('runs','')} | {d['n']} | {fmt(d)} | {d.get('mean_abs_diff_consecutive_ms','')} | {fmt(ex) if ex else ''} |")
out["samples_per_run"] = {f"{k} {s_} {r}": [int(x.size) for x in rs] for (k, s_, r), rs in sorted(data.items())}
save_json("nuwins_5g_uplink", out)
L += ["", "### Uplink throughput (Mbit/s, assumed)\n", "| scenario radio | runs | n | p10 / p50 / p90 | zero frac |", "|---|---|---|---|---|"]
for k, d in out["ul_tput_mbps"].items():
    L.append(f"| {k} | {d.get('runs','')} | {d['n']} | {fmt(d)} | {d.get('zero_fraction','')} |")
save_md(5, "nuwins_5g_uplink", "\n".join(L))
print("\n".join(L))
