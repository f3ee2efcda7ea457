//! The attention softmax of a BERT layer, scaled and masked in the same pass, over a whole
//! tensor of score rows at the processor's vector width.
//!
//! candle's own last-dimension softmax calls libm's `expf` once per element after two more
//! passes over the scores (the scale, the mask): on 256-token inputs, whose scores are
//! 12 × 256 × 256 a layer, a tenth of MiniLM's time (CHANGELOG.md, measurement history). Here each row is read
//! once to scale, mask and find its maximum, once to exponentiate (the branch-free `exp` of
//! [`crate::gelu`], vectorised by the compiler) and sum, and once to normalise.

use pulp::{Arch, Simd, WithSimd};

use crate::gelu::exp_neg;

/// Lanes of the running maximum and sum: independent accumulators the compiler keeps in one
/// vector register (a single running sum would be a chain it may not reorder).
const LANES: usize = 8;

/// Past this distance below a row's maximum, `exp` is below 10⁻³⁵ and taken as 0 (masked
/// positions, whose bias is `-f32::MAX`, are far past it).
const EXP_FLOOR: f32 = 80.0;

/// Replaces every row of `len` values `x` by `softmax(scale · x + bias)`, where row `r` takes
/// the bias row `r / rows_per_bias` of `bias` (`len` values each; 0 for a position to attend
/// to, `-f32::MAX` for padding). `values.len()` is a multiple of `len`, and `bias` holds
/// `values.len() / len / rows_per_bias` rows.
///
/// A BERT layer's scores are `batch × heads × length × length`, and the mask is one row per
/// input: `rows_per_bias = heads × length`.
///
/// # Panics
/// When the shapes disagree (a programming error, not an input error).
pub fn softmax_rows(values: &mut [f32], len: usize, scale: f32, bias: &[f32], rows_per_bias: usize) {
    if values.is_empty() {
        return;
    }
    assert!(len > 0 && rows_per_bias > 0 && values.len().is_multiple_of(len), "softmax_rows: rows of {len}");
    assert_eq!(bias.len() * rows_per_bias, values.len(), "softmax_rows: one bias row per {rows_per_bias} rows");
    Arch::new().dispatch(Softmax { values, len, scale, bias, rows_per_bias });
}

struct Softmax<'a> {
    values: &'a mut [f32],
    len: usize,
    scale: f32,
    bias: &'a [f32],
    rows_per_bias: usize,
}

impl WithSimd for Softmax<'_> {
    type Output = ();

    // Plain loops, inlined here, so that they are compiled with the dispatched instruction set.
    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Softmax { values, len, scale, bias, rows_per_bias } = self;
        for (r, row) in values.chunks_exact_mut(len).enumerate() {
            let bias = &bias[(r / rows_per_bias) * len..][..len];
            let mut max = [f32::MIN; LANES];
            let mut xs = row.chunks_exact_mut(LANES);
            let mut bs = bias.chunks_exact(LANES);
            for (x, b) in (&mut xs).zip(&mut bs) {
                for l in 0..LANES {
                    x[l] = x[l] * scale + b[l];
                    max[l] = max[l].max(x[l]);
                }
            }
            for (x, b) in xs.into_remainder().iter_mut().zip(bs.remainder()) {
                *x = *x * scale + b;
                max[0] = max[0].max(*x);
            }
            let max = max.into_iter().fold(f32::MIN, f32::max);
            let mut sum = [0f32; LANES];
            let mut xs = row.chunks_exact_mut(LANES);
            for x in &mut xs {
                for l in 0..LANES {
                    x[l] = exp_below(max - x[l]);
                    sum[l] += x[l];
                }
            }
            for x in xs.into_remainder() {
                *x = exp_below(max - *x);
                sum[0] += *x;
            }
            let inverse = 1.0 / sum.into_iter().sum::<f32>();
            for x in row.iter_mut() {
                *x *= inverse;
            }
        }
    }
}

/// `exp(−a)` for `a ≥ 0`, 0 from [`EXP_FLOOR`] on.
#[inline(always)]
fn exp_below(a: f32) -> f32 {
    let e = exp_neg(a.min(EXP_FLOOR));
    if a < EXP_FLOOR { e } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The softmax in double precision, one row.
    fn exact(row: &[f32], scale: f32, bias: &[f32]) -> Vec<f64> {
        let x: Vec<f64> = row.iter().zip(bias).map(|(&v, &b)| f64::from(v) * f64::from(scale) + f64::from(b)).collect();
        let max = x.iter().copied().fold(f64::MIN, f64::max);
        let e: Vec<f64> = x.iter().map(|v| (v - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.iter().map(|v| v / sum).collect()
    }

    #[test]
    fn matches_double_precision_with_padding_masked() {
        let mut rng = fastrand::Rng::with_seed(11);
        // Two inputs of 37 positions, 3 heads: the second input's last 9 positions are padding.
        let (len, heads) = (37, 3);
        let mut bias = vec![0f32; 2 * len];
        for b in &mut bias[len + 28..] {
            *b = -f32::MAX;
        }
        let scores: Vec<f32> = (0..2 * heads * len * len).map(|_| (rng.f32() - 0.5) * 40.0).collect();
        let mut got = scores.clone();
        softmax_rows(&mut got, len, 0.125, &bias, heads * len);
        for (r, (row, input)) in got.chunks(len).zip(scores.chunks(len)).enumerate() {
            let b = &bias[(r / (heads * len)) * len..][..len];
            let want = exact(input, 0.125, b);
            for (g, w) in row.iter().zip(&want) {
                assert!((f64::from(*g) - w).abs() < 1e-6 * w + 1e-12, "row {r}: {g} vs {w}");
            }
            let total: f32 = row.iter().sum();
            assert!((total - 1.0).abs() < 1e-5, "row {r} sums to {total}");
            if r >= heads * len {
                assert!(row[28..].iter().all(|&p| p == 0.0), "padding attended in row {r}");
            }
        }
    }

    #[test]
    fn large_spreads_and_one_position() {
        // A score 100 above the others takes all the weight; the others underflow to 0.
        let mut row = [0.0, 100.0, -50.0, 3.0];
        softmax_rows(&mut row, 4, 1.0, &[0.0; 4], 1);
        assert_eq!(row, [0.0, 1.0, 0.0, 0.0]);
        let mut one = [42.0, -7.0];
        softmax_rows(&mut one, 1, 0.5, &[0.0], 2);
        assert_eq!(one, [1.0, 1.0]);
        softmax_rows(&mut [], 4, 1.0, &[], 1);
    }
}
