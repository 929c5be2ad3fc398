//! Sets of bundle ids as sorted, disjoint, non-adjacent ranges `[start, end)`.
//!
//! Owns the compact summary a sync side announces ("I hold 0..40, 100..140") and
//! the set arithmetic the reconciliation needs (difference, superset, first id).
//! Stores that grow in id order stay a handful of ranges, so a summary fits one
//! small message.  No I/O, no clock.

/// A set of 32-bit bundle ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdSet {
    /// Sorted by start, disjoint and non-adjacent (`r[i].1 < r[i+1].0`), never empty ranges.
    r: Vec<(u32, u32)>,
}

impl IdSet {
    pub fn new() -> Self {
        IdSet { r: Vec::new() }
    }

    /// The ids `start .. start + count`.
    pub fn span(start: u32, count: u32) -> Self {
        let mut s = IdSet::new();
        if count > 0 {
            s.r.push((start, start + count));
        }
        s
    }

    /// Build from ranges in any order (overlapping and empty ones allowed).
    pub fn from_ranges(ranges: impl IntoIterator<Item = (u32, u32)>) -> Self {
        let mut v: Vec<(u32, u32)> = ranges.into_iter().filter(|(a, b)| a < b).collect();
        v.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        IdSet { r: out }
    }

    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.r
    }

    pub fn len(&self) -> u64 {
        self.r.iter().map(|(a, b)| (b - a) as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.r.is_empty()
    }

    /// Index of the range that would hold `id` (the last range starting at or before it).
    fn slot(&self, id: u32) -> Option<usize> {
        match self.r.partition_point(|(a, _)| *a <= id) {
            0 => None,
            i => Some(i - 1),
        }
    }

    pub fn contains(&self, id: u32) -> bool {
        self.slot(id).is_some_and(|i| id < self.r[i].1)
    }

    /// Add `id`; true when it was not there.
    pub fn insert(&mut self, id: u32) -> bool {
        if self.contains(id) {
            return false;
        }
        let i = self.r.partition_point(|(a, _)| *a <= id);
        let joins_left = i > 0 && self.r[i - 1].1 == id;
        let joins_right = i < self.r.len() && id.checked_add(1) == Some(self.r[i].0);
        match (joins_left, joins_right) {
            (true, true) => {
                self.r[i - 1].1 = self.r[i].1;
                self.r.remove(i);
            }
            (true, false) => self.r[i - 1].1 = id + 1,
            (false, true) => self.r[i].0 = id,
            (false, false) => self.r.insert(i, (id, id + 1)),
        }
        true
    }

    /// Remove and return the smallest id.
    pub fn pop_first(&mut self) -> Option<u32> {
        let first = self.r.first_mut()?;
        let id = first.0;
        first.0 += 1;
        if first.0 == first.1 {
            self.r.remove(0);
        }
        Some(id)
    }

    /// The ids in `self` and not in `other`.
    pub fn difference(&self, other: &IdSet) -> IdSet {
        let mut out = Vec::new();
        let mut j = 0;
        for &(mut a, b) in &self.r {
            while j < other.r.len() && other.r[j].1 <= a {
                j += 1;
            }
            let mut k = j;
            while a < b {
                match other.r.get(k) {
                    Some(&(oa, ob)) if oa < b => {
                        if oa > a {
                            out.push((a, oa));
                        }
                        a = a.max(ob);
                        k += 1;
                    }
                    _ => {
                        out.push((a, b));
                        break;
                    }
                }
            }
        }
        IdSet { r: out }
    }

    /// True when every id of `other` is in `self`.
    pub fn is_superset(&self, other: &IdSet) -> bool {
        other.difference(self).is_empty()
    }

    /// The first `max` ranges only (a truthful subset when the set is too fragmented to announce whole).
    pub fn truncated(&self, max: usize) -> IdSet {
        IdSet {
            r: self.r.iter().take(max).copied().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(s: &IdSet, upto: u32) -> Vec<u32> {
        (0..upto).filter(|&i| s.contains(i)).collect()
    }

    #[test]
    fn insert_merges_neighbours_and_counts() {
        let mut s = IdSet::span(10, 5); // 10..15
        assert!(!s.insert(12));
        assert!(s.insert(15));
        assert!(s.insert(17));
        assert_eq!(s.ranges(), &[(10, 16), (17, 18)]);
        assert!(s.insert(16));
        assert_eq!(s.ranges(), &[(10, 18)]);
        assert!(s.insert(9));
        assert!(s.insert(0));
        assert_eq!(s.ranges(), &[(0, 1), (9, 18)]);
        assert_eq!(s.len(), 10);
        assert_eq!(s.pop_first(), Some(0));
        assert_eq!(s.pop_first(), Some(9));
        assert_eq!(s.ranges(), &[(10, 18)]);
    }

    #[test]
    fn difference_and_superset_agree_with_brute_force() {
        // Deterministic pseudo-random sets over 0..200.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let mut a = IdSet::new();
            let mut b = IdSet::new();
            for _ in 0..(next() % 120) {
                a.insert((next() % 200) as u32);
            }
            for _ in 0..(next() % 120) {
                b.insert((next() % 200) as u32);
            }
            let d = a.difference(&b);
            let want: Vec<u32> = brute(&a, 200)
                .into_iter()
                .filter(|i| !b.contains(*i))
                .collect();
            assert_eq!(brute(&d, 200), want);
            assert_eq!(d.len(), want.len() as u64);
            let sup = brute(&b, 200).iter().all(|i| a.contains(*i));
            assert_eq!(a.is_superset(&b), sup);
            let rebuilt = IdSet::from_ranges(a.ranges().iter().rev().copied());
            assert_eq!(rebuilt, a);
        }
    }

    #[test]
    fn ranges_from_any_order_are_normalised() {
        let s = IdSet::from_ranges([(5, 9), (0, 3), (3, 4), (8, 12), (20, 20)]);
        assert_eq!(s.ranges(), &[(0, 4), (5, 12)]);
        assert_eq!(s.truncated(1).ranges(), &[(0, 4)]);
        assert!(s.is_superset(&s.truncated(1)));
    }
}
