//! The group kernel: 16 weight rows times a few tokens, in the packed layout.
//! [`group_portable`] is the scalar specification (the function in the module
//! header of `packed`); the AVX-512 VNNI build returns its bits exactly.

use super::layout::{Format, Quants};
use super::{BLOCK, GROUP_ROWS};

/// One token's quantized activations (see `activations`).
#[derive(Clone, Copy, Debug)]
pub struct TokenActs<'a> {
    pub qa: &'a [i16],
    pub da: &'a [f32],
    pub sa: &'a [f32],
}

/// Tokens computed together by one kernel call (register tile).
pub const TOKEN_TILE: usize = 8;

/// The scale or offset stored at `at`, in the format's width.
#[inline(always)]
fn scale_at(format: Format, b: &[u8], at: usize) -> f32 {
    if format.half {
        half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
    } else {
        f32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
    }
}

/// Integer `i` of row `r` in a packed block.
#[inline(always)]
fn weight(format: Format, blk: &[u8], r: usize, i: usize) -> i32 {
    let (step, e) = (i / 2, i % 2);
    let nibble = || ((blk[32 * (step / 2) + 2 * r + e] >> (4 * (step % 2))) & 0x0F) as i32;
    match format.quants {
        Quants::Nibble => nibble(),
        Quants::Nibble5 => {
            nibble()
                | ((((blk[format.bits_at() + 4 * step + (2 * r + e) / 8] >> ((2 * r + e) % 8)) & 1)
                    as i32)
                    << 4)
        }
        Quants::Byte => blk[32 * step + 2 * r + e] as i8 as i32,
    }
}

/// `out[t][r]` for the 16 rows of `group` (`nb` blocks of `format`) and each token.
pub fn group_portable(
    format: Format,
    group: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let (bb, size) = (format.block_bytes(), format.scale_size());
    let (scales, offsets) = (format.scales_at(), format.offsets_at());
    for (acts, o) in tokens.iter().zip(out.iter_mut()) {
        for r in 0..GROUP_ROWS {
            let mut acc = 0.0f32;
            for b in 0..nb {
                let blk = &group[b * bb..(b + 1) * bb];
                let qa = &acts.qa[b * BLOCK..(b + 1) * BLOCK];
                let half = |h: usize| {
                    (16 * h..16 * h + 16)
                        .map(|i| weight(format, blk, r, i) * qa[i] as i32)
                        .sum::<i32>()
                };
                let (lo, hi) = (half(0), half(1));
                let da = acts.da[b];
                if format.split {
                    acc = acc + (lo as f32 * scale_at(format, blk, scales + size * r)) * da;
                    acc = acc
                        + (hi as f32 * scale_at(format, blk, scales + size * (GROUP_ROWS + r)))
                            * da;
                } else {
                    let mut term =
                        ((lo + hi) as f32 * scale_at(format, blk, scales + size * r)) * da;
                    if format.offset {
                        term = term + scale_at(format, blk, offsets + size * r) * acts.sa[b];
                    }
                    acc = acc + term;
                }
            }
            o[r] = acc;
        }
    }
}

/// [`group_portable`] on the fastest build this CPU runs, `tokens.len()` at most
/// [`TOKEN_TILE`].
pub fn group(
    format: Format,
    group: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    debug_assert!(tokens.len() <= TOKEN_TILE && out.len() >= tokens.len());
    debug_assert!(group.len() >= nb * format.block_bytes());
    debug_assert!(
        tokens
            .iter()
            .all(|t| t.qa.len() >= nb * BLOCK && t.da.len() >= nb && t.sa.len() >= nb)
    );
    #[cfg(target_arch = "x86_64")]
    if super::x86::available() {
        // SAFETY: features detected; lengths checked above in debug builds and
        // guaranteed by `packed_matmul` (the only caller outside tests).
        unsafe { super::x86::group(format, group, nb, tokens, out) };
        return;
    }
    group_autovec(format, group, nb, tokens, out);
}

/// The portable kernel built for the widest vector ISA this CPU has.
fn group_autovec(
    format: Format,
    g: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(
            format: Format,
            g: &[u8],
            nb: usize,
            tokens: &[TokenActs<'_>],
            out: &mut [[f32; GROUP_ROWS]],
        ) {
            group_portable(format, g, nb, tokens, out)
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the feature was detected on this CPU.
            return unsafe { avx2(format, g, nb, tokens, out) };
        }
    }
    group_portable(format, g, nb, tokens, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::kernels::test_rows::random_row;
    use crate::ops::matmul::Matrix;
    use crate::packed::{PackedMatrix, QuantizedRows};

    pub(crate) const TYPES: [DType; 8] = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];

    #[test]
    fn the_dispatched_kernel_returns_the_bits_of_the_scalar_twin() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        for t in TYPES {
            for cols in [256usize, 768] {
                if cols % t.block_len() != 0 {
                    continue;
                }
                let rows = 21;
                let bytes: Vec<u8> = (0..rows)
                    .flat_map(|r| random_row(t, cols / t.block_len(), 11 + r as u64))
                    .collect();
                let m = Matrix::new(t, rows, cols, &bytes).unwrap();
                let preferred = PackedMatrix::pack(&m, &pool).unwrap();
                let wide = PackedMatrix::pack_as(
                    &m,
                    Format {
                        half: false,
                        ..preferred.format
                    },
                    &pool,
                )
                .unwrap();
                for p in [preferred, wide] {
                    let x: Vec<f32> = crate::kernels::test_rows::random(TOKEN_TILE * cols, 5)
                        .iter()
                        .map(|&b| (b as f32 - 128.0) / 37.0)
                        .collect();
                    let mut q = QuantizedRows::default();
                    q.quantize(&x, TOKEN_TILE, cols);
                    let nb = cols / BLOCK;
                    for n in 1..=TOKEN_TILE {
                        let toks: Vec<TokenActs<'_>> = (0..n)
                            .map(|k| TokenActs {
                                qa: q.row(k),
                                da: &q.da[k * nb..(k + 1) * nb],
                                sa: &q.sa[k * nb..(k + 1) * nb],
                            })
                            .collect();
                        for g in 0..p.groups() {
                            let mut want = vec![[0.0; GROUP_ROWS]; n];
                            let mut got = vec![[0.0; GROUP_ROWS]; n];
                            group_portable(p.format, p.group(g), nb, &toks, &mut want);
                            group(p.format, p.group(g), nb, &toks, &mut got);
                            let same = want
                                .iter()
                                .flatten()
                                .zip(got.iter().flatten())
                                .all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(
                                same,
                                "{t} cols {cols} tokens {n} group {g}: {want:?} vs {got:?}"
                            );
                            let mut auto = vec![[0.0; GROUP_ROWS]; n];
                            group_autovec(p.format, p.group(g), nb, &toks, &mut auto);
                            assert!(
                                want.iter()
                                    .flatten()
                                    .zip(auto.iter().flatten())
                                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                                "{t} autovec"
                            );
                        }
                    }
                }
            }
        }
    }
}
