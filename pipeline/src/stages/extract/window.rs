//! The truncated sliding window of the paper (§3.1): which preceding chunks an extraction of
//! chunk i sees as context.

use std::ops::Range;

/// Window parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Maximum window size g_max (the target chunk included).
    pub g_max: usize,
    /// Overlap g_overlap between consecutive windows (< g_max).
    pub g_overlap: usize,
    /// `false` turns the window off: every chunk is extracted alone (the paper's "w/o SW").
    pub enabled: bool,
}

impl Window {
    /// The prefix of chunk `i` (1-based, as in the paper) as a range of 1-based chunk numbers:
    /// τ(i) = ⌊(i − 1 − g_overlap) / (g_max − g_overlap)⌋ · (g_max − g_overlap) + 1,
    /// s(i) = max(1, τ(i)), prefix = C_s(i) … C_(i−1), empty for i = 1.
    pub fn prefix(self, i: usize) -> Range<usize> {
        if !self.enabled || i <= 1 {
            return i..i;
        }
        let step = (self.g_max - self.g_overlap) as i64;
        let tau = (i as i64 - 1 - self.g_overlap as i64).div_euclid(step) * step + 1;
        let start = tau.max(1) as usize;
        start..i
    }
}

impl From<&super::ExtractConfig> for Window {
    fn from(config: &super::ExtractConfig) -> Self {
        Window { g_max: config.g_max, g_overlap: config.g_overlap, enabled: config.window }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(g_max: usize, g_overlap: usize) -> Vec<Vec<usize>> {
        let w = Window { g_max, g_overlap, enabled: true };
        (1..=8).map(|i| w.prefix(i).collect()).collect()
    }

    #[test]
    fn windows_for_g_max_3_overlap_1() {
        // Windows restart every two chunks: {C1}, {C1 C2}, then {C3}, {C3 C4}, {C5}, …
        assert_eq!(table(3, 1), vec![vec![], vec![1], vec![1, 2], vec![3], vec![3, 4], vec![5], vec![5, 6], vec![7]]);
    }

    #[test]
    fn windows_for_g_max_3_overlap_2() {
        // The paper's default: always the two preceding chunks.
        assert_eq!(
            table(3, 2),
            vec![vec![], vec![1], vec![1, 2], vec![2, 3], vec![3, 4], vec![4, 5], vec![5, 6], vec![6, 7]]
        );
    }

    #[test]
    fn window_off_and_degenerate_sizes() {
        let off = Window { g_max: 3, g_overlap: 2, enabled: false };
        assert!((1..=5).all(|i| off.prefix(i).is_empty()));
        let single = Window { g_max: 1, g_overlap: 0, enabled: true };
        assert!((1..=5).all(|i| single.prefix(i).is_empty()));
        let wide = Window { g_max: 5, g_overlap: 4, enabled: true };
        assert_eq!(wide.prefix(9), 5..9);
        for i in 1..50 {
            let p = Window { g_max: 4, g_overlap: 1, enabled: true }.prefix(i);
            assert!(p.end == i && p.len() < 4, "{i}: {p:?}");
        }
    }
}
