//! Where the ports of a link or segment are over time, and the distance between two of them.
//!
//! Owns the position trace of one port (`[{at_ns, x_m, y_m}]`, linear between points, held before the
//! first and after the last; one point is a fixed position), its validation, and the distance between
//! two ports at a time. It does not decide losses: the `Segment` draws a per-pair loss from this
//! distance (`loss::ieee80211p_draw`), the two-sided `Emulator` feeds it to both directions' models in
//! place of the link's `distance_trace`.

use crate::config::{ConfigError, LinkConfig, PositionPoint};
use crate::schedule::distance_at;

/// A port's position (x, y in metres) at `rel_ns` after the start: linear between points, held
/// outside them. None for an empty trace.
pub(crate) fn position_at(trace: &[PositionPoint], rel_ns: u64) -> Option<(f64, f64)> {
    let first = trace.first()?;
    if rel_ns <= first.at_ns {
        return Some((first.x_m, first.y_m));
    }
    let i = trace.partition_point(|p| p.at_ns <= rel_ns);
    if i >= trace.len() {
        let last = trace.last()?;
        return Some((last.x_m, last.y_m));
    }
    let (a, b) = (trace[i - 1], trace[i]);
    let f = (rel_ns - a.at_ns) as f64 / (b.at_ns - a.at_ns) as f64;
    Some((a.x_m + f * (b.x_m - a.x_m), a.y_m + f * (b.y_m - a.y_m)))
}

/// Distance (m) between two ports at `rel_ns` after the start.
pub(crate) fn distance_between(
    a: &[PositionPoint],
    b: &[PositionPoint],
    rel_ns: u64,
) -> Option<f64> {
    let (ax, ay) = position_at(a, rel_ns)?;
    let (bx, by) = position_at(b, rel_ns)?;
    Some((ax - bx).hypot(ay - by))
}

/// Distance between the two ends of a two-sided link at `rel_ns`: from the ports' positions when the
/// configuration has them, else from its distance trace (None: neither, the model's own distance).
pub(crate) fn link_distance(cfg: &LinkConfig, rel_ns: u64) -> Option<f64> {
    match cfg.positions.as_slice() {
        [a, b] => distance_between(a, b, rel_ns),
        _ => distance_at(&cfg.distance_trace, rel_ns),
    }
}

/// Checks that `cfg` has a position for each of `ports` ports, or none at all.
pub(crate) fn check_count(cfg: &LinkConfig, ports: usize) -> Result<(), ConfigError> {
    let n = cfg.positions.len();
    if n != 0 && n != ports {
        return Err(ConfigError::invalid(
            "positions",
            format!("{n} port positions"),
            &format!("one position per port ({ports}), in port order, or none"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(at_ns: u64, x_m: f64, y_m: f64) -> PositionPoint {
        PositionPoint { at_ns, x_m, y_m }
    }

    #[test]
    fn position_interpolates_and_holds() {
        let t = [pt(1_000, 0.0, 0.0), pt(3_000, 30.0, 40.0)];
        assert_eq!(position_at(&t, 0), Some((0.0, 0.0)));
        assert_eq!(position_at(&t, 2_000), Some((15.0, 20.0)));
        assert_eq!(position_at(&t, 9_000), Some((30.0, 40.0)));
        assert_eq!(position_at(&[], 0), None);
        let fixed = [pt(0, 0.0, 0.0)];
        assert_eq!(distance_between(&t, &fixed, 3_000), Some(50.0));
        assert_eq!(distance_between(&t, &fixed, 2_000), Some(25.0));
    }
}
