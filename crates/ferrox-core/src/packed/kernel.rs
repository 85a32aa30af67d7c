//! The group kernel: 16 weight rows times a few tokens, in the packed layout.
//! [`group_portable`] is the scalar specification (the function in the module
//! header of `packed`); the AVX-512 VNNI and AVX2 builds return its bits exactly,
//! and [`group`] picks the fastest this CPU runs.

use super::layout::{Format, Quants, Scales};
use super::{BLOCK, GROUP_ROWS};

/// One token's quantized activations (see `activations`).
#[derive(Clone, Copy, Debug)]
pub struct TokenActs<'a> {
    pub qa: &'a [i16],
    pub da: &'a [f32],
    pub sa: &'a [f32],
    /// Half-block sums, two per block.
    pub sh: &'a [f32],
    /// Exact integer half-block sums, two per block.
    pub hs: &'a [i32],
}

/// Tokens computed together by one kernel call: a group's weights are unpacked
/// once per call. 32: on an Emerald Rapids, one thread, a 4096 x 4096 product
/// of 64 tokens ran 3-5 % faster than with 16 on the AVX-512 build and 1-3 %
/// on the AVX2 build (which had measured 16 against 8 on a Zen 3).
pub const TOKEN_TILE: usize = 32;

/// Tokens per call of the NEON build (its register tile); a call of more runs
/// them in turn.
#[cfg(target_arch = "aarch64")]
pub(crate) const REGISTER_TILE: usize = 8;

/// The half stored at `at`.
#[inline(always)]
fn half_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// The scale or offset stored at `at`, in the format's width (for
/// [`Scales::Small`], its multiplier times `base`).
#[inline(always)]
fn scale_at(format: Format, b: &[u8], at: usize, base: f32) -> f32 {
    match format.scales {
        Scales::F32 => f32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")),
        Scales::Half => half_at(b, at),
        Scales::Small => base * b[at] as i8 as f32,
    }
}

/// The 32 integers of step `p` of a block: values `2p`, `2p + 1` of rows 0..16.
#[inline(always)]
fn step(format: Format, blk: &[u8], p: usize) -> [i16; 32] {
    let mut w = [0i16; 32];
    match format.quants {
        Quants::Grid(grid) => {
            let bytes = &blk[32 * (p / 2)..32 * (p / 2) + 32];
            for (v, &b) in w.iter_mut().zip(bytes) {
                *v = grid.values()[((b >> (4 * (p % 2))) & 0x0F) as usize] as i16;
            }
        }
        Quants::Nibble | Quants::Nibble5 | Quants::Nibble6 => {
            let bytes = &blk[32 * (p / 2)..32 * (p / 2) + 32];
            let shift = 4 * (p % 2);
            for (v, &b) in w.iter_mut().zip(bytes) {
                *v = ((b >> shift) & 0x0F) as i16;
            }
            if format.quants == Quants::Nibble5 {
                let bits = plane_word(format, blk, p);
                for (i, v) in w.iter_mut().enumerate() {
                    *v |= (((bits >> i) & 1) << 4) as i16;
                }
            }
            if format.quants == Quants::Nibble6 {
                let line = &blk[format.bits_at() + 32 * (p / 4)..][..32];
                for (v, &b) in w.iter_mut().zip(line) {
                    *v = (*v | ((((b >> (2 * (p % 4))) & 3) as i16) << 4)) - 32;
                }
            }
        }
        Quants::Byte => {
            for (v, &b) in w.iter_mut().zip(&blk[32 * p..32 * p + 32]) {
                *v = b as i8 as i16;
            }
        }
        Quants::Crumb | Quants::Crumb3 => {
            let shift = 2 * (p % 4);
            for (v, &b) in w.iter_mut().zip(&blk[32 * (p / 4)..32 * (p / 4) + 32]) {
                *v = ((b >> shift) & 3) as i16;
            }
            if format.quants == Quants::Crumb3 {
                let bits = plane_word(format, blk, p);
                for (i, v) in w.iter_mut().enumerate() {
                    *v -= (((bits >> i) & 1) << 2) as i16;
                }
            }
        }
    }
    w
}

/// Step `p`'s word of a block's one-bit plane (bit `i`: value `i % 2` of row
/// `i / 2`).
#[inline(always)]
fn plane_word(format: Format, blk: &[u8], p: usize) -> u32 {
    let at = format.bits_at() + 4 * p;
    u32::from_le_bytes(blk[at..at + 4].try_into().expect("4 bytes"))
}

/// 16 scales or offsets stored from `at` (multipliers of `base` for
/// [`Scales::Small`]).
#[inline(always)]
fn sixteen(format: Format, blk: &[u8], at: usize, base: &[f32; GROUP_ROWS]) -> [f32; GROUP_ROWS] {
    std::array::from_fn(|r| scale_at(format, blk, at + format.scale_size() * r, base[r]))
}

/// The 16 scale bases and 16 offset bases of block `b`'s super-block in a group
/// (ones for the formats without bases: unused).
#[inline(always)]
fn bases(format: Format, group: &[u8], b: usize) -> [[f32; GROUP_ROWS]; 2] {
    if format.scales != Scales::Small {
        return [[1.0; GROUP_ROWS]; 2];
    }
    let at = format.bases_at(b);
    let offsets = if format.offset { 2 * GROUP_ROWS } else { 0 };
    [
        std::array::from_fn(|r| half_at(group, at + 2 * r)),
        std::array::from_fn(|r| half_at(group, at + offsets + 2 * r)),
    ]
}

/// `out[t][r]` for the 16 rows of `group` (`nb` blocks of `format`) and each token:
/// the specification of the packed product (module header of `packed`), written
/// as the SIMD builds compute it (step by step, one lane per row) so that
/// compilers vectorize it where no hand-written build exists.
pub fn group_portable(
    format: Format,
    group: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let bb = format.block_bytes();
    for o in out.iter_mut().take(tokens.len()) {
        *o = [0.0; GROUP_ROWS];
    }
    for b in 0..nb {
        let blk = &group[format.block_at(b)..][..bb];
        let steps: [[i16; 32]; 16] = std::array::from_fn(|p| step(format, blk, p));
        let [sbase, obase] = bases(format, group, b);
        let half = format.scale_size() * GROUP_ROWS;
        let scale0 = sixteen(format, blk, format.scales_at(), &sbase);
        let scale1 = if format.split {
            sixteen(format, blk, format.scales_at() + half, &sbase)
        } else {
            scale0
        };
        let offset0 = if format.offset {
            sixteen(format, blk, format.offsets_at(), &obase)
        } else {
            [0.0; GROUP_ROWS]
        };
        let offset1 = if format.offset && format.split {
            sixteen(format, blk, format.offsets_at() + half, &obase)
        } else {
            offset0
        };
        for (acts, acc) in tokens.iter().zip(out.iter_mut()) {
            let qa = &acts.qa[b * BLOCK..(b + 1) * BLOCK];
            // Values 0..16 (steps 0..8) and 16..32 (steps 8..16), exact in i32.
            let mut halves = [[0i32; GROUP_ROWS]; 2];
            for (p, wp) in steps.iter().enumerate() {
                let (a0, a1) = (qa[2 * p] as i32, qa[2 * p + 1] as i32);
                for (r, s) in halves[p / 8].iter_mut().enumerate() {
                    *s += wp[2 * r] as i32 * a0 + wp[2 * r + 1] as i32 * a1;
                }
            }
            let [lo, hi] = halves;
            let (da, sa) = (acts.da[b], acts.sa[b]);
            for r in 0..GROUP_ROWS {
                if format.split {
                    acc[r] = (lo[r] as f32 * scale0[r]).mul_add(da, acc[r]);
                    if format.offset {
                        acc[r] = offset0[r].mul_add(acts.sh[2 * b], acc[r]);
                    }
                    acc[r] = (hi[r] as f32 * scale1[r]).mul_add(da, acc[r]);
                    if format.offset {
                        acc[r] = offset1[r].mul_add(acts.sh[2 * b + 1], acc[r]);
                    }
                } else {
                    acc[r] = ((lo[r] + hi[r]) as f32 * scale0[r]).mul_add(da, acc[r]);
                    if format.offset {
                        acc[r] = offset0[r].mul_add(sa, acc[r]);
                    }
                }
            }
        }
    }
}

/// [`group_portable`] on the build of the process's kernel level
/// ([`crate::isa::active`]), `tokens.len()` at most [`TOKEN_TILE`].
///
/// # Panics
/// If `group` holds fewer than `nb` blocks, a token fewer than `nb` blocks of
/// activations, `out` fewer rows than there are tokens, or there are more than
/// [`TOKEN_TILE`] tokens: the SIMD builds read through raw pointers, so every
/// length is checked here, in every build.
pub fn group(
    format: Format,
    group: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    run(crate::isa::active(), format, group, nb, tokens, out);
}

/// [`group`] on the build of `level` (panics if this CPU cannot run it).
pub fn group_at(
    level: crate::isa::Level,
    format: Format,
    group: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    level.assert_runs_here();
    run(level, format, group, nb, tokens, out);
}

/// Checks the lengths the builds rely on, then runs `level`'s build (which this
/// CPU runs: the active level, or one asserted).
fn run(
    level: crate::isa::Level,
    format: Format,
    group: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    assert!(
        tokens.len() <= TOKEN_TILE && out.len() >= tokens.len(),
        "{} tokens, {} output rows, at most {TOKEN_TILE}",
        tokens.len(),
        out.len()
    );
    assert!(
        nb.checked_mul(format.block_bytes())
            .is_some_and(|_| group.len() >= format.group_bytes(nb))
            && (format.scales != Scales::Small
                || nb.is_multiple_of(super::layout::SUPER_BLOCK / BLOCK)),
        "the group holds {nb} blocks (and whole super-blocks' bases)"
    );
    assert!(
        tokens
            .iter()
            .all(|t| nb.checked_mul(BLOCK).is_some_and(|n| t.qa.len() >= n)
                && t.da.len() >= nb
                && t.sa.len() >= nb
                && t.hs.len() >= 2 * nb
                && (!format.needs_half_sums() || t.sh.len() >= 2 * nb)),
        "every token holds {nb} blocks of activations, their integer half sums (and their scaled half sums for split offsets)"
    );
    #[cfg(target_arch = "x86_64")]
    if level.has_vnni() {
        // SAFETY: the level runs here (the callers' contract); lengths checked above.
        unsafe { super::x86::group(format, group, nb, tokens, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if level.has_avx_vnni() {
        // SAFETY: as above.
        unsafe { super::x86::group_avx2::<true>(format, group, nb, tokens, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if level.has_avx2() {
        // SAFETY: as above.
        unsafe { super::x86::group_avx2::<false>(format, group, nb, tokens, out) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if level.has_neon() {
        for (tokens, out) in tokens
            .chunks(REGISTER_TILE)
            .zip(out.chunks_mut(REGISTER_TILE))
        {
            // SAFETY: as above.
            unsafe { super::neon::group(format, group, nb, tokens, out) };
        }
        return;
    }
    group_autovec::run(level, format, group, nb, tokens, out);
}

dispatched!(
    /// The portable kernel built for the widest vector ISA this CPU has.
    fn group_autovec / group_autovec_at = group_portable(format: Format, g: &[u8], nb: usize, tokens: &[TokenActs<'_>], out: &mut [[f32; GROUP_ROWS]]) -> ()
);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::kernels::test_rows::random_row;
    use crate::ops::matmul::Matrix;
    use crate::packed::{PackedMatrix, QuantizedRows};

    /// Every type with a packed format.
    pub(crate) const TYPES: [DType; 13] = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
        DType::MXFP4,
    ];

    /// Every level's build: lengths are checked before any SIMD read, in every
    /// build profile (a release build included), so a short slice panics.
    #[test]
    fn the_kernel_refuses_short_inputs_at_every_level() {
        let format = Format::for_dtype(DType::Q8_0).unwrap();
        let g = vec![0u8; 2 * format.block_bytes()];
        let (qa, d, hs) = (vec![0i16; 2 * BLOCK], vec![0.0f32; 4], vec![0i32; 4]);
        let tok = TokenActs {
            qa: &qa,
            da: &d[..2],
            sa: &d[..2],
            sh: &d,
            hs: &hs,
        };
        for level in crate::isa::Level::supported() {
            for (nb, tokens, rows) in [(3, 1, 1), (2, 1, 0), (2, TOKEN_TILE + 1, TOKEN_TILE + 1)] {
                let toks = vec![tok; tokens];
                let mut out = vec![[0.0; GROUP_ROWS]; rows];
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    group_at(level, format, &g, nb, &toks, &mut out)
                }));
                assert!(r.is_err(), "{level:?} nb {nb} tokens {tokens} rows {rows}");
            }
            let mut out = vec![[0.0; GROUP_ROWS]; 1];
            group_at(level, format, &g, 2, &[tok], &mut out);
        }
    }

    /// Every build this CPU runs, not only the active one (SPEC S3's bits).
    #[test]
    fn every_build_returns_the_bits_of_the_scalar_twin() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        // Under Miri (portable builds only) a smaller sweep: every type, one
        // width, 1, 3 and 8 tokens.
        let widths: &[usize] = if cfg!(miri) { &[256] } else { &[256, 768] };
        for t in TYPES {
            for &cols in widths {
                if cols % t.block_len() != 0 {
                    continue;
                }
                let rows = if cfg!(miri) { 16 } else { 21 };
                let bytes: Vec<u8> = (0..rows)
                    .flat_map(|r| random_row(t, cols / t.block_len(), 11 + r as u64))
                    .collect();
                let m = Matrix::new(t, rows, cols, &bytes).unwrap();
                let preferred = PackedMatrix::pack(&m, &pool).unwrap();
                // Half scales fall back to f32 ones where a half cannot hold one.
                let wide = (preferred.format.scales == Scales::Half).then(|| {
                    PackedMatrix::pack_as(
                        &m,
                        Format {
                            scales: Scales::F32,
                            ..preferred.format
                        },
                        &pool,
                        None,
                    )
                    .unwrap()
                });
                for p in std::iter::once(preferred).chain(wide) {
                    let x: Vec<f32> = crate::kernels::test_rows::random(TOKEN_TILE * cols, 5)
                        .iter()
                        .map(|&b| (b as f32 - 128.0) / 37.0)
                        .collect();
                    let mut q = QuantizedRows::default();
                    q.quantize(&x, TOKEN_TILE, cols);
                    q.add_half_sums();
                    let nb = cols / BLOCK;
                    for n in (1..=TOKEN_TILE).filter(|n| !cfg!(miri) || [1, 3, 9].contains(n)) {
                        let toks: Vec<TokenActs<'_>> = (0..n).map(|k| q.token(k)).collect();
                        for g in 0..p.groups() {
                            let mut want = vec![[0.0; GROUP_ROWS]; n];
                            group_portable(p.format, p.group(g), nb, &toks, &mut want);
                            for level in crate::isa::Level::supported() {
                                let mut got = vec![[0.0; GROUP_ROWS]; n];
                                group_at(level, p.format, p.group(g), nb, &toks, &mut got);
                                let mut auto = vec![[0.0; GROUP_ROWS]; n];
                                group_autovec_at(level, p.format, p.group(g), nb, &toks, &mut auto);
                                for (build, out) in [("hand-written", &got), ("autovec", &auto)] {
                                    let same = want
                                        .iter()
                                        .flatten()
                                        .zip(out.iter().flatten())
                                        .all(|(a, b)| a.to_bits() == b.to_bits());
                                    assert!(
                                        same,
                                        "{t} cols {cols} tokens {n} group {g} {level:?} {build}: {want:?} vs {out:?}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
