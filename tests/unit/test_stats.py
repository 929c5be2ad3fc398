"""roughnet.analysis.stats on synthetic samples with known answers: interval coverage over many draws,
the bistability detector on mixtures and on one-group noise, the two-sample intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roughnet.analysis import stats

DRAWS = 400


def _coverage(make, check, draws: int = DRAWS) -> float:
    return sum(bool(check(make(i), i)) for i in range(draws)) / draws


# ------------------------------------------------------------------ distributions


@pytest.mark.parametrize("p, df, want", [  # tables; df 2.5 by integrating the density numerically
    (0.975, 1, 12.7062), (0.975, 4, 2.7764), (0.995, 10, 3.1693), (0.95, 30, 1.6973), (0.975, 2.5, 3.5747),
    (0.025, 4, -2.7764),
])  # fmt: skip
def test_t_quantile_matches_tables(p, df, want):
    assert stats.t_quantile(p, df) == pytest.approx(want, abs=2e-3)


def test_wilson_known_values():
    # 0 of 10 and 5 of 10 at 95 % (published tables)
    assert stats.wilson(0, 10, 0.95) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert stats.wilson(5, 10, 0.95) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    with pytest.raises(ValueError, match="trials"):
        stats.wilson(0, 0, 0.95)


def test_confidence_out_of_range_is_refused():
    with pytest.raises(ValueError, match="confidence"):
        stats.mean_interval([1.0, 2.0], 95, stats.rng_for(1))


# ------------------------------------------------------------------ one point


@pytest.mark.parametrize("n", [5, 8, 20])
@pytest.mark.parametrize("dist", ["normal", "lognormal"])
def test_mean_interval_covers_the_true_mean_at_about_its_confidence(n, dist):
    rng = np.random.default_rng(1000 + n)
    sigma = 0.3
    true = 100.0 if dist == "normal" else math.exp(sigma * sigma / 2)

    def make(i):
        return rng.normal(100.0, 15.0, n) if dist == "normal" else np.exp(rng.normal(0.0, sigma, n))

    def check(x, i):
        e = stats.mean_interval(x, 0.95, stats.rng_for("cov", n, i))
        return e.lo <= true <= e.hi

    assert 0.90 <= _coverage(make, check) <= 0.99


def test_mean_interval_is_reproducible_and_describes_the_spread():
    x = [10.0, 12.0, 11.0, 30.0, 9.0]
    a = stats.mean_interval(x, 0.95, stats.rng_for("k", 1))
    b = stats.mean_interval(x, 0.95, stats.rng_for("k", 1))
    assert a == b
    assert a.value == pytest.approx(14.4) and a.lo < a.value < a.hi
    assert (a.vmin, a.vmax, a.n, a.method) == (9.0, 30.0, 5, "bootstrap")
    assert a.sd == pytest.approx(float(np.std(x, ddof=1)))
    # a 90 % interval is inside the 95 % one
    c = stats.mean_interval(x, 0.90, stats.rng_for("k", 1))
    assert a.lo <= c.lo and c.hi <= a.hi


def test_one_run_has_no_interval():
    e = stats.mean_interval([42.0], 0.95, stats.rng_for(0))
    assert (e.value, e.lo, e.hi, e.sd, e.method) == (42.0, None, None, None, "single")
    with pytest.raises(ValueError, match="no values"):
        stats.mean_interval([], 0.95, stats.rng_for(0))
    with pytest.raises(ValueError, match="non-finite"):
        stats.mean_interval([1.0, float("nan")], 0.95, stats.rng_for(0))


@pytest.mark.parametrize("runs, messages, p, overdispersed", [
    (1, 2000, 0.01, False),  # one run: messages taken as independent trials
    (5, 1500, 0.02, False),
    (3, 1000, 0.001, False),  # mostly zero or one message lost per run
    (10, 1500, 0.02, True),  # runs differ beyond binomial noise (beta-binomial)
])  # fmt: skip
def test_loss_interval_covers_the_true_loss_probability(runs, messages, p, overdispersed):
    rng = np.random.default_rng(runs * 7 + messages)

    def make(i):
        ps = rng.beta(p * 40, (1 - p) * 40, runs) if overdispersed else np.full(runs, p)
        return [(int(rng.binomial(messages, q)), messages) for q in ps]

    def check(counts, i):
        e = stats.proportion_interval(counts, 0.95)
        return e.lo <= p <= e.hi

    assert 0.90 <= _coverage(make, check) <= 0.995


def test_design_effect_widens_the_loss_interval_of_runs_that_disagree():
    same = [(30, 1500)] * 4
    apart = [(2, 1500), (58, 1500), (3, 1500), (57, 1500)]  # same pooled loss, 2 %
    a, b = stats.proportion_interval(same, 0.95), stats.proportion_interval(apart, 0.95)
    assert a.value == b.value == pytest.approx(0.02)
    assert a.design_effect == 1.0 and b.design_effect > 20
    assert (b.hi - b.lo) > 4 * (a.hi - a.lo)
    assert b.vmin == pytest.approx(2 / 1500) and b.vmax == pytest.approx(58 / 1500)
    # no loss at all: the interval still has an upper bound above 0 (the rule of three's neighbour)
    z = stats.proportion_interval([(0, 1000)] * 3, 0.95)
    assert z.lo == 0.0 and 0.0005 < z.hi < 0.002


def test_quantile_ranks_bracket_the_quantile():
    lo, hi = stats.quantile_ranks(1000, 0.5, 0.95)
    assert 465 <= lo <= 470 and 530 <= hi <= 535
    lo, hi = stats.quantile_ranks(1500, 0.99, 0.95)
    assert lo < 1485 < hi <= 1500
    # coverage: the q-quantile of a known distribution lies between those order statistics
    rng = np.random.default_rng(3)

    def check(x, i):
        lo, hi = stats.quantile_ranks(x.size, 0.9, 0.95)
        s = np.sort(x)
        return s[lo - 1] <= 1.2815515655446004 <= s[hi - 1]

    assert 0.92 <= _coverage(lambda i: rng.standard_normal(500), check) <= 0.99


@pytest.mark.parametrize("x, df, want", [(3.841, 1, 0.05), (11.07, 5, 0.05), (15.086, 5, 0.01), (0.5, 3, 0.9189),
                                          (100.0, 50, 3.45e-5)])
def test_chi2_sf_matches_tables(x, df, want):
    assert stats.chi2_sf(x, df) == pytest.approx(want, rel=2e-3)


def test_heterogeneity_holds_its_false_alarm_rate_and_finds_a_run_off_its_interval():
    rng = np.random.default_rng(21)
    errors = [1.0, 2.0, 0.5, 1.5, 1.0]
    same = [stats.heterogeneity(rng.normal(10.0, errors), errors).p for _ in range(DRAWS)]
    assert sum(p < 0.01 for p in same) / DRAWS <= 0.03
    shifted = [stats.heterogeneity(rng.normal(10.0, errors) + [0, 0, 4.0, 0, 0], errors).p for _ in range(DRAWS)]
    assert sum(p < 0.01 for p in shifted) / DRAWS >= 0.9  # 8 of its standard errors off
    assert stats.heterogeneity([1.0], [0.1]) is None
    with pytest.raises(ValueError, match="as many"):
        stats.heterogeneity([1.0, 2.0], [0.1])


def test_count_heterogeneity_on_binomial_runs_and_on_runs_that_differ():
    rng = np.random.default_rng(22)
    same = [stats.count_heterogeneity([(rng.binomial(1000, 0.05), 1000) for _ in range(6)]).p for _ in range(DRAWS)]
    assert sum(p < 0.01 for p in same) / DRAWS <= 0.03
    apart = stats.count_heterogeneity([(10, 1000), (12, 1000), (60, 1000)])
    assert apart.df == 2 and apart.p < 1e-6
    assert stats.count_heterogeneity([(0, 1000), (0, 1000)]).p == 1.0


# ------------------------------------------------------------------ bistability


@pytest.mark.parametrize("low, high, factor, sigma", [(3, 3, 20.0, 0.2), (3, 3, 90.0, 0.3), (4, 4, 5.0, 0.1),
                                                      (2, 4, 10.0, 0.15), (5, 5, 3.0, 0.1)])
def test_bistable_finds_mixtures_of_two_groups(low, high, factor, sigma):
    rng = np.random.default_rng(low * 10 + high)
    found = 0
    for _ in range(200):
        x = np.r_[np.exp(rng.normal(0, sigma, low)), factor * np.exp(rng.normal(0, sigma, high))]
        rng.shuffle(x)
        split = stats.bistable(x)
        if split is not None:
            found += 1
            assert len(split.low) == low and len(split.high) == high
            assert max(split.low) < min(split.high)
            assert sorted(x[list(split.low_index)]) == sorted(split.low)
    assert found / 200 >= 0.9


@pytest.mark.parametrize("n", [4, 5, 6, 8, 10, 20])
@pytest.mark.parametrize("sigma", [0.1, 0.5, 1.5])
def test_bistable_stays_quiet_on_one_lognormal_group(n, sigma):
    rng = np.random.default_rng(n * 100 + int(sigma * 10))
    false = sum(stats.bistable(np.exp(rng.normal(3.0, sigma, n))) is not None for _ in range(DRAWS))
    assert false / DRAWS <= 0.03


def test_bistable_the_issue_example_and_edge_cases():
    # MQTT QoS 1 over wifi-noisy, p50 in ms: three runs near 100 ms, three near 9 s
    split = stats.bistable([8800.0, 98.0, 9100.0, 101.0, 8650.0, 120.0])
    assert split is not None and split.log_scale
    assert split.low == (98.0, 101.0, 120.0) and split.high == (8650.0, 8800.0, 9100.0)
    assert split.low_index == (1, 3, 5)
    # two tight groups only 5 % apart: clean, but not materially apart
    assert stats.bistable([100.0, 100.1, 100.2, 105.0, 105.1, 105.2]) is None
    # zeros: linear scale (loss none in some runs, a third of the messages in others)
    split = stats.bistable([0.0, 0.0, 0.0, 0.31, 0.28, 0.33])
    assert split is not None and not split.log_scale and split.low == (0.0, 0.0, 0.0)
    # ... but a hair of loss against none is not a second state when below min_gap
    assert stats.bistable([0.0, 0.0, 0.0, 0.001, 0.0011, 0.0012], min_gap=0.002) is None
    # too few runs, or all equal
    assert stats.bistable([1.0, 100.0, 1.0]) is None
    assert stats.bistable([5.0] * 6) is None
    # the critical value grows with n (more runs, less clean splits by chance)
    crits = [stats.bistable_critical(n) for n in (4, 6, 10, 20)]
    assert crits == sorted(crits)


# ------------------------------------------------------------------ two sets of runs


@pytest.mark.parametrize("n", [5, 10])
def test_ratio_and_difference_intervals_cover_the_true_change(n):
    rng = np.random.default_rng(n)
    pairs = [(rng.normal(100, 15, n), rng.normal(110, 15, n)) for _ in range(DRAWS)]

    def ratio_ok(ab, i):
        r = stats.ratio_interval(ab[0], ab[1], 0.95, stats.rng_for("r", n, i))
        return r.lo <= 1.1 <= r.hi

    def diff_ok(ab, i):
        d = stats.difference_interval(ab[0], ab[1], 0.95, stats.rng_for("d", n, i))
        return d.lo <= 10.0 <= d.hi

    assert 0.90 <= _coverage(lambda i: pairs[i], ratio_ok) <= 0.99
    assert 0.90 <= _coverage(lambda i: pairs[i], diff_ok) <= 0.99


def test_ratio_interval_needs_two_runs_a_side_and_positive_a():
    with pytest.raises(ValueError, match="at least 2"):
        stats.ratio_interval([1.0], [1.0, 2.0], 0.95, stats.rng_for(0))
    with pytest.raises(ValueError, match="difference_interval"):
        stats.ratio_interval([0.0, 1.0], [1.0, 2.0], 0.95, stats.rng_for(0))
    same = stats.ratio_interval([5.0, 5.0, 5.0], [5.0, 5.0, 5.0], 0.95, stats.rng_for(0))
    assert (same.value, same.lo, same.hi) == (1.0, 1.0, 1.0)


def test_proportion_difference_covers_the_true_difference():
    rng = np.random.default_rng(11)

    def make(i):
        return ([(int(rng.binomial(1500, 0.02)), 1500) for _ in range(5)],
                [(int(rng.binomial(1500, 0.03)), 1500) for _ in range(5)])

    def check(ab, i):
        d = stats.proportion_difference(ab[0], ab[1], 0.95)
        return d.lo <= 0.01 <= d.hi

    assert 0.90 <= _coverage(make, check) <= 0.99
