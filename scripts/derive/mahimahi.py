"""Mahimahi cellular traces (ravinet/mahimahi traces/ + Orange 4G traces from commit 7ba555d)."""
import os, subprocess, numpy as np
from common import pct, longest_run, save_json, save_md, fmt

GIT = os.path.join(os.environ.get("DATASETS", "/work/.mirror"), "ravinet+mahimahi/repo")
HEAD = subprocess.check_output(["git", "--git-dir", GIT, "rev-parse", "HEAD"]).decode().strip()
ORANGE = "7ba555dd916ae5eb8ed576eb6123e17639a6ca4d"

def git_show(commit, path):
    r = subprocess.run(["git", "--git-dir", GIT, "show", f"{commit}:{path}"], capture_output=True)
    if r.returncode != 0:
        return None, r.stderr.decode().strip()
    return r.stdout, None

def analyse(raw):
    ts = np.array(raw.split(), dtype=np.int64)
    T = int(ts[-1])                     # period in ms (trace repeats with period = last timestamp)
    nbins = T // 1000                   # full 1-s bins only
    counts = np.bincount(ts[ts < nbins * 1000] // 1000, minlength=nbins)[:nbins]
    mbps = counts * 1500 * 8 / 1e6      # opportunities/s x 1500 B x 8 bit
    zero = counts == 0
    gaps = np.diff(np.concatenate([ts, [ts[0] + T]]))   # incl. wrap-around gap
    return {
        "duration_s": round(T / 1000, 3),
        "opportunities": int(ts.size),
        "mean_mbps": round(ts.size * 1500 * 8 / (T / 1000) / 1e6, 3),
        "bins_1s": int(nbins),
        "bin_mbps": pct(mbps, (10, 50, 90)),
        "zero_bin_fraction": round(float(zero.mean()), 4),
        "longest_zero_run_s": int(longest_run(zero)),
        "longest_gap_ms": int(gaps.max()),
    }

files = subprocess.check_output(["git", "--git-dir", GIT, "ls-tree", "-r", "--name-only", HEAD, "traces"]).decode().split()
files = [f for f in files if f.endswith((".up", ".down"))]
ofiles = subprocess.check_output(["git", "--git-dir", GIT, "ls-tree", "-r", "--name-only", ORANGE, "traces/orange-traces"]).decode().split()
ofiles = [f for f in ofiles if f.endswith(".pps")]

res, missing = {}, []
for commit, lst in ((HEAD, files), (ORANGE, ofiles)):
    for f in lst:
        raw, err = git_show(commit, f)
        if raw is None:
            missing.append((commit, f, err)); continue
        res[os.path.basename(f)] = dict(analyse(raw), commit=commit, path=f)

save_json("mahimahi", {"repo": "ravinet/mahimahi", "traces": res,
                       "missing": [{"commit": c, "path": p, "error": e} for c, p, e in missing]})

L = []
L.append("## 1. Mahimahi cellular traces\n")
L.append(f"- Repository: https://github.com/ravinet/mahimahi, HEAD commit `{HEAD}` (branch master), folder `traces/`.")
L.append(f"- Orange 4G traces: commit `{ORANGE}` (\"Add Orange 4G 2022 traces\", Joel Roman Ky, 2022-06-14; not on any branch of the fetched copy, i.e. an unmerged PR commit), folder `traces/orange-traces/` "
         "(README: Orange France 4G, Lannion, Jan 2022, ~10 min each; A–E static at avg DL 40/80/120/160/220 Mbit/s; highway Guingamp–Lannion at 110 km/h).")
L.append("- Licence: repo-level `COPYING` = GNU GPL v3 (no separate licence for the traces; `traces/README` only cites Winstein et al., NSDI 2013 \"Stochastic Forecasts...\" / Saturator tool). The Orange commit adds no licence file (its tree carries the same GPLv3 `COPYING`).")
L.append("- Method (`mahimahi.py`): each line = one 1500-B delivery opportunity at that ms. Period T = last timestamp (ms); duration = T/1000 s. "
         "Mean Mbit/s = lines x 1500 x 8 / (T/1000) / 1e6. 1-s bins = count of opportunities with floor(ts/1000)=i for the floor(T/1000) *full* seconds (partial last second dropped), x 1500 B x 8 / 1e6 -> Mbit/s; "
         "p10/p50/p90 over those bins (n = bins). Zero fraction = share of bins with no opportunity; longest zero run = longest run of consecutive zero bins (not wrapping). "
         "Extra: longest gap ms = largest interval between consecutive opportunities, including the wrap-around gap.\n")
L.append("| file | duration s | mean Mbit/s | 1-s bins n | p10 / p50 / p90 Mbit/s | zero-bin frac | longest zero run s | longest gap ms |")
L.append("|---|---|---|---|---|---|---|---|")
for k, v in res.items():
    L.append(f"| {k} | {v['duration_s']:g} | {v['mean_mbps']:g} | {v['bins_1s']} | {fmt(v['bin_mbps'])} | {v['zero_bin_fraction']:g} | {v['longest_zero_run_s']} | {v['longest_gap_ms']} |")
L.append("")
if missing:
    L.append("**Not computed (blob absent from the stored snapshot):**\n")
    for c, p, e in missing:
        L.append(f"- `{p}` @ `{c[:7]}`: `git --git-dir {GIT} show {c[:7]}:{p}` -> `{e}`")
    L.append("\nThe same blob hashes for TMobile-LTE-driving.up / Verizon-LTE-driving.{up,down} were also absent in the copy at taha1921/traceRuns (`mahimahi/traces/`); `fetch github:krisub/OrcaRL` -> \"No snapshot of that repository can be had here.\" "
             "The Orange files are stored as text in the search index (read_file, e.g. highway-down = 20.3 M chars) but paging them 16 kB at a time (>1000 calls per file) was not feasible in the time budget.")
save_md(1, "mahimahi", "\n".join(L))
print("\n".join(L))
