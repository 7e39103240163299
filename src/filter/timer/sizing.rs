//! Sizing formulas from the papers (one-is-enough §2, §3, §5; DBF §3).
//!
//! Pure functions of m (cells), k (hashes), n (keys) and p (false-positive
//! rate), used to size filters and to predict the rates the accuracy harness
//! then measures.

use std::f64::consts::LN_2;

/// Cells and hashes for `n` distinct keys at false-positive rate `p`:
/// `m = ⌈-n·ln p / ln²2⌉`, `k = round(ln 2 · m/n)` (at least 1).
pub fn optimal_cells_and_hashes(n: u64, p: f64) -> (u64, u32) {
    let n = n.max(1) as f64;
    let m = (-n * p.ln() / (LN_2 * LN_2)).ceil().max(2.0);
    let k = (LN_2 * m / n).round().max(1.0);
    (m as u64, k as u32)
}

/// `P_fp(m,k,n) = (1 - e^(-kn/m))^k`: a Bloom filter's false-positive rate.
pub fn bloom_fpr(m: f64, k: f64, n: f64) -> f64 {
    (1.0 - (-k * n / m).exp()).powf(k)
}

/// Eq. 4, horizontal slicing: `(1 - (1 - S/m)^(k·n/S))^k`.
pub fn horizontal_fpr(m: f64, k: f64, n: f64, slices: f64) -> f64 {
    (1.0 - (1.0 - slices / m).powf(k * n / slices)).powf(k)
}

/// The false-positive rate a filter of the given density predicts: `(z/m)^k`.
pub fn fpr_from_density(density: f64, k: u32) -> f64 {
    density.powi(k as i32)
}

/// The density at which a generation reaches false-positive rate `p`:
/// `z/m = p^(1/k)` (§5, density threshold).
pub fn density_threshold(p: f64, k: u32) -> f64 {
    p.powf(1.0 / f64::from(k))
}

/// The number of keys at which a generation of `m` cells reaches `p`:
/// `n = -(m/k)·ln(1 - p^(1/k))` (§5, cardinality threshold).
pub fn cardinality_threshold(m: u64, k: u32, p: f64) -> f64 {
    -(m as f64 / f64::from(k)) * (1.0 - density_threshold(p, k)).ln()
}

/// Keys a generation of `m` cells holds at density `z/m`:
/// `n ≈ -(m/k)·ln(1 - z/m)` (the inverse of the fill curve).
pub fn keys_from_density(m: u64, k: u32, density: f64) -> f64 {
    if density >= 1.0 {
        return f64::INFINITY;
    }
    -(m as f64 / f64::from(k)) * (1.0 - density).ln()
}

/// Combines independent per-generation rates: a key is a false positive if
/// any generation errs, `1 - Π(1 - f_i)`.
pub fn combined_fpr(rates: impl IntoIterator<Item = f64>) -> f64 {
    1.0 - rates.into_iter().map(|f| 1.0 - f).product::<f64>()
}

/// The bytes an array of `m` timer cells of `width` bits takes (4-bit cells
/// two per byte, 8/16/32-bit cells in plain vectors, other widths bit-packed
/// in 64-bit words); `None` if it does not fit a `usize`.
pub fn cell_bytes(width: u8, m: usize) -> Option<usize> {
    match width {
        4 => Some(m.div_ceil(2)),
        8 => Some(m),
        16 => m.checked_mul(2),
        32 => m.checked_mul(4),
        w => Some(m.checked_mul(usize::from(w))?.div_ceil(64).checked_mul(8)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimal_sizing_matches_the_textbook() {
        // 1% needs 9.585 cells per key and 7 hashes.
        let (m, k) = optimal_cells_and_hashes(1_000_000, 0.01);
        assert_eq!(m, 9_585_059);
        assert_eq!(k, 7);
        let p = bloom_fpr(m as f64, f64::from(k), 1e6);
        assert!((p - 0.01).abs() < 0.0005, "{p}");
    }

    #[test]
    fn dbf_numbers_from_the_paper() {
        // Guo et al. (IEEE TKDE 2010), the worked example: f_BF(1280, 7, 133) = 0.009847.
        let p = bloom_fpr(1280.0, 7.0, 133.0);
        assert!((p - 0.009847).abs() < 2e-6, "{p}");
    }

    #[test]
    fn thresholds_agree_at_the_design_point() {
        let (m, k) = optimal_cells_and_hashes(10_000, 0.01);
        let d = density_threshold(0.01, k);
        assert!((d - 0.518).abs() < 0.001, "{d}");
        let n = cardinality_threshold(m, k, 0.01);
        assert!((n - 10_000.0).abs() / 10_000.0 < 0.06, "{n}");
        assert!((keys_from_density(m, k, d) - n).abs() < 1e-6);
    }

    #[test]
    fn horizontal_slicing_tends_to_the_unsliced_rate() {
        let whole = bloom_fpr(100_000.0, 4.0, 10_000.0);
        let sliced = horizontal_fpr(100_000.0, 4.0, 10_000.0, 8.0);
        assert!((whole - sliced).abs() / whole < 0.01);
        assert!(horizontal_fpr(100_000.0, 4.0, 10_000.0, 10_000.0) > whole);
    }

    #[test]
    fn combining_rates() {
        assert!((combined_fpr([0.01, 0.01]) - 0.0199).abs() < 1e-12);
        assert_eq!(combined_fpr([]), 0.0);
    }
}
