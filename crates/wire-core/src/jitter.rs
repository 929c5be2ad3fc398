//! Delay jitter: draws the random part of a frame's delay from the configured distribution.
//!
//! Owns the correlation state and the shapes (uniform, normal, pareto, paretonormal). It does
//! not decide ordering: `direction.rs` applies the no-reorder rule to what this returns.
//! Correlation follows netem's `get_crandom` (q_netem.c): the uniform variate is mixed with
//! the previous one, u = (1 - rho) u_new + rho u_last, and then mapped through the inverse
//! CDF. netem maps through 4096-entry tables made by iproute2's maketable; we compute the
//! inverse CDF directly, so the shapes match without table quantisation.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::config::JitterDist;

/// Shape parameter of the Pareto jitter (iproute2 netem/pareto.c: `a = 3`).
pub const PARETO_SHAPE: f64 = 3.0;
/// Share of Pareto in the paretonormal mixture (iproute2 netem/paretonormal.c: 25 %).
pub const PARETONORMAL_PARETO_SHARE: f64 = 0.25;

#[derive(Debug, Clone)]
pub struct Jitter {
    last_u: Option<f64>,
}

impl Default for Jitter {
    fn default() -> Self {
        Self::new()
    }
}

impl Jitter {
    pub fn new() -> Self {
        Jitter { last_u: None }
    }

    /// Signed jitter in ns for one frame: bounded by +-`jitter_ns` for `uniform`, with standard
    /// deviation `jitter_ns` (and mean 0) for the other shapes.
    pub fn sample(
        &mut self,
        rng: &mut ChaCha8Rng,
        jitter_ns: u64,
        dist: JitterDist,
        correlation: f64,
    ) -> i64 {
        if jitter_ns == 0 {
            return 0;
        }
        let mut u: f64 = rng.gen();
        if correlation > 0.0 {
            if let Some(last) = self.last_u {
                u = (1.0 - correlation) * u + correlation * last;
            }
        }
        self.last_u = Some(u);
        let sigma = jitter_ns as f64;
        let x = match dist {
            JitterDist::Uniform => (2.0 * u - 1.0) * sigma,
            JitterDist::Normal => standard_normal(u) * sigma,
            JitterDist::Pareto => standard_pareto(u) * sigma,
            JitterDist::Paretonormal => {
                // The mixture of iproute2's paretonormal.c: sum of a scaled Pareto and a scaled
                // normal variate, here both driven by the one (correlated) uniform for the
                // normal part and a second independent uniform for the Pareto part; rescaled to
                // unit variance: var = s^2 + (1 - s)^2 for independent unit-variance parts.
                let v: f64 = rng.gen();
                let s = PARETONORMAL_PARETO_SHARE;
                let raw = s * standard_pareto(v) + (1.0 - s) * standard_normal(u);
                raw / (s * s + (1.0 - s) * (1.0 - s)).sqrt() * sigma
            }
        };
        x.round() as i64
    }
}

/// Pareto(x_m = 1, a = 3) standardised to mean 0 and standard deviation 1:
/// x = (1 - u)^(-1/a), mean a/(a-1) = 1.5, variance a/((a-1)^2 (a-2)) = 0.75.
pub fn standard_pareto(u: f64) -> f64 {
    let a = PARETO_SHAPE;
    let u = u.clamp(0.0, 1.0 - 1e-12);
    let x = (1.0 - u).powf(-1.0 / a);
    let mean = a / (a - 1.0);
    let sd = (a / ((a - 1.0) * (a - 1.0) * (a - 2.0))).sqrt();
    (x - mean) / sd
}

/// Inverse of the standard normal CDF (Acklam's rational approximation, relative error
/// below 1.2e-9; P. J. Acklam, "An algorithm for computing the inverse normal cumulative
/// distribution function", 2003).
pub fn standard_normal(u: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const P_LOW: f64 = 0.02425;
    let p = u.clamp(1e-15, 1.0 - 1e-15);
    if p < P_LOW {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - P_LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn moments(dist: JitterDist) -> (f64, f64) {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut j = Jitter::new();
        let n = 200_000;
        let xs: Vec<f64> = (0..n)
            .map(|_| j.sample(&mut rng, 1_000_000, dist, 0.0) as f64 / 1e6)
            .collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        (mean, var.sqrt())
    }

    #[test]
    fn normal_quantiles() {
        assert!(standard_normal(0.5).abs() < 1e-9);
        assert!((standard_normal(0.975) - 1.959_963_985).abs() < 1e-6);
        assert!((standard_normal(0.001) + 3.090_232_306).abs() < 1e-6);
    }

    #[test]
    fn shapes_have_mean_zero_and_unit_scale() {
        // Uniform on [-1, 1]: sd 1/sqrt(3). Others: sd 1. Bounds are generous for 200k draws
        // (the Pareto's heavy tail converges slowest).
        let (m, s) = moments(JitterDist::Uniform);
        assert!(
            m.abs() < 0.01 && (s - 1.0 / 3f64.sqrt()).abs() < 0.01,
            "uniform {m} {s}"
        );
        let (m, s) = moments(JitterDist::Normal);
        assert!(m.abs() < 0.01 && (s - 1.0).abs() < 0.01, "normal {m} {s}");
        let (m, s) = moments(JitterDist::Pareto);
        assert!(m.abs() < 0.02 && (s - 1.0).abs() < 0.1, "pareto {m} {s}");
        let (m, s) = moments(JitterDist::Paretonormal);
        assert!(
            m.abs() < 0.02 && (s - 1.0).abs() < 0.1,
            "paretonormal {m} {s}"
        );
    }

    #[test]
    fn correlation_makes_successive_draws_alike() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let lag1 = |rho: f64, rng: &mut ChaCha8Rng| {
            let mut j = Jitter::new();
            let xs: Vec<f64> = (0..50_000)
                .map(|_| j.sample(rng, 1000, JitterDist::Uniform, rho) as f64)
                .collect();
            let m = xs.iter().sum::<f64>() / xs.len() as f64;
            let c: f64 = xs.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum();
            let v: f64 = xs.iter().map(|x| (x - m) * (x - m)).sum();
            c / v
        };
        let r0 = lag1(0.0, &mut rng);
        let r75 = lag1(0.75, &mut rng);
        assert!(r0.abs() < 0.03, "{r0}");
        assert!(r75 > 0.6, "{r75}");
    }
}
