//! Round-to-nearest quantizers for the K family (Q2_K .. Q6_K): every value to the
//! nearest level of scales chosen from its group's range. Simpler than llama.cpp's
//! searched scales (so a little less accurate), but a valid encoding of each type,
//! deterministic, and the inverse of the layouts `kquants` decodes. Used to make
//! test models; ferrox never quantizes weights at run time.

use crate::blocks::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, K_SCALE_SIZE};
use crate::dtype::QK_K;

fn f16_bytes(v: f32) -> ([u8; 2], f32) {
    let h = half::f16::from_f32(v);
    (h.to_bits().to_le_bytes(), h.to_f32())
}

/// `round(v / step)` clamped to `lo..=hi`, 0 for a zero step.
fn level(v: f32, step: f32, lo: i32, hi: i32) -> i32 {
    if step == 0.0 {
        return 0;
    }
    ((v / step).round() as i32).clamp(lo, hi)
}

/// Unsigned levels `0..=top` with a scale and a min per group of `group` values:
/// (`d`, `dmin`, per group (scale index, min index), per value level). Scale and
/// min indices run `0..=smax`.
struct Affine {
    d: [u8; 2],
    dmin: [u8; 2],
    groups: Vec<(u8, u8)>,
    q: Vec<u8>,
}

fn affine(x: &[f32], group: usize, top: i32, smax: i32) -> Affine {
    let ranges: Vec<(f32, f32)> = x
        .chunks_exact(group)
        .map(|g| {
            let min = g.iter().fold(0.0f32, |m, &v| m.min(v));
            let max = g.iter().fold(0.0f32, |m, &v| m.max(v));
            ((max - min) / top as f32, -min)
        })
        .collect();
    let smax_f = smax as f32;
    let (d, d_f) = f16_bytes(ranges.iter().fold(0.0f32, |m, r| m.max(r.0)) / smax_f);
    let (dmin, dmin_f) = f16_bytes(ranges.iter().fold(0.0f32, |m, r| m.max(r.1)) / smax_f);
    let mut groups = Vec::with_capacity(ranges.len());
    let mut q = Vec::with_capacity(x.len());
    for (g, &(scale, min)) in x.chunks_exact(group).zip(&ranges) {
        let sc = level(scale, d_f, 0, smax);
        let m = level(min, dmin_f, 0, smax);
        let (step, offset) = (d_f * sc as f32, dmin_f * m as f32);
        q.extend(g.iter().map(|&v| level(v + offset, step, 0, top) as u8));
        groups.push((sc as u8, m as u8));
    }
    Affine { d, dmin, groups, q }
}

/// Signed levels `-half..half` with a signed scale per group of `group` values:
/// (`d`, per group scale index in `-smax..=smax`, per value level).
fn symmetric(x: &[f32], group: usize, half_levels: i32, smax: i32) -> ([u8; 2], Vec<i8>, Vec<i8>) {
    let scales: Vec<f32> = x
        .chunks_exact(group)
        .map(|g| g.iter().fold(0.0f32, |m, &v| m.max(v.abs())) / half_levels as f32)
        .collect();
    let (d, d_f) = f16_bytes(scales.iter().fold(0.0f32, |m, &s| m.max(s)) / smax as f32);
    let mut sc = Vec::with_capacity(scales.len());
    let mut q = Vec::with_capacity(x.len());
    for (g, &s) in x.chunks_exact(group).zip(&scales) {
        let i = level(s, d_f, -smax, smax);
        let step = d_f * i as f32;
        q.extend(
            g.iter()
                .map(|&v| level(v, step, -half_levels, half_levels - 1) as i8),
        );
        sc.push(i as i8);
    }
    (d, sc, q)
}

/// Packs 8 six-bit scales and mins as `kquants::scale_min_k4` reads them.
fn pack_scale_min_k4(groups: &[(u8, u8)]) -> [u8; K_SCALE_SIZE] {
    let mut s = [0u8; K_SCALE_SIZE];
    for (j, &(sc, m)) in groups.iter().enumerate() {
        if j < 4 {
            s[j] |= sc & 63;
            s[j + 4] |= m & 63;
        } else {
            s[j + 4] = (sc & 0x0F) | ((m & 0x0F) << 4);
            s[j - 4] |= (sc >> 4) << 6;
            s[j] |= (m >> 4) << 6;
        }
    }
    s
}

/// Quantizes `x` (whole blocks of 256) to Q4_K.
pub fn quantize_q4_k(x: &[f32]) -> Vec<BlockQ4K> {
    x.chunks_exact(QK_K)
        .map(|xb| {
            let a = affine(xb, 32, 15, 63);
            let mut qs = [0u8; QK_K / 2];
            for (i, &q) in a.q.iter().enumerate() {
                let (g, l) = (i / 32, i % 32);
                qs[32 * (g / 2) + l] |= q << (4 * (g % 2));
            }
            BlockQ4K {
                d: a.d,
                dmin: a.dmin,
                scales: pack_scale_min_k4(&a.groups),
                qs,
            }
        })
        .collect()
}

/// Quantizes `x` (whole blocks of 256) to Q5_K.
pub fn quantize_q5_k(x: &[f32]) -> Vec<BlockQ5K> {
    x.chunks_exact(QK_K)
        .map(|xb| {
            let a = affine(xb, 32, 31, 63);
            let (mut qs, mut qh) = ([0u8; QK_K / 2], [0u8; QK_K / 8]);
            for (i, &q) in a.q.iter().enumerate() {
                let (g, l) = (i / 32, i % 32);
                qs[32 * (g / 2) + l] |= (q & 0x0F) << (4 * (g % 2));
                qh[l] |= (q >> 4) << g;
            }
            BlockQ5K {
                d: a.d,
                dmin: a.dmin,
                scales: pack_scale_min_k4(&a.groups),
                qh,
                qs,
            }
        })
        .collect()
}

/// Quantizes `x` (whole blocks of 256) to Q2_K.
pub fn quantize_q2_k(x: &[f32]) -> Vec<BlockQ2K> {
    x.chunks_exact(QK_K)
        .map(|xb| {
            let a = affine(xb, 16, 3, 15);
            let mut qs = [0u8; QK_K / 4];
            for (i, &q) in a.q.iter().enumerate() {
                let (g, l) = (i / 16, i % 16);
                let (h, p, off) = (g / 8, (g % 8) / 2, 16 * (g % 2));
                qs[32 * h + off + l] |= q << (2 * p);
            }
            let mut scales = [0u8; QK_K / 16];
            for (s, &(sc, m)) in scales.iter_mut().zip(&a.groups) {
                *s = sc | (m << 4);
            }
            BlockQ2K {
                scales,
                qs,
                d: a.d,
                dmin: a.dmin,
            }
        })
        .collect()
}

/// Quantizes `x` (whole blocks of 256) to Q3_K.
pub fn quantize_q3_k(x: &[f32]) -> Vec<BlockQ3K> {
    x.chunks_exact(QK_K)
        .map(|xb| {
            let (d, sc, q) = symmetric(xb, 16, 4, 31);
            let (mut qs, mut hmask) = ([0u8; QK_K / 4], [0u8; QK_K / 8]);
            for (i, &v) in q.iter().enumerate() {
                let (g, l) = (i / 16, i % 16);
                let (h, p, off) = (g / 8, (g % 8) / 2, 16 * (g % 2));
                let u = (v + 4) as u8;
                qs[32 * h + off + l] |= (u & 3) << (2 * p);
                hmask[off + l] |= (u >> 2) << (4 * h + p);
            }
            let mut scales = [0u8; K_SCALE_SIZE];
            for (i, &s) in sc.iter().enumerate() {
                let u = (s as i32 + 32) as u8;
                scales[i % 8] |= (u & 0x0F) << (4 * (i / 8));
                scales[8 + i % 4] |= (u >> 4) << (2 * (i / 4));
            }
            BlockQ3K {
                hmask,
                qs,
                scales,
                d,
            }
        })
        .collect()
}

/// Quantizes `x` (whole blocks of 256) to Q6_K.
pub fn quantize_q6_k(x: &[f32]) -> Vec<BlockQ6K> {
    x.chunks_exact(QK_K)
        .map(|xb| {
            let (d, scales, q) = symmetric(xb, 16, 32, 127);
            let (mut ql, mut qh) = ([0u8; QK_K / 2], [0u8; QK_K / 4]);
            for (i, &v) in q.iter().enumerate() {
                let u = (v as i32 + 32) as u8;
                let (h, r) = (i / 128, i % 128);
                let (k, l) = (r / 32, r % 32);
                ql[64 * h + 32 * (k % 2) + l] |= (u & 0x0F) << (4 * (k / 2));
                qh[32 * h + l] |= (u >> 4) << (2 * k);
            }
            BlockQ6K {
                ql,
                qh,
                scales: scales.try_into().expect("16 groups"),
                d,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::kernels::reference::{dequantize, quantize};

    /// Each type decodes back to within about one level of its group's scale, so
    /// the layouts written are the ones `kquants` reads.
    #[test]
    fn every_k_type_round_trips_within_its_levels() {
        let x: Vec<f32> = (0..1024)
            .map(|i| {
                (((i * 7919) % 2003) as f32 / 1000.0 - 1.0) * if i % 97 == 0 { 3.0 } else { 1.0 }
            })
            .collect();
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (t, levels) in [
            (DType::Q2_K, 3.0),
            (DType::Q3_K, 4.0),
            (DType::Q4_K, 15.0),
            (DType::Q5_K, 31.0),
            (DType::Q6_K, 32.0),
        ] {
            let bytes = quantize(t, &x).unwrap();
            assert_eq!(bytes.len(), t.row_bytes(x.len()).unwrap());
            let mut y = vec![0.0; x.len()];
            dequantize(t, &bytes, &mut y).unwrap();
            let worst = x
                .iter()
                .zip(&y)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            // Scales are themselves quantized: allow two levels of the widest range.
            assert!(worst <= 2.0 * 2.0 * amax / levels, "{t}: error {worst}");
            let mean = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).sum::<f32>() / x.len() as f32;
            assert!(mean <= amax / levels, "{t}: mean error {mean}");
        }
    }
}
