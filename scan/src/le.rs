//! Floats and row numbers as the little-endian bytes the index's vector and approximate-index
//! files hold. Here, not beside those files, because this crate is compiled optimised in every
//! profile: the plain loops below run at memory speed, where in an unoptimised crate converting
//! a kb's hundreds of megabytes of vectors took seconds per merge and per load. The functions are
//! not generic on purpose (a generic function is compiled in the crate that calls it).

/// Appends the little-endian bytes of `values` to `out`.
pub fn extend_f32_le(out: &mut Vec<u8>, values: &[f32]) {
    out.reserve(4 * values.len());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Appends the little-endian bytes of `values` to `out`.
pub fn extend_u32_le(out: &mut Vec<u8>, values: &[u32]) {
    out.reserve(4 * values.len());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Fills `into` with the little-endian floats at the start of `bytes`, which must hold at
/// least `4 * into.len()` bytes (returns false, `into` untouched, when it does not).
pub fn read_f32_le(bytes: &[u8], into: &mut [f32]) -> bool {
    if bytes.len() < 4 * into.len() {
        return false;
    }
    for (value, b) in into.iter_mut().zip(bytes.chunks_exact(4)) {
        *value = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    true
}

/// The little-endian row numbers that `bytes` holds (a trailing part of a number is ignored).
pub fn u32s_le(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_and_row_numbers_come_back_as_they_went() {
        let floats = [0.0f32, -1.5, f32::MAX, f32::MIN_POSITIVE, 1e-40, f32::INFINITY];
        let mut bytes = Vec::new();
        extend_f32_le(&mut bytes, &floats);
        assert_eq!(&bytes[4..8], &(-1.5f32).to_le_bytes());
        let mut back = [9.0f32; 6];
        assert!(read_f32_le(&bytes, &mut back));
        assert_eq!(back.map(f32::to_bits), floats.map(f32::to_bits));
        assert!(!read_f32_le(&bytes[..23], &mut back), "too few bytes");

        let rows = [0u32, 1, 0xdead_beef, u32::MAX];
        let mut bytes = Vec::new();
        extend_u32_le(&mut bytes, &rows);
        bytes.push(7);
        assert_eq!(bytes[..4], [0, 0, 0, 0]);
        assert_eq!(bytes[8..12], [0xef, 0xbe, 0xad, 0xde]);
        assert_eq!(u32s_le(&bytes), rows);
    }
}
