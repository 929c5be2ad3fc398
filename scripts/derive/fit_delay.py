#!/usr/bin/env python3
"""Fit a profile's delay and jitter to a cited round-trip distribution (percentiles); print the fit and its error.

The profiles of python/roughnet/spec/profiles.toml put the whole jitter on the uplink
(a_to_b) and split the fixed delay evenly, so a round trip is D + sigma * Q(q), where Q is
the quantile function of roughnet-wire's unit-scale jitter shape (crates/wire-core/src/jitter.rs:
uniform on [-1, 1], normal, netem's Pareto of shape 3 shifted to mean 0 and scaled to unit
standard deviation, and paretonormal: 25 % Pareto + 75 % normal, rescaled).  For each shape,
D and sigma are the least-squares line through the cited (Q(q), RTT_q) points; the shape with
the smallest largest relative error is the fit.  Usage:

    scripts/derive/fit_delay.py 10:35 50:44.2 90:73.2 99:116      # percentile:ms ...

Prints one line per shape (D ms, sigma ms, each percentile fitted against cited) and the pick,
as the `derived` text of profiles.toml quotes it.  Standard library only.
"""

from __future__ import annotations

import math
import random
import sys
from statistics import NormalDist

SHARE = 0.25  # PARETONORMAL_PARETO_SHARE
A = 3.0  # PARETO_SHAPE


def pareto_unit(u: float) -> float:
    x = (1.0 - u) ** (-1.0 / A)
    return (x - A / (A - 1)) / math.sqrt(A / ((A - 1) ** 2 * (A - 2)))


def quantiles(shape: str, qs: list[float]) -> list[float]:
    if shape == "uniform":
        return [2 * q - 1 for q in qs]
    if shape == "normal":
        return [NormalDist().inv_cdf(q) for q in qs]
    if shape == "pareto":
        return [pareto_unit(q) for q in qs]
    rng = random.Random(1)
    nd = NormalDist()
    scale = math.sqrt(SHARE ** 2 + (1 - SHARE) ** 2)
    xs = sorted((SHARE * pareto_unit(rng.random()) + (1 - SHARE) * nd.inv_cdf(min(max(rng.random(), 1e-12), 1 - 1e-12)))
                / scale for _ in range(400_000))
    return [xs[min(len(xs) - 1, int(q * len(xs)))] for q in qs]


def fit(points: dict[float, float]) -> list[tuple[str, float, float, list[tuple[float, float, float]], float]]:
    qs = sorted(points)
    ys = [points[q] for q in qs]
    out = []
    for shape in ("uniform", "normal", "pareto", "paretonormal"):
        xs = quantiles(shape, [q / 100 for q in qs])
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        sigma = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx) if sxx else 0.0
        d = my - sigma * mx
        rows = [(q, y, max(0.0, d + sigma * x)) for q, x, y in zip(qs, xs, ys)]
        worst = max(abs(f - y) / y for _, y, f in rows)
        out.append((shape, d, sigma, rows, worst))
    return out


def main(argv: list[str]) -> int:
    try:
        points = {float(a.split(":")[0]): float(a.split(":")[1]) for a in argv}
    except (IndexError, ValueError):
        print(__doc__, file=sys.stderr)
        return 2
    if len(points) < 2:
        print("need at least two percentile:ms points", file=sys.stderr)
        return 2
    fits = fit(points)
    for shape, d, sigma, rows, worst in fits:
        got = ", ".join(f"p{q:g} {f:.1f} (cited {y:g})" for q, y, f in rows)
        print(f"{shape:13s} D {d:7.2f} ms  sigma {sigma:7.2f} ms  {got}  worst {100 * worst:.0f} %")
    shape, d, sigma, rows, worst = min(fits, key=lambda f: f[4])
    print(f"pick: {shape}, round trip {d:.2f} ms ({d / 2:.2f} ms each way), uplink jitter sigma {sigma:.2f} ms; "
          + ", ".join(f"p{q:g} {f:.1f} against {y:g}" for q, y, f in rows) + f"; largest error {100 * worst:.0f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
