import os
"""5Gophers v1.0 (Narayanan et al., WWW 2020), copy in jhzuo/Offloading-FL trace_data/5Gophers-v1.0/."""
import io, subprocess, pandas as pd
from common import pct, save_json, save_md, fmt

GIT = os.path.join(os.environ.get("DATASETS", "/work/.mirror"), "jhzuo+Offloading-FL/repo")
HEAD = subprocess.check_output(["git", "--git-dir", GIT, "rev-parse", "HEAD"]).decode().strip()
P = "trace_data/5Gophers-v1.0"
def show(path): return subprocess.check_output(["git", "--git-dir", GIT, "show", f"{HEAD}:{path}"]).decode()

tput = pd.read_csv(io.StringIO(show(f"{P}/All-Carriers/01-Throughput/data.csv")))
rtt = pd.read_csv(io.StringIO(show(f"{P}/All-Carriers/02-Round-Trip-Times/data.csv")))
pfiles = [f for f in subprocess.check_output(["git", "--git-dir", GIT, "ls-tree", "-r", "--name-only", HEAD,
          f"{P}/mmWave-only"]).decode().splitlines() if "04-Ping-Traces" in f and f.endswith(".log")]
ping = pd.concat([pd.read_csv(io.StringIO(show(f))).assign(file=f.split("/")[-1]) for f in pfiles], ignore_index=True)

out = {"repo": "jhzuo/Offloading-FL", "commit": HEAD, "rtt_ms": {}, "tcp_tput_mbps": {}, "mmwave_ping_rtt_ms": {}}
# All-Carriers RTT (5G service of each carrier), per carrier and per carrier x server
for c, g in rtt.groupby("carrier"):
    out["rtt_ms"][f"{c} 5G (all servers)"] = pct(g.rtt_ms)
for (c, s), g in rtt.groupby(["carrier", "server_location"]):
    out["rtt_ms"][f"{c} 5G {s}"] = pct(g.rtt_ms)
# mmWave-only ping traces (Verizon), by network type (4G / 5G) and target server
for nt, g in ping.groupby("network_type"):
    out["mmwave_ping_rtt_ms"][f"Verizon {nt} (all targets)"] = pct(g.rtt_in_ms)
for (nt, t), g in ping.groupby(["network_type", "target_server"]):
    out["mmwave_ping_rtt_ms"][f"Verizon {nt} {t}"] = pct(g.rtt_in_ms)
# throughput: per-second samples
for c, g in tput.groupby("carrier"):
    out["tcp_tput_mbps"][f"{c} (all)"] = pct(g.throughput_mbps)
for (c, n), g in tput.groupby(["carrier", "num_tcp_conn"]):
    out["tcp_tput_mbps"][f"{c} {n} conn"] = pct(g.throughput_mbps)
for (c, n, s), g in tput.groupby(["carrier", "num_tcp_conn", "server_location"]):
    out["tcp_tput_mbps"][f"{c} {n} conn {s}"] = pct(g.throughput_mbps)
out["tcp_zero_sample_fraction"] = {c: round(float((g.throughput_mbps == 0).mean()), 4) for c, g in tput.groupby("carrier")}
lic = show(f"{P}/LICENSE").strip()
out["licence"] = "CC BY 4.0 (trace_data/5Gophers-v1.0/LICENSE)"
save_json("5gophers", out)

L = ["## 2. 5Gophers v1.0 (Narayanan et al., WWW 2020)\n",
     f"- Repository: https://github.com/jhzuo/Offloading-FL (a third-party copy), commit `{HEAD}` (the dataset folder was last touched by 6f5bff0 \"Remove ignored files\", 2021-07-30).",
     f"- Files: `{P}/All-Carriers/01-Throughput/data.csv` (cols protocol,carrier,num_tcp_conn,server_location,run_num,seq_num,throughput_mbps; 7257 rows), "
     f"`{P}/All-Carriers/02-Round-Trip-Times/data.csv` (cols rtt_ms,carrier,server_location; 720 rows), "
     f"`{P}/mmWave-only/04-Ping-Traces (Latency Tests)/ping-trace-01..34.log` (CSV: protocol,network_type,ue_location,target_server,probe_num,rtt_in_ms; {len(ping)} rows).",
     f"- Licence: `{P}/LICENSE` says verbatim: \"{lic}\" (same text in the README's LICENSE section). The host repo jhzuo/Offloading-FL itself has **no licence file** at its root (only the dataset subfolders carry LICENSE files).",
     "- Attribution (README \"CITING THE DATASET\"): Arvind Narayanan, Eman Ramadan, Jason Carpenter, Qingxu Liu, Yu Liu, Feng Qian, Zhi-Li Zhang. "
     "\"A First Look at Commercial 5G Performance on Smartphones\". Proceedings of The Web Conference 2020 (WWW '20), Taipei, pp. 894–905, ACM. https://doi.org/10.1145/3366423.3380169. "
     "Suggested notice: \"5Gophers 1.0 dataset, (c) the 5Gophers team (University of Minnesota), licensed under CC BY 4.0; figures derived (percentiles) by roughnet.\"",
     "- Method (`5gophers.py`): All-Carriers RTT = every rtt_ms sample, grouped by carrier (and carrier x server). The paper's All-Carriers tests are on each carrier's 5G service "
     "(paper abstract: \"three carriers (two mmWave carriers, one mid-band carrier)\" = Verizon and T-Mobile mmWave, Sprint mid-band 2.5 GHz; checked against the arXiv 1909.07532 abstract, not the full text); the CSV itself has no radio column. 4G vs 5G is only separable in the mmWave-only ping traces "
     "(Verizon, network_type 4G/5G, UE locations A/B, targets First-Hop/US-East/US-West...), all 34 logs concatenated. "
     "Throughput = each per-second sample (seq_num ~ second of a ~60-s run, 10 runs per carrier x conns x server) of throughput_mbps; the CSV does not state direction (the paper's iPerf tests are downlink). "
     "Percentiles p10/p50/p90/p99, linear.\n",
     "### RTT (ms), All-Carriers (5G)\n", "| group | n | p10 / p50 / p90 / p99 |", "|---|---|---|"]
for k, v in out["rtt_ms"].items(): L.append(f"| {k} | {v['n']} | {fmt(v)} |")
L += ["", "### RTT (ms), mmWave-only ping traces (Verizon 4G vs 5G)\n", "| group | n | p10 / p50 / p90 / p99 |", "|---|---|---|"]
for k, v in out["mmwave_ping_rtt_ms"].items(): L.append(f"| {k} | {v['n']} | {fmt(v)} |")
L += ["", "### TCP throughput (Mbit/s, per-second samples)\n", "| group | n | p10 / p50 / p90 / p99 |", "|---|---|---|"]
for k, v in out["tcp_tput_mbps"].items(): L.append(f"| {k} | {v['n']} | {fmt(v)} |")
L.append(f"\nFraction of per-second throughput samples exactly 0: {out['tcp_zero_sample_fraction']}")
save_md(2, "5gophers", "\n".join(L))
print("\n".join(L))
