"""Statistics over repeated runs: intervals, spread, disagreement and bistability.  Pure.

Owns the numbers behind "how sure is this figure": the unit of every sample is one
*run* (runs are taken as independent draws of the same configuration), and a point
of a sweep is the runs with equal parameters.  This module knows nothing of runs,
stores or plots; it takes lists of numbers (and counts) and returns intervals:

- ``mean_interval``: the mean over runs with an *expanded percentile bootstrap*
  interval (Hesterberg 2015, "What Teachers Should Know About the Bootstrap", §6.3:
  the plain percentile interval is too narrow for small samples; widening the
  tail probability so that its width matches Student's t fixes most of that);
- ``proportion_interval``: a loss ratio as a binomial proportion, messages being
  the trials, with the Wilson score interval (Wilson 1927; Brown, Cai & DasGupta
  2001) on an *effective* sample size: messages of one run are not independent
  (loss comes in bursts, runs differ), so the pooled counts are divided by the
  design effect estimated from the spread between runs (quasi-binomial dispersion,
  Pearson's X^2 / (k - 1), never below 1);
- ``ratio_interval`` / ``difference_interval``: B against A (two independent sets
  of runs), bootstrap over runs on both sides, expanded the same way with Welch's
  degrees of freedom; ``proportion_difference``: Newcombe's hybrid score interval
  (Newcombe 1998, method 10) from the two Wilson intervals;
- ``quantile_ranks``: the order-statistic interval of a quantile inside one run
  (which ranks of N sorted values bracket the q-quantile), and ``heterogeneity`` /
  ``count_heterogeneity`` (Cochran's Q on the runs' own standard errors, Pearson's
  X^2 on their counts): do the repeats disagree beyond their own intervals;
- ``bistable``: a sample that splits into two clean groups (best two-cluster
  split of the values, on a log scale when all are positive, judged against the
  same statistic for one normal group of that size, Monte Carlo with a fixed seed).

No I/O and no clock; randomness only from the ``numpy.random.Generator`` the
caller passes (``rng_for`` makes one seeded from a stable key, so a report drawn
twice shows the same intervals).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = [
    "BOOTSTRAP_RESAMPLES", "BISTABLE_ALPHA", "Estimate", "Heterogeneity", "Interval", "Split",
    "bistable", "chi2_sf", "count_heterogeneity", "dispersion", "heterogeneity", "mean_interval", "proportion_interval",
    "proportion_difference", "quantile_ranks", "ratio_interval", "difference_interval",
    "rng_for", "t_quantile", "wilson",
]  # fmt: skip

#: Bootstrap resamples per interval: the 0.1 % tails of 4000 means are still a few values each.
BOOTSTRAP_RESAMPLES = 4000
#: False-alarm rate of ``bistable`` on one log-normal group (per metric and point: kept low, a report has many).
BISTABLE_ALPHA = 0.01
#: Null draws for the bistability critical value of each sample size (fixed seed below).
BISTABLE_NULL_DRAWS = 20_000
_BISTABLE_NULL_SEED = 20261124

_NORMAL = NormalDist()


# ------------------------------------------------------------------ distributions


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny, eps = 1e-300, 3e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` (> 0, not necessarily whole) degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on ``t_cdf``; the normal one past 1e7 degrees of freedom)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p is {p}; expected 0 < p < 1")
    if df > 1e7:
        return _NORMAL.inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def _z(confidence: float) -> float:
    _check_confidence(confidence)
    return _NORMAL.inv_cdf(0.5 + confidence / 2.0)


def _check_confidence(confidence: float) -> None:
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence is {confidence}; expected 0.5 <= confidence < 1 (e.g. 0.95)")


# ------------------------------------------------------------------ results


@dataclass(frozen=True)
class Estimate:
    """A metric at one point: the estimate over its runs, its interval and the runs' spread.

    ``value`` is the mean over runs (``mean_interval``) or the pooled proportion
    (``proportion_interval``); ``lo``/``hi`` the interval at ``confidence`` (None with
    one run and no other source of uncertainty); ``sd``, ``vmin``, ``vmax``: spread of
    the runs' own values (sd None with one run); ``method``: ``bootstrap``, ``wilson``
    or ``single``; ``design_effect``: the variance inflation applied to the pooled
    counts of a proportion (1 = messages behaved as independent trials)."""

    n: int
    value: float
    lo: float | None
    hi: float | None
    confidence: float
    method: str
    sd: float | None
    vmin: float
    vmax: float
    values: tuple[float, ...]
    design_effect: float | None = None

    @property
    def cv(self) -> float | None:
        """Coefficient of variation of the runs (sd / |mean|), or None."""
        if self.sd is None or self.value == 0:
            return None
        return self.sd / abs(self.value)

    def to_dict(self) -> dict:
        return {
            "n": self.n, "value": self.value, "lo": self.lo, "hi": self.hi, "confidence": self.confidence,
            "method": self.method, "sd": self.sd, "min": self.vmin, "max": self.vmax, "cv": self.cv,
            "values": list(self.values), "design_effect": self.design_effect,
        }  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """B against A: ``value`` (B/A or B-A) with its interval at ``confidence`` and how it was made."""

    value: float
    lo: float
    hi: float
    confidence: float
    method: str  # "bootstrap ratio", "bootstrap difference", "newcombe"


def rng_for(*key: object) -> np.random.Generator:
    """A generator seeded from ``key`` (any reprs): the same point and metric draw the same resamples."""
    digest = hashlib.sha256(repr(key).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


# ------------------------------------------------------------------ one point


def _expanded_tail(confidence: float, parts: Sequence[tuple[float, int]]) -> float:
    """Tail probability for a percentile interval from bootstrap replicates, expanded for small samples.

    ``parts``: (v, n) per independent sample, ``v`` the usual variance estimate of its
    contribution (s^2 / n).  The bootstrap replicates have variance sum v (n-1)/n and
    normal tails; the interval we want has variance sum v and t tails with Welch's
    degrees of freedom.  Returns alpha' / 2 such that the (alpha'/2, 1 - alpha'/2)
    percentiles give that width (Hesterberg's expanded percentile interval, generalised
    to two samples)."""
    alpha = 1.0 - confidence
    total = sum(v for v, _ in parts)
    boot = sum(v * (n - 1) / n for v, n in parts)
    if total <= 0 or boot <= 0:
        return alpha / 2.0
    df = total**2 / sum(v * v / (n - 1) for v, n in parts if v > 0)
    widen = math.sqrt(total / boot) * t_quantile(1.0 - alpha / 2.0, df)
    return max(_NORMAL.cdf(-widen), 0.5 / BOOTSTRAP_RESAMPLES)


def _clean(values: Sequence[float], what: str) -> np.ndarray:
    x = np.asarray([float(v) for v in values], dtype=float)
    if x.size == 0:
        raise ValueError(f"{what}: no values; expected at least one run's value")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: {list(values)} holds a non-finite value; expected finite numbers")
    return x


def mean_interval(values: Sequence[float], confidence: float, rng: np.random.Generator,
                  resamples: int = BOOTSTRAP_RESAMPLES) -> Estimate:
    """Mean over runs with an expanded percentile bootstrap interval (runs resampled with replacement).

    One run: no interval (``method = "single"``).  The bootstrap never leaves the range
    of the values, so with 2-3 runs the interval is about their range and undercovers:
    five runs or more give intervals close to their stated confidence."""
    _check_confidence(confidence)
    x = _clean(values, "mean_interval")
    n = x.size
    mean = float(x.mean())
    if n == 1:
        return Estimate(1, mean, None, None, confidence, "single", None, mean, mean, (mean,))
    sd = float(x.std(ddof=1))
    means = x[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    tail = _expanded_tail(confidence, [(sd * sd / n, n)])
    lo, hi = (float(q) for q in np.quantile(means, [tail, 1.0 - tail]))
    return Estimate(n, mean, min(lo, mean), max(hi, mean), confidence, "bootstrap", sd, float(x.min()),
                    float(x.max()), tuple(float(v) for v in x))  # fmt: skip


def wilson(successes: float, trials: float, confidence: float, z: float | None = None) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (counts may be fractional: effective sizes).

    ``z``: the critical value, when not the normal one of ``confidence``."""
    if trials <= 0:
        raise ValueError(f"wilson: trials is {trials}; expected more than 0")
    if z is None:
        z = _z(confidence)
    p = min(max(successes / trials, 0.0), 1.0)
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2.0 * trials)) / denom
    half = z * math.sqrt(p * (1.0 - p) / trials + z * z / (4.0 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def dispersion(counts: Sequence[tuple[float, float]]) -> float:
    """Design effect of pooled binomial counts (successes, trials) per run: Pearson X^2 / (k - 1), at least 1.

    1 when the runs' proportions differ no more than binomial noise says they should
    (or with one run, where it cannot be estimated)."""
    usable = [(x, n) for x, n in counts if n > 0]
    k = len(usable)
    total = sum(n for _, n in usable)
    if k < 2 or total <= 0:
        return 1.0
    p = sum(x for x, _ in usable) / total
    if p <= 0.0 or p >= 1.0:
        return 1.0
    chi2 = sum((x - n * p) ** 2 / (n * p * (1.0 - p)) for x, n in usable)
    return max(1.0, chi2 / (k - 1))


def proportion_interval(counts: Sequence[tuple[float, float]], confidence: float, clustered: bool = True) -> Estimate:
    """Pooled proportion of (successes, trials) per run with a Wilson interval on the effective size.

    The unit is the trial (a message); runs are clusters of trials.  The pooled counts
    are divided by the design effect (``dispersion``) before the Wilson interval, so
    runs that disagree widen the interval as much as their spread says (and the critical
    value is Student's t with k - 1 degrees of freedom, as the design effect is estimated
    from k runs).  One run: messages are taken as independent (design effect 1).
    ``clustered=False``: the trials are the runs themselves (a yes/no per run): no design effect."""
    usable = [(float(x), float(n)) for x, n in counts if n and n > 0]
    if not usable:
        raise ValueError("proportion_interval: no run with trials; expected (successes, trials) with trials > 0")
    for x, n in usable:
        if not 0 <= x <= n:
            raise ValueError(f"proportion_interval: {x:g} of {n:g}; expected 0 <= successes <= trials")
    succ = sum(x for x, _ in usable)
    trials = sum(n for _, n in usable)
    deff = dispersion(usable) if clustered else 1.0
    # An estimated design effect has k - 1 degrees of freedom: t's critical value then (quasi-binomial).
    z = t_quantile(0.5 + confidence / 2.0, len(usable) - 1) if deff > 1.0 else None
    lo, hi = wilson(succ / deff, trials / deff, confidence, z)
    p = succ / trials
    ratios = tuple(x / n for x, n in usable)
    sd = float(np.std(ratios, ddof=1)) if len(ratios) > 1 else None
    return Estimate(len(usable), p, min(lo, p), max(hi, p), confidence, "wilson", sd, min(ratios), max(ratios),
                    ratios, deff)  # fmt: skip


def quantile_ranks(count: int, q: float, confidence: float) -> tuple[int, int]:
    """1-based ranks (lo, hi) of the sorted ``count`` values that bracket the q-quantile at ``confidence``.

    Normal approximation of the binomial number of values below the quantile
    (distribution-free; assumes the values of a run independent, which latencies
    of consecutive messages are not quite: the interval is then too narrow)."""
    if count <= 0:
        raise ValueError(f"quantile_ranks: count is {count}; expected at least one value")
    z = _z(confidence)
    centre = count * q
    half = z * math.sqrt(count * q * (1.0 - q))
    return max(1, math.floor(centre - half)), min(count, math.ceil(centre + half) + 1)


def chi2_sf(x: float, df: float) -> float:
    """P(X > x) for a chi-square variable with ``df`` degrees of freedom (regularized upper gamma)."""
    if x <= 0:
        return 1.0
    return 1.0 - _gammainc(df / 2.0, x / 2.0)


def _gammainc(a: float, x: float) -> float:
    """Regularized lower incomplete gamma P(a, x) (series, or Lentz's continued fraction; Numerical Recipes 6.2)."""
    front = math.exp(-x + a * math.log(x) - math.lgamma(a))
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(1000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return min(1.0, total * front)
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return max(0.0, 1.0 - front * h)


@dataclass(frozen=True)
class Heterogeneity:
    """Do runs differ more than their own intervals allow?  Cochran's Q (or Pearson's X^2 on counts)
    on ``df`` = runs - 1 degrees of freedom, and its p-value under "all runs measure the same value"."""

    statistic: float
    df: int
    p: float


def heterogeneity(values: Sequence[float], errors: Sequence[float]) -> Heterogeneity | None:
    """Cochran's Q of per-run ``values`` with standard errors ``errors`` (inverse-variance weights).

    None with fewer than two runs.  Errors of 0 are raised to the smallest positive one
    (or 1e-12): two exact and different values then disagree, as they should."""
    if len(values) != len(errors):
        raise ValueError(f"heterogeneity: {len(values)} values and {len(errors)} errors; expected as many")
    if len(values) < 2:
        return None
    positive = [e for e in errors if e > 0]
    floor = min(positive) if positive else 1e-12
    w = [1.0 / max(e, floor) ** 2 for e in errors]
    mean = sum(wi * v for wi, v in zip(w, values, strict=True)) / sum(w)
    q = sum(wi * (v - mean) ** 2 for wi, v in zip(w, values, strict=True))
    df = len(values) - 1
    return Heterogeneity(q, df, chi2_sf(q, df))


def count_heterogeneity(counts: Sequence[tuple[float, float]]) -> Heterogeneity | None:
    """Pearson's X^2 test that every run's (successes, trials) comes from one proportion."""
    usable = [(x, n) for x, n in counts if n > 0]
    if len(usable) < 2:
        return None
    total = sum(n for _, n in usable)
    p = sum(x for x, _ in usable) / total
    df = len(usable) - 1
    if p <= 0.0 or p >= 1.0:
        return Heterogeneity(0.0, df, 1.0)
    chi2 = sum((x - n * p) ** 2 / (n * p * (1.0 - p)) for x, n in usable)
    return Heterogeneity(chi2, df, chi2_sf(chi2, df))


# ------------------------------------------------------------------ bistability


@dataclass(frozen=True)
class Split:
    """Two groups of runs: ``low`` and ``high`` (values, ascending; index lists in ``*_index``)."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    low_index: tuple[int, ...]
    high_index: tuple[int, ...]
    within: float  # within-groups sum of squares / total (0: two perfectly tight groups)
    critical: float  # the same statistic's ``BISTABLE_ALPHA`` quantile for one normal group of this size
    log_scale: bool


def _best_split_ratios(sorted_rows: np.ndarray, min_group: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row (ascending values): the smallest within/total sum of squares over the splits, and its split size."""
    n = sorted_rows.shape[1]
    s1 = np.cumsum(sorted_rows, axis=1)
    s2 = np.cumsum(sorted_rows * sorted_rows, axis=1)
    t1, t2 = s1[:, -1:], s2[:, -1:]
    k = np.arange(1, n)  # size of the low group
    left = s2[:, :-1] - s1[:, :-1] ** 2 / k
    right = (t2 - s2[:, :-1]) - (t1 - s1[:, :-1]) ** 2 / (n - k)
    total = t2 - t1**2 / n
    ratio = (left + right) / np.where(total > 0, total, np.inf)
    allowed = (k >= min_group) & (n - k >= min_group)
    ratio = np.where(allowed, ratio, np.inf)
    best = np.argmin(ratio, axis=1)
    return ratio[np.arange(ratio.shape[0]), best], k[best]


@functools.lru_cache(maxsize=128)
def bistable_critical(n: int, min_group: int = 2, alpha: float = BISTABLE_ALPHA) -> float:
    """The ``alpha`` quantile of the best-split ratio for ``n`` values of one normal group (fixed seed)."""
    rng = np.random.default_rng((_BISTABLE_NULL_SEED, n, min_group))
    rows = np.sort(rng.standard_normal((BISTABLE_NULL_DRAWS, n)), axis=1)
    ratios, _ = _best_split_ratios(rows, min_group)
    return float(np.quantile(ratios, alpha))


def bistable(values: Sequence[float], *, min_group: int = 2, min_ratio: float = 1.5, min_gap: float = 0.0,
             alpha: float = BISTABLE_ALPHA) -> Split | None:
    """Two groups of runs too cleanly apart for one group with noise, or None.

    Values are taken on a log scale when all are positive (spread of such metrics is
    multiplicative), else as they are.  The best split into two groups of at least
    ``min_group`` runs minimises the within-groups sum of squares; it counts when that
    ratio (within / total) is below what one normal group of the same size gives with
    probability ``alpha`` AND the groups are materially apart: the nearest members
    differ by a factor ``min_ratio`` (log scale), or by ``min_gap`` and a third of
    the largest magnitude (linear scale).  Needs 2 * min_group runs (4 by default)."""
    x = _clean(values, "bistable")
    n = x.size
    if n < 2 * min_group:
        return None
    log_scale = bool(np.all(x > 0))
    t = np.log(x) if log_scale else x
    order = np.argsort(t, kind="stable")
    ts = t[order]
    if ts[-1] == ts[0]:
        return None
    ratio, k = _best_split_ratios(ts[None, :], min_group)
    ratio_f, k_i = float(ratio[0]), int(k[0])
    critical = bistable_critical(n, min_group, alpha)
    if ratio_f > critical:
        return None
    gap = float(ts[k_i] - ts[k_i - 1])
    if log_scale:
        if gap < math.log(min_ratio):
            return None
    elif gap < max(min_gap, (1.0 - 1.0 / min_ratio) * float(np.max(np.abs(x)))):
        return None
    lows, highs = order[:k_i], order[k_i:]
    return Split(tuple(float(v) for v in x[lows]), tuple(float(v) for v in x[highs]),
                 tuple(int(i) for i in lows), tuple(int(i) for i in highs), ratio_f, critical, log_scale)  # fmt: skip


# ------------------------------------------------------------------ two sets of runs


def _two(a: Sequence[float], b: Sequence[float], what: str) -> tuple[np.ndarray, np.ndarray]:
    xa, xb = _clean(a, f"{what} (A)"), _clean(b, f"{what} (B)")
    if xa.size < 2 or xb.size < 2:
        raise ValueError(f"{what}: {xa.size} run(s) in A and {xb.size} in B; expected at least 2 on each side")
    return xa, xb


def ratio_interval(a: Sequence[float], b: Sequence[float], confidence: float, rng: np.random.Generator,
                   resamples: int = BOOTSTRAP_RESAMPLES) -> Interval:
    """mean(B) / mean(A) with an expanded percentile bootstrap interval (each side resampled on its own).

    Needs every A value > 0 and B values >= 0 (else use ``difference_interval``)."""
    _check_confidence(confidence)
    xa, xb = _two(a, b, "ratio_interval")
    if np.any(xa <= 0) or np.any(xb < 0):
        raise ValueError("ratio_interval: expected A values > 0 and B values >= 0; use difference_interval")
    ma, mb = float(xa.mean()), float(xb.mean())
    ra = xa[rng.integers(0, xa.size, size=(resamples, xa.size))].mean(axis=1)
    rb = xb[rng.integers(0, xb.size, size=(resamples, xb.size))].mean(axis=1)
    ratios = rb / ra
    # variances of the log means (delta method): the relative variances of each side's mean
    parts = [(float(xa.var(ddof=1)) / (xa.size * ma * ma), xa.size)]
    if mb > 0:
        parts.append((float(xb.var(ddof=1)) / (xb.size * mb * mb), xb.size))
    tail = _expanded_tail(confidence, parts)
    lo, hi = (float(q) for q in np.quantile(ratios, [tail, 1.0 - tail]))
    value = mb / ma
    return Interval(value, min(lo, value), max(hi, value), confidence, "bootstrap ratio")


def difference_interval(a: Sequence[float], b: Sequence[float], confidence: float, rng: np.random.Generator,
                        resamples: int = BOOTSTRAP_RESAMPLES) -> Interval:
    """mean(B) - mean(A) with an expanded percentile bootstrap interval."""
    _check_confidence(confidence)
    xa, xb = _two(a, b, "difference_interval")
    da = xa[rng.integers(0, xa.size, size=(resamples, xa.size))].mean(axis=1)
    db = xb[rng.integers(0, xb.size, size=(resamples, xb.size))].mean(axis=1)
    tail = _expanded_tail(confidence, [(float(xa.var(ddof=1)) / xa.size, xa.size),
                                       (float(xb.var(ddof=1)) / xb.size, xb.size)])
    lo, hi = (float(q) for q in np.quantile(db - da, [tail, 1.0 - tail]))
    value = float(xb.mean() - xa.mean())
    return Interval(value, min(lo, value), max(hi, value), confidence, "bootstrap difference")


def proportion_difference(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]],
                          confidence: float, clustered: bool = True) -> Interval:
    """p(B) - p(A) of pooled counts with Newcombe's hybrid score interval (each side's Wilson
    interval on its effective size, as ``proportion_interval``)."""
    ea, eb = proportion_interval(a, confidence, clustered), proportion_interval(b, confidence, clustered)
    assert ea.lo is not None and ea.hi is not None and eb.lo is not None and eb.hi is not None
    d = eb.value - ea.value
    lo = d - math.sqrt((eb.value - eb.lo) ** 2 + (ea.hi - ea.value) ** 2)
    hi = d + math.sqrt((eb.hi - eb.value) ** 2 + (ea.value - ea.lo) ** 2)
    return Interval(d, lo, hi, confidence, "newcombe")
