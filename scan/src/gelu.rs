//! GELU, `x · Φ(x)` with the exact (erf-based) normal CDF, as BERT models such as
//! all-MiniLM-L6-v2 define it, over a whole slice at the processor's vector width.
//!
//! candle computes it one element at a time with libm's `erff`: a sixth of MiniLM's time on short
//! inputs. Here every step is branch-free arithmetic, so the compiler vectorises the loop inside
//! `pulp`'s run-time dispatch (AVX2 + FMA where present):
//!
//! - `2Φ(x) = erfc(z)` for `x < 0` and `2 − erfc(z)` otherwise, with `z = |x|/√2` clamped to
//!   `[0, 9]` (beyond 9, `erfc` is below 10⁻³⁶ and `Φ` is 0 or 1 in `f32`). Taking `erfc` of the
//!   magnitude keeps the full relative precision of the small negative outputs, which
//!   `1 + erf(x/√2)` loses to cancellation.
//! - `erfc(z) = exp(−z²) · t · q(t)` with `t = 1 / (1 + z/2)`: `q` is smooth on `t ∈ [2/11, 1]`
//!   (from 1 at `z = 0` to about 0.35 at `z = 9`) and is a degree-10 polynomial there,
//!   interpolated at Chebyshev nodes (`mpmath.chebyfit` of `erfc(z)·exp(z²)/t`, 30 digits;
//!   largest error 1.8·10⁻⁹).
//! - `exp(a) = 2ⁿ · 2ᶠ` with `n` the nearest integer to `a·log₂e` (placed in the exponent bits)
//!   and `2ᶠ`, `|f| ≤ ½`, by its Taylor series to degree 7 (truncation error below 10⁻⁸).
//!
//! Over ±12 the result is within 10⁻⁶ of the exact value, relative and scaled by the function's
//! condition number (the test sweeps it).

use pulp::{Arch, Simd, WithSimd};

/// Coefficients of `q(t)`, highest degree first (Horner).
const ERFC_Q: [f32; 11] = [
    0.029_826_55,
    -0.156_028_68,
    0.291_031_45,
    -0.155_190_4,
    -0.149_119_33,
    0.115_208_52,
    0.021_310_708,
    0.194_919_05,
    0.243_545_4,
    0.282_415_2,
    0.282_081_5,
];

/// `ln(2)^k / k!` for k = 7 down to 0: the Taylor series of `2ᶠ = e^(f·ln 2)`, Horner order.
const EXP2_TAYLOR: [f32; 8] = [
    1.525_273_4e-5,
    1.540_353e-4,
    1.333_355_8e-3,
    9.618_129e-3,
    5.550_411e-2,
    0.240_226_5,
    std::f32::consts::LN_2,
    1.0,
];

/// Replaces every value `x` by `gelu(x) = x · Φ(x)`.
pub fn gelu(values: &mut [f32]) {
    Arch::new().dispatch(Gelu { values });
}

struct Gelu<'a> {
    values: &'a mut [f32],
}

impl WithSimd for Gelu<'_> {
    type Output = ();

    // A plain loop: inlined here, it is compiled with the dispatched instruction set and
    // vectorised by the compiler.
    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        for x in self.values.iter_mut() {
            *x = gelu_one(*x);
        }
    }
}

#[inline(always)]
fn gelu_one(x: f32) -> f32 {
    let z = (x.abs() * std::f32::consts::FRAC_1_SQRT_2).min(9.0);
    let t = 1.0 / (1.0 + 0.5 * z);
    let mut q = ERFC_Q[0];
    for c in &ERFC_Q[1..] {
        q = q * t + c;
    }
    let erfc = exp_neg(z * z) * t * q;
    let twice_phi = if x < 0.0 { erfc } else { 2.0 - erfc };
    0.5 * x * twice_phi
}

/// `exp(−a)` for `a ∈ [0, 81]`.
#[inline(always)]
pub(crate) fn exp_neg(a: f32) -> f32 {
    // Adding 1.5·2²³ rounds y to the nearest integer (ties to even) and leaves that integer in
    // the low bits of the sum: integer arithmetic on the bits, which vectorises where a
    // float-to-integer conversion (saturating in Rust) would not.
    const SHIFT: f32 = 12_582_912.0;
    let y = -a * std::f32::consts::LOG2_E;
    let shifted = y + SHIFT;
    let n = shifted - SHIFT;
    let f = y - n;
    let mut p = EXP2_TAYLOR[0];
    for c in &EXP2_TAYLOR[1..] {
        p = p * f + c;
    }
    // n ∈ [−117, 0]: 2ⁿ is a normal float, built from its exponent bits.
    let n_bits = shifted.to_bits().wrapping_sub(SHIFT.to_bits());
    let two_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    p * two_n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GELU in double precision: `Φ(x) = erfc(−x/√2) / 2` has no cancellation for either sign.
    fn exact(x: f32) -> f64 {
        let x = f64::from(x);
        0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
    }

    /// candle's definition, with libm's single-precision erf.
    fn candle(x: f32) -> f32 {
        (libm::erff(x * std::f32::consts::FRAC_1_SQRT_2) + 1.0) * 0.5 * x
    }

    #[test]
    fn matches_double_precision_and_candles_definition_from_minus_12_to_12() {
        let xs: Vec<f32> = (-120_000..=120_000).map(|i| i as f32 * 1e-4).chain([1e-30, -1e-30]).collect();
        let mut got = xs.clone();
        gelu(&mut got);
        let (mut worst, mut worst_candle) = ((0f64, 0f32), (0f32, 0f32));
        for (&x, &g) in xs.iter().zip(&got) {
            let want = exact(x);
            // Relative, over the function's condition number (about x² for very negative x:
            // rounding x to f32 alone moves the output that much).
            let rel = (f64::from(g) - want).abs() / want.abs().max(1e-300) / f64::from(x * x).max(1.0);
            if rel > worst.0 {
                worst = (rel, x);
            }
            // candle's 1 + erf cancels for negative x: compare on the scale of x.
            let diff = (g - candle(x)).abs() / x.abs().max(1.0);
            if diff > worst_candle.0 {
                worst_candle = (diff, x);
            }
        }
        assert!(worst.0 < 1e-6, "largest relative error {} at x = {}", worst.0, worst.1);
        assert!(worst_candle.0 < 2e-7, "largest difference from candle's {} at x = {}", worst_candle.0, worst_candle.1);
    }

    #[test]
    fn exact_points_and_extremes() {
        let mut v = [0.0, 1.0, -1.0, 9.0, -9.0, 40.0, -40.0, f32::INFINITY];
        gelu(&mut v);
        assert_eq!(v[0], 0.0);
        // Φ(1) = 0.841344746…
        assert!((v[1] - 0.841_344_8).abs() < 1e-6, "{}", v[1]);
        assert!((v[2] + 0.158_655_25).abs() < 1e-6, "{}", v[2]);
        assert_eq!(v[3], 9.0);
        assert!(v[4] <= 0.0 && v[4] > -1e-17, "{}", v[4]);
        assert_eq!(v[5], 40.0);
        assert!(v[6] <= 0.0 && v[6] > -1e-30, "{}", v[6]);
        assert_eq!(v[7], f32::INFINITY);
        let mut nan = [f32::NAN];
        gelu(&mut nan);
        assert!(nan[0].is_nan());
    }
}
