#!/usr/bin/env python3
"""Bursty-loss model fits for roughnet link profiles.

Data: CRAWDAD rutgers/noise (v. 2007-04-20), as redistributed in
github.com/sensorlab/link-quality-estimation, datasets/trace1_Rutgers/data/.
Layout: data/dbm<N>/Results_node<TX>_DailyTest_<date>/sdec<RX>; each file has
lines "seq rssi", one per correctly received frame; a missing seq = lost frame.
<N> is the injected AWGN noise power (0, -5, -10, -15, -20 dBm).

Usage: fit.py DATA_DIR OUT_DIR  (defaults below)

Models fitted per noise level and per link population:
  * Bernoulli (netem: loss random q%)
  * simple Gilbert (netem: loss gemodel p% r%  -> 1-h = 100 %, 1-k = 0 %)
  * 4-state Markov / GI model (netem: loss state p13 p31 p32 p23 p14),
    Salsano et al. labelling with gap threshold gmin.
Each fit is compared with the data on loss rate, burst-length distribution
(fractions of loss bursts of length 1,2,3,4,>=5) and lag-1 autocorrelation of
the loss indicator.  Model predictions are analytic; a Monte-Carlo run of a
netem-faithful generator is used as a cross-check.
"""
import glob
import json
import os
import sys

import numpy as np

DATA = sys.argv[1] if len(sys.argv) > 1 else \
    os.path.join(os.environ.get('DATASETS', '.'), 'link-quality-estimation', 'datasets', 'trace1_Rutgers', 'data')
OUT = sys.argv[2] if len(sys.argv) > 2 else os.environ.get('OUT', os.path.join(os.getcwd(), 'derived'))

# Analysis window.  Packets seq 0..2 are received far more often than the
# steady state (seq 0 is present in >99 % of non-empty files even on links
# with <1 % delivery) -> start-up transient (probably before the noise
# generator was on).  seq 300 is received at the steady-state rate, seq 301
# almost never (sent only in some runs).  Primary window: seq 3..300.
WIN_LO, WIN_HI = 3, 300
ALT_WINDOWS = {'repo_0_299': (0, 299)}   # the repo scripts' convention (300 pkts)
USABLE_MAX_LOSS = 0.5                    # per-link loss <= 50 % -> "usable"
LOSSY_MIN_LOSS = 0.01                    # 1 % <= per-link loss <= 50 % -> "lossy"
GMINS = (16, 4)                          # RFC 3611 default gmin=16; 4 as sensitivity
BINS = ('1', '2', '3', '4', '>=5')
SIM_N = 400_000
RNG = np.random.default_rng(20240601)


def noise_of(level_dir):
    return int(level_dir[len('dbm'):])


def load(lo=WIN_LO, hi=WIN_HI, count_rssi_ge128_as_received=True):
    """Return {level: [dict(tx, rx, x=np.array loss indicator)]}."""
    out = {}
    for lvl in sorted(os.listdir(DATA), key=lambda d: -noise_of(d)):
        links = []
        for f in sorted(glob.glob(os.path.join(DATA, lvl, 'Results_*', 'sdec*'))):
            tx = os.path.basename(os.path.dirname(f)).split('_')[1]
            rx = 'node' + os.path.basename(f)[len('sdec'):]
            n = hi - lo + 1
            recv = np.zeros(n, dtype=bool)
            with open(f) as fh:
                for line in fh:
                    parts = line.split()
                    if len(parts) != 2:
                        continue
                    s, v = int(parts[0]), int(parts[1])
                    if not count_rssi_ge128_as_received and v >= 128:
                        continue
                    if lo <= s <= hi:
                        recv[s - lo] = True
            links.append(dict(tx=tx, rx=rx, file=os.path.relpath(f, DATA),
                              x=(~recv).astype(np.int8)))
        out[lvl] = links
    return out


def runs(x):
    """Maximal runs of equal values. Returns list of (value, length, censored)."""
    res = []
    n = len(x)
    i = 0
    while i < n:
        j = i
        while j + 1 < n and x[j + 1] == x[i]:
            j += 1
        res.append((int(x[i]), j - i + 1, i == 0 or j == n - 1))
        i = j + 1
    return res


def bin_fracs(lengths):
    lengths = np.asarray(lengths)
    if len(lengths) == 0:
        return [None] * 5
    return [float(np.mean(lengths == k)) for k in (1, 2, 3, 4)] + \
        [float(np.mean(lengths >= 5))]


def label_gi(x, gmin):
    """Salsano/RFC3611-style labelling: 1 rx-gap, 2 rx-burst, 3 loss-burst, 4 isolated loss."""
    n = len(x)
    st = np.ones(n, dtype=np.int8)
    lp = np.flatnonzero(x == 1)
    if len(lp) == 0:
        return st
    # cluster losses separated by < gmin received packets
    clusters = [[lp[0]]]
    for a, b in zip(lp[:-1], lp[1:]):
        if (b - a - 1) < gmin:
            clusters[-1].append(b)
        else:
            clusters.append([b])
    for c in clusters:
        if len(c) == 1:
            st[c[0]] = 4
        else:
            st[c[0]:c[-1] + 1] = 2
            st[c] = 3
    return st


def data_stats(xs):
    N = sum(len(x) for x in xs)
    L = int(sum(int(x.sum()) for x in xs))
    n_r_f = n_rl = n_l_f = n_lr = 0
    pairs_sum = 0  # sum x_t x_{t+1}
    pairs_n = 0
    s0 = s1 = 0
    bursts_c, bursts_all, good_c, good_all = [], [], [], []
    for x in xs:
        a, b = x[:-1], x[1:]
        n_r_f += int((a == 0).sum())
        n_rl += int(((a == 0) & (b == 1)).sum())
        n_l_f += int((a == 1).sum())
        n_lr += int(((a == 1) & (b == 0)).sum())
        pairs_n += len(a)
        pairs_sum += int((a * b).sum())
        s0 += int(a.sum())
        s1 += int(b.sum())
        for v, ln, cens in runs(x):
            (bursts_all if v == 1 else good_all).append(ln)
            if not cens:
                (bursts_c if v == 1 else good_c).append(ln)
    m0, m1 = s0 / pairs_n, s1 / pairs_n
    cov = pairs_sum / pairs_n - m0 * m1
    den = np.sqrt(m0 * (1 - m0) * m1 * (1 - m1))
    rho1 = float(cov / den) if den > 0 else None
    p = n_rl / n_r_f if n_r_f else None
    r = n_lr / n_l_f if n_l_f else None
    return dict(
        n_links=len(xs), n_packets=N, n_lost=L, loss_rate=L / N if N else None,
        n_bursts_complete=len(bursts_c), mean_burst_complete=float(np.mean(bursts_c)) if bursts_c else None,
        n_bursts_all=len(bursts_all), mean_burst_all_incl_censored=float(np.mean(bursts_all)) if bursts_all else None,
        n_goodruns_complete=len(good_c), mean_goodrun_complete=float(np.mean(good_c)) if good_c else None,
        n_goodruns_all=len(good_all), mean_goodrun_all_incl_censored=float(np.mean(good_all)) if good_all else None,
        burst_fracs_complete=bin_fracs(bursts_c), burst_fracs_all=bin_fracs(bursts_all),
        max_burst_complete=int(max(bursts_c)) if bursts_c else None,
        lag1_autocorr=rho1,
        transitions=dict(recv_followed=n_r_f, recv_to_lost=n_rl, lost_followed=n_l_f, lost_to_recv=n_lr),
        gilbert_p=p, gilbert_r=r,
    )


def gi_fit(xs, gmin):
    cnt = np.zeros((5, 5), dtype=np.int64)
    for x in xs:
        st = label_gi(x, gmin)
        np.add.at(cnt, (st[:-1], st[1:]), 1)
    out = {'gmin': gmin, 'counts': {f'{i}{j}': int(cnt[i, j]) for i in range(1, 5) for j in range(1, 5) if cnt[i, j]}}
    n1, n2, n3 = cnt[1].sum(), cnt[2].sum(), cnt[3].sum()
    out['p13'] = float(cnt[1, 3] / n1) if n1 else 0.0
    out['p14'] = float(cnt[1, 4] / n1) if n1 else 0.0
    out['p31'] = float(cnt[3, 1] / n3) if n3 else 1.0
    out['p32'] = float(cnt[3, 2] / n3) if n3 else 0.0
    out['p23'] = float(cnt[2, 3] / n2) if n2 else 0.0
    out['n_state_followed'] = {'1': int(n1), '2': int(n2), '3': int(n3), '4': int(cnt[4].sum())}
    return out


# ---------------------------------------------------------------- predictions
def pred_bernoulli(q):
    if q is None:
        return None
    fr = [(1 - q) * q ** (k - 1) for k in (1, 2, 3, 4)] + [q ** 4]
    return dict(loss_rate=q, burst_fracs=fr, lag1_autocorr=0.0,
                mean_burst=1 / (1 - q) if q < 1 else None, mean_goodrun=1 / q if q > 0 else None)


def pred_gilbert(p, r):
    if p is None or r is None or p + r == 0:
        return None
    fr = [r * (1 - r) ** (k - 1) for k in (1, 2, 3, 4)] + [(1 - r) ** 4]
    return dict(loss_rate=p / (p + r), burst_fracs=fr, lag1_autocorr=1 - p - r,
                mean_burst=1 / r if r > 0 else None, mean_goodrun=1 / p if p > 0 else None)


def gi_matrix(f):
    P = np.zeros((4, 4))
    P[0, 2], P[0, 3] = f['p13'], f['p14']
    P[0, 0] = 1 - f['p13'] - f['p14']
    P[1, 2] = f['p23']
    P[1, 1] = 1 - f['p23']
    P[2, 0], P[2, 1] = f['p31'], f['p32']
    P[2, 2] = 1 - f['p31'] - f['p32']
    P[3, 0] = 1.0
    return P


def stationary(P):
    w, v = np.linalg.eig(P.T)
    i = np.argmin(np.abs(w - 1))
    pi = np.real(v[:, i])
    return pi / pi.sum()


def pred_gi(f):
    P = gi_matrix(f)
    pi = stationary(P)
    mu = pi[2] + pi[3]
    exx = pi[2] * P[2, 2]                      # loss followed by loss only 3->3
    rho = (exx - mu * mu) / (mu * (1 - mu)) if 0 < mu < 1 else None
    w4 = pi[0] * P[0, 3]                       # burst starts in state 4 (len 1)
    w3 = pi[0] * P[0, 2] + pi[1] * P[1, 2]     # burst starts in state 3
    s = P[2, 2]
    if w3 + w4 == 0:
        return dict(loss_rate=float(mu), burst_fracs=[None] * 5, lag1_autocorr=rho)
    a4, a3 = w4 / (w3 + w4), w3 / (w3 + w4)
    fr = [a4 + a3 * (1 - s)] + [a3 * (1 - s) * s ** (k - 1) for k in (2, 3, 4)] + [a3 * s ** 4]
    mb = a4 * 1 + a3 / (1 - s) if s < 1 else None
    return dict(loss_rate=float(mu), burst_fracs=[float(v) for v in fr],
                lag1_autocorr=float(rho) if rho is not None else None, mean_burst=mb,
                stationary=[float(v) for v in pi])


# ------------------------------------------------ netem-faithful simulation
def sim_netem_gemodel(p, r, n):
    """sch_netem.c loss_gilb_ell with h=0 (1-h=100 %), k1=0; start GOOD."""
    u1 = RNG.random(n)
    x = np.zeros(n, dtype=np.int8)
    bad = False
    for i in range(n):
        if not bad:
            if u1[i] < p:
                bad = True
            # loss prob in GOOD = 1-k = 0
        else:
            if u1[i] < r:
                bad = False
            x[i] = 1          # loss prob in BAD = 1-h = 1 (decided by pre-transition state)
    return x


def sim_netem_4state(f, n):
    """sch_netem.c loss_4state (post-2020 state fix), start TX_IN_GAP (1)."""
    a1, a2, a3, a4, a5 = f['p13'], f['p31'], f['p32'], f['p14'], f['p23']
    u = RNG.random(n)
    x = np.zeros(n, dtype=np.int8)
    st = 1
    for i in range(n):
        rnd = u[i]
        if st == 1:
            if rnd < a4:
                st = 4; x[i] = 1
            elif rnd < a1 + a4:
                st = 3; x[i] = 1
        elif st == 2:
            if rnd < a5:
                st = 3; x[i] = 1
        elif st == 3:
            if rnd < a3:
                st = 2
            elif rnd < a2 + a3:
                st = 1
            else:
                x[i] = 1
        else:
            st = 1
    return x


def seq_stats(x):
    d = data_stats([x])
    return dict(loss_rate=d['loss_rate'], burst_fracs=d['burst_fracs_complete'],
                lag1_autocorr=d['lag1_autocorr'], mean_burst=d['mean_burst_complete'])


def errors(pred, data):
    if pred is None:
        return None
    df = data['burst_fracs_complete']
    pf = pred['burst_fracs']
    tvd = None
    if df[0] is not None and pf[0] is not None:
        tvd = 0.5 * sum(abs(a - b) for a, b in zip(df, pf))
    e = dict(
        loss_rate_abs=pred['loss_rate'] - data['loss_rate'],
        loss_rate_rel=(pred['loss_rate'] - data['loss_rate']) / data['loss_rate'] if data['loss_rate'] else None,
        burst_tvd=tvd,
        burst_bin_diff=[(b - a) if (a is not None and b is not None) else None for a, b in zip(df, pf)],
        lag1_diff=(pred['lag1_autocorr'] - data['lag1_autocorr'])
        if (pred.get('lag1_autocorr') is not None and data['lag1_autocorr'] is not None) else None,
    )
    return e


def netem_cmds(d, gi):
    out = {}
    q = d['loss_rate']
    out['bernoulli'] = f"loss random {100*q:.4g}%"
    if d['gilbert_p'] is not None and d['gilbert_r'] is not None:
        out['gilbert'] = f"loss gemodel {100*d['gilbert_p']:.4g}% {100*d['gilbert_r']:.4g}%"
    for g in gi:
        out[f'4state_gmin{g["gmin"]}'] = ("loss state " + " ".join(
            f"{100*g[k]:.4g}%" for k in ('p13', 'p31', 'p32', 'p23', 'p14')))
    return out


def per_link_summary(links):
    """Per-link Gilbert p, r over links with at least one loss and one reception."""
    ps, rs, qs = [], [], []
    for l in links:
        d = data_stats([l['x']])
        qs.append(d['loss_rate'])
        if d['gilbert_p'] is not None and d['gilbert_r'] is not None and 0 < d['loss_rate'] < 1:
            ps.append(d['gilbert_p']); rs.append(d['gilbert_r'])
    def q5(a):
        if not a:
            return None
        return [float(v) for v in np.percentile(a, [10, 25, 50, 75, 90])]
    return dict(n_links=len(links), loss_pctl_10_25_50_75_90=q5(qs),
                n_links_with_transitions=len(ps),
                gilbert_p_pctl_10_25_50_75_90=q5(ps), gilbert_r_pctl_10_25_50_75_90=q5(rs))


def pred_bern_mixture(xs):
    """Diagnostic: every link Bernoulli at its OWN loss rate (no temporal memory).
    Expected complete-burst counts: (n-k-1)(1-q)^2 q^k per link; rho1 from pooled pairs."""
    cnt = np.zeros(6)
    e_xx = e_a = e_b = npairs = 0.0
    for x in xs:
        n, q = len(x), float(x.mean())
        for k in range(1, 5):
            cnt[k] += max(n - k - 1, 0) * (1 - q) ** 2 * q ** k
        cnt[5] += sum(max(n - k - 1, 0) * (1 - q) ** 2 * q ** k for k in range(5, n - 1))
        e_xx += (n - 1) * q * q; e_a += (n - 1) * q; npairs += n - 1
    tot = cnt[1:].sum()
    fr = [float(v / tot) for v in cnt[1:]] if tot else [None] * 5
    m = e_a / npairs
    rho = (e_xx / npairs - m * m) / (m * (1 - m)) if 0 < m < 1 else None
    return dict(loss_rate=float(m), burst_fracs=fr, lag1_autocorr=rho)


def analyse(links, do_sim=True):
    xs = [l['x'] for l in links]
    d = data_stats(xs)
    res = dict(data=d)
    bm = pred_bern_mixture(xs)
    res['bernoulli_mixture_diag'] = dict(pred=bm, err=errors(bm, d))
    b = pred_bernoulli(d['loss_rate'])
    g = pred_gilbert(d['gilbert_p'], d['gilbert_r'])
    gis = [gi_fit(xs, gm) for gm in GMINS] if d['n_lost'] else []
    res['bernoulli'] = dict(q=d['loss_rate'], pred=b, err=errors(b, d))
    res['gilbert'] = dict(p=d['gilbert_p'], r=d['gilbert_r'], pred=g, err=errors(g, d))
    res['gi4'] = []
    for f in gis:
        pr = pred_gi(f)
        res['gi4'].append(dict(fit=f, pred=pr, err=errors(pr, d)))
    res['netem'] = netem_cmds(d, gis)
    if do_sim and g is not None and 0 < d['loss_rate'] < 1:
        res['sim_check'] = dict(
            gilbert=seq_stats(sim_netem_gemodel(d['gilbert_p'], d['gilbert_r'], SIM_N)),
            gi4_gmin16=seq_stats(sim_netem_4state(gis[0], SIM_N)) if gis else None,
            n=SIM_N)
    res['per_link'] = per_link_summary(links)
    return res


def populations(links):
    ll = [(l, float(l['x'].mean())) for l in links]
    return {
        'all': [l for l, q in ll],
        'usable': [l for l, q in ll if q <= USABLE_MAX_LOSS],
        'lossy': [l for l, q in ll if LOSSY_MIN_LOSS <= q <= USABLE_MAX_LOSS],
    }


# ---------------------------------------------------------------- reporting
def f(v, nd=4):
    if v is None:
        return '–'
    if isinstance(v, float):
        return f'{v:.{nd}f}'
    return str(v)


def pct(v, nd=2):
    return '–' if v is None else f'{100*v:.{nd}f}%'


def md_tables(results):
    L = []
    for pop in ('all', 'usable', 'lossy'):
        L.append(f'\n### Population `{pop}`\n')
        L.append('| noise | links | packets | lost | loss rate | complete bursts (n) | mean burst | good runs (n) | mean good run | lag-1 ρ | burst frac 1/2/3/4/≥5 |')
        L.append('|---|---|---|---|---|---|---|---|---|---|---|')
        for lvl, R in results.items():
            d = R[pop]['data']
            fr = '/'.join(f(v, 3) for v in d['burst_fracs_complete'])
            L.append(f"| {lvl} | {d['n_links']} | {d['n_packets']} | {d['n_lost']} | {pct(d['loss_rate'])} | "
                     f"{d['n_bursts_complete']} | {f(d['mean_burst_complete'],2)} | {d['n_goodruns_complete']} | "
                     f"{f(d['mean_goodrun_complete'],1)} | {f(d['lag1_autocorr'],3)} | {fr} |")
        L.append('')
        L.append('Fits and errors (model − data). TVD = total-variation distance between burst-length bin fractions (0 = identical, 1 = disjoint).\n')
        L.append('| noise | model | parameters | pred loss | Δloss (abs) | pred burst frac 1/2/3/4/≥5 | TVD | pred ρ1 | Δρ1 |')
        L.append('|---|---|---|---|---|---|---|---|---|')
        for lvl, R in results.items():
            r = R[pop]
            rows = [('Bernoulli', f"q={pct(r['bernoulli']['q'],3)}", r['bernoulli']),
                    ('Gilbert', f"p={pct(r['gilbert']['p'],3)} r={pct(r['gilbert']['r'],2)}", r['gilbert'])]
            rows.append(('(diag) per-link Bernoulli mixture', 'each link q_i', r['bernoulli_mixture_diag']))
            for gi in r['gi4']:
                ft = gi['fit']
                rows.append((f"4-state g={ft['gmin']}",
                             'p13={} p31={} p32={} p23={} p14={}'.format(*(pct(ft[k], 3) for k in ('p13', 'p31', 'p32', 'p23', 'p14'))),
                             gi))
            for name, par, m in rows:
                pr, er = m['pred'], m['err']
                if pr is None:
                    L.append(f'| {lvl} | {name} | {par} | – | – | – | – | – | – |')
                    continue
                fr = '/'.join(f(v, 3) for v in pr['burst_fracs'])
                L.append(f"| {lvl} | {name} | {par} | {pct(pr['loss_rate'])} | {pct(er['loss_rate_abs'],3)} | {fr} | "
                         f"{f(er['burst_tvd'],3)} | {f(pr['lag1_autocorr'],3)} | {f(er['lag1_diff'],3)} |")
        L.append('')
        L.append('netem command fragments (`tc qdisc add dev IF root netem ...`):\n')
        L.append('| noise | Bernoulli | simple Gilbert | 4-state (gmin=16) |')
        L.append('|---|---|---|---|')
        for lvl, R in results.items():
            n = R[pop]['netem']
            L.append(f"| {lvl} | `{n.get('bernoulli','–')}` | `{n.get('gilbert','–')}` | `{n.get('4state_gmin16','–')}` |")
        L.append('')
        L.append('Per-link heterogeneity (percentiles 10/25/50/75/90 across links; Gilbert p,r only for links with 0<loss<1):\n')
        L.append('| noise | links | per-link loss | links w/ transitions | per-link p | per-link r |')
        L.append('|---|---|---|---|---|---|')
        for lvl, R in results.items():
            pl = R[pop]['per_link']
            j = lambda a: '–' if a is None else '/'.join(f'{v:.3f}' for v in a)
            L.append(f"| {lvl} | {pl['n_links']} | {j(pl['loss_pctl_10_25_50_75_90'])} | {pl['n_links_with_transitions']} | "
                     f"{j(pl['gilbert_p_pctl_10_25_50_75_90'])} | {j(pl['gilbert_r_pctl_10_25_50_75_90'])} |")
        L.append('')
        L.append('Monte-Carlo check of netem-faithful generators (%d packets; complete bursts):\n' % SIM_N)
        L.append('| noise | model | sim loss | sim burst frac 1/2/3/4/≥5 | sim ρ1 |')
        L.append('|---|---|---|---|---|')
        for lvl, R in results.items():
            sc = R[pop].get('sim_check')
            if not sc:
                continue
            for k in ('gilbert', 'gi4_gmin16'):
                s = sc.get(k)
                if s:
                    L.append(f"| {lvl} | {k} | {pct(s['loss_rate'])} | {'/'.join(f(v,3) for v in s['burst_fracs'])} | {f(s['lag1_autocorr'],3)} |")
    return '\n'.join(L)


def main():
    data = load()
    results = {}
    for lvl, links in data.items():
        pops = populations(links)
        results[lvl] = {k: analyse(v) for k, v in pops.items()}
        d = results[lvl]['all']['data']
        print(lvl, 'all loss', round(d['loss_rate'], 4), 'usable', round(results[lvl]['usable']['data']['loss_rate'], 4),
              'n_usable', results[lvl]['usable']['data']['n_links'], flush=True)
    # sensitivity: repo window (seq 0..299) and RSSI>=128 frames treated as lost
    sens = {}
    for name, (lo, hi) in ALT_WINDOWS.items():
        dd = load(lo, hi)
        sens[name] = {lvl: {k: data_stats([l['x'] for l in v]) for k, v in populations(links).items()}
                      for lvl, links in dd.items()}
    dd = load(count_rssi_ge128_as_received=False)
    sens['rssi_ge128_as_lost'] = {lvl: {k: data_stats([l['x'] for l in v]) for k, v in populations(links).items()}
                                  for lvl, links in dd.items()}
    meta = dict(
        source_repo='https://github.com/sensorlab/link-quality-estimation',
        commit='e2c24b466c7c908e788eaaddcf37488f9731a677',
        data_path='datasets/trace1_Rutgers/data/<level>/Results_node<TX>_DailyTest_<date>/sdec<RX>',
        window=[WIN_LO, WIN_HI], usable_max_loss=USABLE_MAX_LOSS, lossy_min_loss=LOSSY_MIN_LOSS,
        gmins=list(GMINS), rssi_ge128='counted as received (frame logged)',
        populations=dict(all='every TX->RX file incl. empty files (all packets lost)',
                         usable=f'links with per-link loss <= {USABLE_MAX_LOSS}',
                         lossy=f'links with {LOSSY_MIN_LOSS} <= per-link loss <= {USABLE_MAX_LOSS}'),
        netem_mapping=dict(bernoulli='loss random q', gilbert='loss gemodel p r (1-h defaults to 100%, 1-k to 0%)',
                           four_state='loss state p13 p31 p32 p23 p14 (1=rx in gap, 2=rx in burst, 3=loss in burst, 4=isolated loss)'),
    )
    with open(os.path.join(OUT, 'results.json'), 'w') as fh:
        json.dump(dict(meta=meta, results=results, sensitivity=sens), fh, indent=1)
    tbl = md_tables(results)
    # sensitivity table
    S = ['\n### Sensitivity of pooled data statistics\n',
         '| noise | population | variant | loss rate | mean burst | lag-1 ρ | Gilbert p | Gilbert r |', '|---|---|---|---|---|---|---|---|']
    for lvl in results:
        for pop in ('all', 'usable'):
            for var, src in [('primary seq 3..300', {lvl: {pop: results[lvl][pop]['data']}})] + \
                    [(k, v) for k, v in sens.items()]:
                d = src[lvl][pop]
                S.append(f"| {lvl} | {pop} | {var} | {pct(d['loss_rate'])} | {f(d['mean_burst_complete'],2)} | "
                         f"{f(d['lag1_autocorr'],3)} | {pct(d['gilbert_p'],3)} | {pct(d['gilbert_r'],2)} |")
    with open(os.path.join(OUT, 'results_tables.md'), 'w') as fh:
        fh.write(tbl + '\n' + '\n'.join(S) + '\n')
    print('wrote results.json, results_tables.md')


if __name__ == '__main__':
    main()
