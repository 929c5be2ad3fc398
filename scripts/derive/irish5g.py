"""Irish 5G production dataset (Raca et al., MMSys 2020), uccmisl/5Gdataset 5G-production-dataset.zip."""
import glob, io, os, subprocess, zipfile
import numpy as np, pandas as pd
from common import pct, save_json, save_md, fmt, BASE

GIT = os.path.join(os.environ.get("DATASETS", "/work/.mirror"), "uccmisl+5Gdataset/repo")
HEAD = subprocess.check_output(["git", "--git-dir", GIT, "rev-parse", "HEAD"]).decode().strip()
D = os.path.join(BASE, "data", "irish5g")
os.makedirs(D, exist_ok=True)
os.makedirs(D, exist_ok=True)
zpath = os.path.join(D, "5G-production-dataset.zip")
with open(zpath, "wb") as f:
    f.write(subprocess.check_output(["git", "--git-dir", GIT, "show", f"{HEAD}:5G-production-dataset.zip"]))
zipfile.ZipFile(zpath).extractall(D)
fs = sorted(f for f in glob.glob(os.path.join(D, "5G-production-dataset", "*", "*", "**", "*.csv"), recursive=True))
frames = []
for f in fs:
    rel = os.path.relpath(f, os.path.join(D, "5G-production-dataset")).split(os.sep)
    x = pd.read_csv(f, na_values=["-"]); x["file"] = "/".join(rel); x["app"] = rel[0]; x["mobility"] = rel[1]
    frames.append(x)
raw = pd.concat(frames, ignore_index=True)
# one row per (file, Timestamp second): G-NetTrack sometimes logs 2 rows in the same second (~5.6 % duplicates)
sec = (raw.groupby(["file", "Timestamp"], sort=False)
          .agg(app=("app", "first"), mobility=("mobility", "first"), mode=("NetworkMode", "first"),
               state=("State", "first"), dl=("DL_bitrate", "mean"), ul=("UL_bitrate", "mean")).reset_index())
sec["dl_mbps"] = sec.dl / 1000.0; sec["ul_mbps"] = sec.ul / 1000.0      # kbit/s -> Mbit/s
ping = raw[raw.PINGAVG.notna() | raw.PINGLOSS.notna()].copy()

def block(s, p):
    o = {"seconds": int(len(s)),
         "dl_mbps": pct(s.dl_mbps, (10, 50, 90)), "ul_mbps": pct(s.ul_mbps, (10, 50, 90)),
         "dl_zero_fraction": round(float((s.dl == 0).mean()), 4) if len(s) else None,
         "ping_avg_ms": pct(p.PINGAVG), "ping_min_ms": pct(p.PINGMIN, (10, 50, 90)),
         "ping_tests": int(len(p)), "ping_loss_mean_pct": round(float(p.PINGLOSS.mean()), 2) if len(p) else None}
    a = s[s.state == "D"]
    o["active_D_seconds"] = int(len(a)); o["active_dl_mbps"] = pct(a.dl_mbps, (10, 50, 90)); o["active_ul_mbps"] = pct(a.ul_mbps, (10, 50, 90))
    o["active_dl_zero_fraction"] = round(float((a.dl == 0).mean()), 4) if len(a) else None
    return o

out = {"repo": "uccmisl/5Gdataset", "commit": HEAD, "groups": {}}
for apps, aname in ((None, "all apps"), (["Download"], "Download only")):
    for mob in ("Static", "Driving"):
        for m5, mname in ((False, "all modes"), (True, "5G mode rows")):
            s = sec[(sec.mobility == mob) & (True if apps is None else sec.app.isin(apps))]
            p = ping[(ping.mobility == mob) & (True if apps is None else ping.app.isin(apps))]
            if m5: s = s[s["mode"] == "5G"]; p = p[p.NetworkMode == "5G"]
            out["groups"][f"{mob} / {aname} / {mname}"] = block(s, p)
out["mode_share_seconds"] = {k: round(float(v), 4) for k, v in sec["mode"].value_counts(normalize=True).items()}
save_json("irish5g", out)

L = ["## 4. Irish 5G production dataset (Raca, Leahy, Sreenan, Quinlan, MMSys 2020)\n",
     f"- Repository: https://github.com/uccmisl/5Gdataset, commit `{HEAD}`; file `5G-production-dataset.zip` (2,177,094 B; extracted with `git show HEAD:5G-production-dataset.zip`). "
     f"{len(fs)} CSVs: `5G-production-dataset/{{Download,Netflix,Amazon_Prime}}/{{Static,Driving}}/**/B_<date>.csv` (operator anonymised as 'B', Cork, Ireland, Dec 2019–Feb 2020).",
     "- Licence: `LICENSE` at repo root = **GNU GPL v3** (added 2020-04-14, commit 28c5afe). README asks that users cite: D. Raca, D. Leahy, C.J. Sreenan and J.J. Quinlan. \"Beyond Throughput, The Next Generation: A 5G Dataset with Channel and Context Metrics\". ACM MMSys 2020, Istanbul.",
     "- Columns used: `Timestamp` (1-s resolution, yyyy.mm.dd_HH.MM.SS), `NetworkMode` (5G/LTE/HSPA+/...), `State` (D = downloading, I = idle, V/VD video), `DL_bitrate` and `UL_bitrate` (**kbit/s**, per the MMSys'20 paper's field table; max DL observed 532,905 = 533 Mbit/s), "
     "`PINGAVG`/`PINGMIN` (**ms**) and `PINGLOSS` (**%**), filled only on rows where G-NetTrack finished a ping test (~every 12–13 s; 5-ping tests, loss in 20 % steps), '-' elsewhere. Static/Driving from the folder name.",
     "- Method (`irish5g.py`): rows grouped to one per (file, Timestamp) second (~5.6 % of rows share a second; numeric mean, first mode/state), DL/UL / 1000 -> Mbit/s. "
     "Percentiles over those seconds; 'zero DL' = DL_bitrate == 0. Figures are given over all seconds (includes app idle/OFF periods of the video players, so p10 is often 0) and over 'active' seconds (State == D). "
     "Ping percentiles are over per-test PINGAVG values (each the mean of one ping test, not individual RTTs); also PINGMIN percentiles and mean PINGLOSS %. '5G mode rows' = rows whose NetworkMode == '5G' (NSA; the phone reports 5G while anchored on LTE). "
     f"Share of seconds by mode: {out['mode_share_seconds']}.\n",
     "| group | seconds | DL p10/p50/p90 Mbit/s | UL p10/p50/p90 | DL zero frac | active(D) s | active DL p10/p50/p90 | active UL p10/p50/p90 | active DL zero | ping tests | PINGAVG p10/p50/p90/p99 ms | PINGMIN p10/p50/p90 | ping loss mean % |",
     "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for k, o in out["groups"].items():
    L.append(f"| {k} | {o['seconds']} | {fmt(o['dl_mbps'])} | {fmt(o['ul_mbps'])} | {o['dl_zero_fraction']} | {o['active_D_seconds']} | {fmt(o['active_dl_mbps'])} | {fmt(o['active_ul_mbps'])} | {o['active_dl_zero_fraction']} | {o['ping_tests']} | {fmt(o['ping_avg_ms'])} | {fmt(o['ping_min_ms'])} | {o['ping_loss_mean_pct']} |")
L.append("\nNotes: (a) ping tests occur only in the Download sessions, so the ping columns are identical for 'all apps' and 'Download only'. "
         "(b) All static Download seconds were in 5G mode, hence identical rows. (c) UL_bitrate is the uplink traffic generated by downloads/streaming (ACKs, requests) — there is no uplink saturation test, so UL figures are NOT uplink capacity. "
         "(d) For capacity-like DL figures use 'Download only' (a saturating file download); video rows are app-limited ON/OFF traffic.")
L.append("\nNote: ping n = ping tests with a PINGAVG value (tests with 100 % loss have no PINGAVG and are counted only in the loss mean).")
save_md(4, "irish5g", "\n".join(L))
print("\n".join(L))
