//! AVX-512 VNNI and AVX2 builds of the group kernel
//! (`packed::kernel::group_portable`).
//!
//! Invariants: one 32-bit lane per weight row (AVX2: two registers of 8 rows). A
//! block's integer dot product is accumulated by `vpdpwssd` (AVX2: `vpmaddwd` +
//! `vpaddd`) over independent registers (integer sums are exact, so their order
//! is free) and then enters the f32 lanes with exactly the scalar twin's
//! operations in its order: convert, times scale, times `da`, plus `offset * sa`,
//! added to the lane's running sum. No FMA.
//!
//! The steps of a block are unpacked once and serve every token of a call: in
//! registers on AVX-512 (`REGISTER_TILE` tokens); on AVX2 (up to `TOKEN_TILE`
//! tokens), into a 1 KiB buffer read by register tiles of 4 tokens times 16 rows (8 integer sums; a tile of 8 tokens spilled
//! its sums to the stack on every multiply-add, and the tile kernel made the
//! Llama-3.2-1B prefill 1.25x faster on a Zen 3). A decode step's one token has
//! its own build that unpacks each step where it is used. Each build is
//! instantiated per packed format (`by_format!`).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::kernel::{TOKEN_TILE, TokenActs};
use super::layout::{Format, Grid, Quants, Scales};
use super::{BLOCK, GROUP_ROWS};

/// # Safety
/// The CPU must run [`crate::isa::Level::Avx512Vnni`]; `g` holds `nb` blocks of `format`; every token holds
/// `nb` blocks; `out` has a row per token; at most `REGISTER_TILE` (8) tokens.
pub unsafe fn group(
    format: Format,
    g: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    assert!(
        !format.needs_half_sums(),
        "split offsets run on the AVX2 build"
    );
    macro_rules! by_tokens {
        ($q:expr, $off:literal, $split:literal, $s:expr) => {
            // SAFETY: the caller's contract.
            unsafe {
                match tokens.len() {
                    1 => kernel::<1, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    2 => kernel::<2, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    3 => kernel::<3, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    4 => kernel::<4, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    5 => kernel::<5, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    6 => kernel::<6, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    7 => kernel::<7, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    8 => kernel::<8, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    n => panic!("{n} tokens in one group call"),
                }
            }
        };
    }
    by_format!(format, by_tokens)
}

/// Expands `$run!(Q, OFFSET, SPLIT, SCALES)` for the packed format `$format`
/// (the formats `Format::for_dtype` gives, and f32 scales for those with halves).
macro_rules! by_format {
    ($format:expr, $run:ident) => {
        match (
            $format.quants,
            $format.offset,
            $format.split,
            $format.scales,
        ) {
            (Quants::Nibble, true, false, Scales::Half) => $run!(NIBBLE, true, false, HALF),
            (Quants::Nibble, true, false, Scales::F32) => $run!(NIBBLE, true, false, F32),
            (Quants::Nibble, true, false, Scales::Small) => $run!(NIBBLE, true, false, SMALL),
            (Quants::Nibble, true, true, Scales::Small) => $run!(NIBBLE, true, true, SMALL),
            (Quants::Nibble5, true, false, Scales::Half) => $run!(NIBBLE5, true, false, HALF),
            (Quants::Nibble5, true, false, Scales::F32) => $run!(NIBBLE5, true, false, F32),
            (Quants::Nibble5, true, false, Scales::Small) => $run!(NIBBLE5, true, false, SMALL),
            (Quants::Nibble6, false, true, Scales::Small) => $run!(NIBBLE6, false, true, SMALL),
            (Quants::Byte, false, false, Scales::Half) => $run!(BYTE, false, false, HALF),
            (Quants::Byte, false, false, Scales::F32) => $run!(BYTE, false, false, F32),
            (Quants::Byte, false, false, Scales::Small) => $run!(BYTE, false, false, SMALL),
            (Quants::Byte, false, true, Scales::Small) => $run!(BYTE, false, true, SMALL),
            (Quants::Grid(Grid::Iq4), false, false, Scales::Half) => $run!(IQ4, false, false, HALF),
            (Quants::Grid(Grid::Iq4), false, false, Scales::F32) => $run!(IQ4, false, false, F32),
            (Quants::Grid(Grid::Iq4), false, false, Scales::Small) => {
                $run!(IQ4, false, false, SMALL)
            }
            (Quants::Grid(Grid::Mxfp4), false, false, Scales::Half) => {
                $run!(MXFP4, false, false, HALF)
            }
            (Quants::Grid(Grid::Mxfp4), false, false, Scales::F32) => {
                $run!(MXFP4, false, false, F32)
            }
            other => panic!("no packed kernel for {other:?}"),
        }
    };
}
use by_format;

const NIBBLE: u8 = 0;
const NIBBLE5: u8 = 1;
const BYTE: u8 = 2;
const NIBBLE6: u8 = 3;
const IQ4: u8 = 4;
const MXFP4: u8 = 5;

const F32: u8 = 0;
const HALF: u8 = 1;
const SMALL: u8 = 2;

/// The format a kernel instance is compiled for.
const fn format_of(q: u8, offset: bool, split: bool, s: u8) -> Format {
    let quants = match q {
        NIBBLE => Quants::Nibble,
        NIBBLE5 => Quants::Nibble5,
        NIBBLE6 => Quants::Nibble6,
        IQ4 => Quants::Grid(Grid::Iq4),
        MXFP4 => Quants::Grid(Grid::Mxfp4),
        _ => Quants::Byte,
    };
    let scales = match s {
        F32 => Scales::F32,
        HALF => Scales::Half,
        _ => Scales::Small,
    };
    Format {
        quants,
        offset,
        split,
        scales,
    }
}

/// Weights stream from DRAM once per step (decode is bound by it): asks for the
/// lines of the `bb` bytes 32 KiB past `blk` into L2 (measured: +40 % bytes/s
/// over the hardware prefetcher alone at 16 KiB on Zen 4's Q8_0; 32 KiB gave
/// +3 % on the AVX2 build's Llama-3.2-1B decode on a Sapphire Rapids, the same
/// on its AVX-512 build). A hint; past the end it reads nothing.
#[inline(always)]
fn prefetch_ahead(blk: *const u8, bb: usize) {
    let ahead = blk.wrapping_add(PREFETCH_BYTES);
    let mut line = 0;
    while line < bb {
        // SAFETY: a prefetch never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(line).cast()) };
        line += 64;
    }
}

/// 16 scales (or offsets) at `p`: f32, halves, or multipliers of `base`.
#[inline(always)]
unsafe fn scales16<const S: u8>(p: *const u8, base: __m512) -> __m512 {
    // SAFETY: 16, 32 or 64 bytes at `p` (caller).
    unsafe {
        match S {
            HALF => _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
            F32 => _mm512_loadu_ps(p.cast()),
            _ => _mm512_mul_ps(
                base,
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast()))),
            ),
        }
    }
}

/// 16 halves at `p` (a super-block's bases), or ones for the formats without.
#[inline(always)]
unsafe fn bases16<const S: u8>(p: *const u8) -> __m512 {
    // SAFETY: 32 bytes at `p` when the format has bases (caller).
    unsafe {
        if S == SMALL {
            _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
        } else {
            _mm512_set1_ps(1.0)
        }
    }
}

/// The 16 values of `format`'s grid in both 128-bit lanes (a `vpshufb` table).
///
/// # Safety
/// The CPU runs AVX2 (both builds' callers do).
#[inline(always)]
unsafe fn grid_table(format: Format) -> __m256i {
    let Quants::Grid(grid) = format.quants else {
        unreachable!("a grid format")
    };
    // SAFETY: 16 bytes read from a 16-byte array; AVX2 (the caller).
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(grid.values().as_ptr().cast())) }
}

/// How far ahead of the block being multiplied its successors are prefetched.
const PREFETCH_BYTES: usize = 32768;

/// Whether a kernel of `format` prefetches ([`prefetch_ahead`]). Not the
/// formats whose super-blocks carry offset bases (Q4_K, Q5_K, Q2_K): on a Zen 4
/// the hint made their one-token products slower, the hardware prefetcher
/// alone faster (`examples/decode_stream`, a 65536 x 4096 product streaming
/// from DRAM, medians of five: Q4_K on one thread 11.9 -> 19.8 GB/s, on two
/// 20.4 -> 23.6-30.4; Q5_K 11.2 -> 17.6 on one), while Q4_0, Q4_1, Q5_0,
/// IQ4_NL and MXFP4 lost 10-25 % without it, and Q6_K and Q8_0 were even on
/// two threads (Q6_K 20.3 -> 16.9 on one, Q8_0 19.4 -> 25.1).
const fn prefetches(format: Format) -> bool {
    !(matches!(format.scales, Scales::Small) && format.offset)
}

#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn dp(acc: __m512i, w: __m512i, pair: *const i16) -> __m512i {
    // LLVM rewrites the intrinsic into `vpmaddwd` + `vpaddd` (two instructions, and
    // no broadcast operand); the instruction itself is one, with the pair of
    // activations broadcast from memory.
    let mut acc = acc;
    // SAFETY: `pair` points at two i16 inside the token's row (caller); the
    // instruction reads 4 bytes there and touches nothing else.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {w}, dword ptr [{p}]{{1to16}}",
            acc = inout(zmm_reg) acc,
            w = in(zmm_reg) w,
            p = in(reg) pair,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
}

/// The 16 steps of a [`Quants::Nibble6`] block at `blk` (its high-bit plane at
/// `bits_at`) as 16-bit values `v - 32`. Formed in the 8-bit domain, four
/// steps a time: nibble lines `2h` and `2h + 1` in one register with high-bit
/// line `h` in both halves (steps `4h + k` take its bits `2k`, moved to bits 4
/// and 5 by a per-half shift), then widened. (In the 16-bit domain every step
/// took its own shift, mask, or and subtraction: Q6_K ran at a third of
/// Q4_K's rate on one token.)
///
/// # Safety
/// AVX-512 BW runs; `blk` holds a whole Nibble6 block.
#[inline(always)]
unsafe fn nibble6_steps(blk: *const u8, bits_at: usize, w: &mut [__m512i; 16]) {
    // SAFETY: lines 0..8 of the nibbles and 0..4 of the high bits lie in the
    // block (the layout; caller).
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let (high, bias) = (_mm512_set1_epi8(0x30), _mm512_set1_epi8(32));
        // Per 16-bit lane: the lower half (steps 4h, 4h + 1) shifts left by 4,
        // the upper (4h + 2, 4h + 3) by 0.
        let shift = _mm512_inserti64x4::<1>(_mm512_set1_epi16(4), _mm256_setzero_si256());
        for h in 0..4 {
            let raw = _mm512_loadu_si512(blk.add(64 * h).cast());
            let hb = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(bits_at + 32 * h).cast()));
            let lo = _mm512_and_si512(raw, low);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(raw), low);
            // Bits 2k of step 4h + k to bits 4, 5: k = 0, 2 by << 4, << 0; k = 1,
            // 3 by >> 2 then << 4, << 0.
            let hb_lo = _mm512_sllv_epi16(hb, shift);
            let hb_hi = _mm512_sllv_epi16(_mm512_srli_epi16::<2>(hb), shift);
            // a | (b & c)
            let v_lo = _mm512_ternarylogic_epi32::<0xF8>(lo, hb_lo, high);
            let v_hi = _mm512_ternarylogic_epi32::<0xF8>(hi, hb_hi, high);
            let (v_lo, v_hi) = (_mm512_sub_epi8(v_lo, bias), _mm512_sub_epi8(v_hi, bias));
            w[4 * h] = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(v_lo));
            w[4 * h + 1] = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(v_hi));
            w[4 * h + 2] = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64::<1>(v_lo));
            w[4 * h + 3] = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64::<1>(v_hi));
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn kernel<const T: usize, const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
    g: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let format = format_of(Q, OFF, SPLIT, S);
    let (bb, size, scales_at, offsets_at) = (
        format.block_bytes(),
        format.scale_size(),
        format.scales_at(),
        format.offsets_at(),
    );
    let mut acc = [_mm512_setzero_ps(); T];
    let qa: [*const i16; T] = std::array::from_fn(|t| tokens[t].qa.as_ptr());
    let da: [*const f32; T] = std::array::from_fn(|t| tokens[t].da.as_ptr());
    let sa: [*const f32; T] = std::array::from_fn(|t| tokens[t].sa.as_ptr());
    // SAFETY: (the whole body) block b lies at g[format.block_at(b)..] and token values at
    // qa[32 b..32 b + 32], both in bounds for b < nb (the caller's contract).
    unsafe {
        let low = _mm512_set1_epi16(0x0F);
        let sixteen = _mm512_set1_epi16(16);
        for b in 0..nb {
            let blk = g.as_ptr().add(format.block_at(b));
            if prefetches(format) {
                prefetch_ahead(blk, bb);
            }
            let mut w = [_mm512_setzero_si512(); 16];
            if Q == IQ4 || Q == MXFP4 {
                let table = grid_table(format);
                let low8 = _mm256_set1_epi8(0x0F);
                for c in 0..8 {
                    let raw = _mm256_loadu_si256(blk.add(32 * c).cast());
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), low8);
                    let lo = _mm256_and_si256(raw, low8);
                    w[2 * c] = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(table, lo));
                    w[2 * c + 1] = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(table, hi));
                }
            } else if Q == NIBBLE6 {
                nibble6_steps(blk, format.bits_at(), &mut w);
            } else if Q != BYTE {
                for c in 0..8 {
                    let raw = _mm512_cvtepu8_epi16(_mm256_loadu_si256(blk.add(32 * c).cast()));
                    w[2 * c] = _mm512_and_si512(raw, low);
                    w[2 * c + 1] = _mm512_srli_epi16(raw, 4);
                }
                if Q == NIBBLE5 {
                    let bits = blk.add(format.bits_at()).cast::<u32>();
                    for (p, wp) in w.iter_mut().enumerate() {
                        *wp =
                            _mm512_mask_add_epi16(*wp, bits.add(p).read_unaligned(), *wp, sixteen);
                    }
                }
            } else {
                for (p, wp) in w.iter_mut().enumerate() {
                    *wp = _mm512_cvtepi8_epi16(_mm256_loadu_si256(blk.add(32 * p).cast()));
                }
            }
            let bases = g.as_ptr().add(format.bases_at(b));
            let sbase = bases16::<S>(bases);
            let s0 = scales16::<S>(blk.add(scales_at), sbase);
            let s1 = if SPLIT {
                scales16::<S>(blk.add(scales_at + size * GROUP_ROWS), sbase)
            } else {
                s0
            };
            let off = if OFF {
                scales16::<S>(blk.add(offsets_at), bases16::<S>(bases.add(2 * GROUP_ROWS)))
            } else {
                s0
            };
            for t in 0..T {
                let a = qa[t].add(BLOCK * b);
                let mut i = [_mm512_setzero_si512(); 4];
                for p in (0..8).step_by(2) {
                    i[0] = dp(i[0], w[p], a.add(2 * p));
                    i[1] = dp(i[1], w[p + 1], a.add(2 * p + 2));
                }
                for p in (8..16).step_by(2) {
                    i[2] = dp(i[2], w[p], a.add(2 * p));
                    i[3] = dp(i[3], w[p + 1], a.add(2 * p + 2));
                }
                let dav = _mm512_set1_ps(*da[t].add(b));
                if SPLIT {
                    let lo = _mm512_mul_ps(
                        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i[0], i[1])), s0),
                        dav,
                    );
                    let hi = _mm512_mul_ps(
                        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i[2], i[3])), s1),
                        dav,
                    );
                    acc[t] = _mm512_add_ps(_mm512_add_ps(acc[t], lo), hi);
                } else {
                    let sum = _mm512_add_epi32(
                        _mm512_add_epi32(i[0], i[1]),
                        _mm512_add_epi32(i[2], i[3]),
                    );
                    let mut term = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), s0), dav);
                    if OFF {
                        term =
                            _mm512_add_ps(term, _mm512_mul_ps(off, _mm512_set1_ps(*sa[t].add(b))));
                    }
                    acc[t] = _mm512_add_ps(acc[t], term);
                }
            }
        }
        for t in 0..T {
            _mm512_storeu_ps(out[t].as_mut_ptr(), acc[t]);
        }
    }
}

/// The AVX2 build of the group kernel: 8 rows per register (two halves of the
/// group), `vpmaddwd` plus `vpaddd` for the exact integer sums, and the scalar
/// twin's f32 operations in its order per row.
///
/// # Safety
/// The CPU must run [`crate::isa::Level::Avx2`]; the rest as for [`group`].
pub unsafe fn group_avx2(
    format: Format,
    g: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    macro_rules! run {
        ($q:expr, $off:literal, $split:literal, $s:expr) => {
            // SAFETY: the caller's contract.
            unsafe {
                // A decode step's one token keeps its sums in registers and
                // unpacks each step where it is used; more tokens share a
                // block unpacked once into L1 (`tile_avx2`).
                match tokens.len() {
                    1 => {
                        single_avx2::<{ $q }, $off, $split, { $s }>(g, nb, &tokens[0], &mut out[0])
                    }
                    _ => tile_avx2::<{ $q }, $off, $split, { $s }>(g, nb, tokens, out),
                }
            }
        };
    }
    by_format!(format, run)
}

/// 8 scales (or offsets) at `p`: f32, halves, or multipliers of `base`.
#[inline(always)]
unsafe fn scales8<const S: u8>(p: *const u8, base: __m256) -> __m256 {
    // SAFETY: 8, 16 or 32 bytes at `p` (caller).
    unsafe {
        match S {
            HALF => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
            F32 => _mm256_loadu_ps(p.cast()),
            _ => _mm256_mul_ps(
                base,
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast()))),
            ),
        }
    }
}

/// 8 halves at `p` (bases), or ones for the formats without.
#[inline(always)]
unsafe fn bases8<const S: u8>(p: *const u8) -> __m256 {
    // SAFETY: 16 bytes at `p` when the format has bases (caller).
    unsafe {
        if S == SMALL {
            _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
        } else {
            _mm256_set1_ps(1.0)
        }
    }
}

/// Steps `2c` and `2c + 1` of the block at `blk` (line `c` of 32 bytes, both
/// halves of the group), as 16-bit integers in `vpmaddwd` order:
/// `[step][part]`, part 0 holding rows 0..4 and 8..12, part 1 rows 4..8 and
/// 12..16 (the in-lane `vpunpck{l,h}bw` order; [`rows_in_order`] puts sums
/// back). Values are formed in the 8-bit domain, one 32-byte line at a time.
///
/// # Safety
/// AVX2 runs; `blk` holds a whole block of format `(Q, OFF, SPLIT, S)`.
#[inline(always)]
unsafe fn line_avx2<const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
    blk: *const u8,
    c: usize,
) -> [[__m256i; 2]; 2] {
    let format = format_of(Q, OFF, SPLIT, S);
    // SAFETY: every read lies inside the block (the layout's offsets; caller).
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        if Q == BYTE {
            let x0 = _mm256_loadu_si256(blk.add(64 * c).cast());
            let x1 = _mm256_loadu_si256(blk.add(64 * c + 32).cast());
            return [widen_signed(x0), widen_signed(x1)];
        }
        let raw = _mm256_loadu_si256(blk.add(32 * c).cast());
        let mut v = [
            _mm256_and_si256(raw, low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(raw), low),
        ];
        if Q == IQ4 || Q == MXFP4 {
            let table = grid_table(format);
            return v.map(|i| widen_signed(_mm256_shuffle_epi8(table, i)));
        }
        if Q == NIBBLE5 {
            // Bit i of step p's 32-bit word is byte i's fifth bit.
            let pick = _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                3, 3, 3, 3,
            );
            let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
            for (e, v) in v.iter_mut().enumerate() {
                let at = format.bits_at() + 4 * (2 * c + e);
                let word = blk.add(at).cast::<u32>().read_unaligned() as i32;
                let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(word), pick);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
                *v = _mm256_or_si256(*v, _mm256_and_si256(set, _mm256_set1_epi8(16)));
            }
        }
        if Q == NIBBLE6 {
            // Step 4k + j's two high bits are bits 2j, 2j + 1 of line k's bytes.
            let bits = _mm256_loadu_si256(blk.add(format.bits_at() + 32 * (c / 2)).cast());
            let mask = _mm256_set1_epi8(0x30);
            let (first, second) = if c.is_multiple_of(2) {
                (_mm256_slli_epi16::<4>(bits), _mm256_slli_epi16::<2>(bits))
            } else {
                (bits, _mm256_srli_epi16::<2>(bits))
            };
            let bias = _mm256_set1_epi8(32);
            v[0] = _mm256_sub_epi8(_mm256_or_si256(v[0], _mm256_and_si256(first, mask)), bias);
            v[1] = _mm256_sub_epi8(_mm256_or_si256(v[1], _mm256_and_si256(second, mask)), bias);
            return v.map(|x| widen_signed(x));
        }
        v.map(|x| widen_unsigned(x))
    }
}

/// Bytes `x` (values in `vpmaddwd` pairs, 16 rows) as 16-bit lanes, zero-extended,
/// in the in-lane unpack order of [`line_avx2`].
#[inline(always)]
unsafe fn widen_unsigned(x: __m256i) -> [__m256i; 2] {
    // SAFETY: register operations; AVX2 runs (callers).
    unsafe {
        let zero = _mm256_setzero_si256();
        [_mm256_unpacklo_epi8(x, zero), _mm256_unpackhi_epi8(x, zero)]
    }
}

/// [`widen_unsigned`] of signed bytes (sign-extended).
#[inline(always)]
unsafe fn widen_signed(x: __m256i) -> [__m256i; 2] {
    // SAFETY: register operations; AVX2 runs (callers).
    unsafe {
        let sign = _mm256_cmpgt_epi8(_mm256_setzero_si256(), x);
        [_mm256_unpacklo_epi8(x, sign), _mm256_unpackhi_epi8(x, sign)]
    }
}

/// Sums of the two parts of [`line_avx2`] as rows 0..8 and rows 8..16.
#[inline(always)]
unsafe fn rows_in_order(parts: [__m256i; 2]) -> [__m256i; 2] {
    // SAFETY: register operations; AVX2 runs (callers).
    unsafe {
        [
            _mm256_permute2x128_si256::<0x20>(parts[0], parts[1]),
            _mm256_permute2x128_si256::<0x31>(parts[0], parts[1]),
        ]
    }
}

/// A block's scales and offsets for rows `8h..8h + 8`: the first (or only)
/// half's scales, the second half's (split formats), and the same of offsets.
#[derive(Clone, Copy)]
struct Scales8 {
    s0: __m256,
    s1: __m256,
    off0: __m256,
    off1: __m256,
}

/// [`Scales8`] of block `b` (at `blk`) of group `g`, rows `8h..8h + 8`.
///
/// # Safety
/// AVX2 and F16C run; `g` holds block `b` of format `(Q, OFF, SPLIT, S)`.
#[inline(always)]
unsafe fn scales_avx2<const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
    g: &[u8],
    blk: *const u8,
    b: usize,
    h: usize,
) -> Scales8 {
    let format = format_of(Q, OFF, SPLIT, S);
    let (size, scales_at, offsets_at) =
        (format.scale_size(), format.scales_at(), format.offsets_at());
    // SAFETY: the scales, offsets and bases lie inside the group (caller).
    unsafe {
        let bases = g.as_ptr().add(format.bases_at(b) + 16 * h);
        let sbase = bases8::<S>(bases);
        let obase = if OFF {
            bases8::<S>(bases.add(2 * GROUP_ROWS))
        } else {
            sbase
        };
        let s0 = scales8::<S>(blk.add(scales_at + size * 8 * h), sbase);
        let s1 = if SPLIT {
            scales8::<S>(blk.add(scales_at + size * (GROUP_ROWS + 8 * h)), sbase)
        } else {
            s0
        };
        let off0 = if OFF {
            scales8::<S>(blk.add(offsets_at + size * 8 * h), obase)
        } else {
            s0
        };
        let off1 = if OFF && SPLIT {
            scales8::<S>(blk.add(offsets_at + size * (GROUP_ROWS + 8 * h)), obase)
        } else {
            off0
        };
        Scales8 { s0, s1, off0, off1 }
    }
}

/// Adds block `b`'s term of one token to `acc` (rows `8h..8h + 8`), from the
/// exact integer sums of its values 0..16 (`lo`) and 16..32 (`hi`): the twin's
/// f32 operations in its order.
///
/// # Safety
/// AVX2 runs; the token holds block `b` (and its half sums for split offsets).
#[inline(always)]
unsafe fn block_term<const OFF: bool, const SPLIT: bool>(
    acc: __m256,
    lo: __m256i,
    hi: __m256i,
    sc: &Scales8,
    tok: &TokenActs<'_>,
    b: usize,
) -> __m256 {
    // SAFETY: the token's scales and sums hold block b (caller).
    unsafe {
        let dav = _mm256_set1_ps(*tok.da.get_unchecked(b));
        if SPLIT {
            let mut l = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(lo), sc.s0), dav);
            let mut u = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(hi), sc.s1), dav);
            if OFF {
                let sh = tok.sh.as_ptr().add(2 * b);
                l = _mm256_add_ps(l, _mm256_mul_ps(sc.off0, _mm256_set1_ps(*sh)));
                u = _mm256_add_ps(u, _mm256_mul_ps(sc.off1, _mm256_set1_ps(*sh.add(1))));
            }
            _mm256_add_ps(_mm256_add_ps(acc, l), u)
        } else {
            let mut term = _mm256_mul_ps(
                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(lo, hi)), sc.s0),
                dav,
            );
            if OFF {
                term = _mm256_add_ps(
                    term,
                    _mm256_mul_ps(sc.off0, _mm256_set1_ps(*tok.sa.get_unchecked(b))),
                );
            }
            _mm256_add_ps(acc, term)
        }
    }
}

/// `vpmaddwd` of step `w` with the activation pair at `pair`, added to `acc`.
///
/// # Safety
/// AVX2 runs; `pair` points at two i16.
#[inline(always)]
unsafe fn madd_pair(acc: __m256i, w: __m256i, pair: *const i16) -> __m256i {
    // SAFETY: 4 bytes at `pair` (caller).
    unsafe {
        let a = _mm256_set1_epi32(pair.cast::<i32>().read_unaligned());
        _mm256_add_epi32(acc, _mm256_madd_epi16(w, a))
    }
}

/// One token (a decode step): each line is unpacked where it is used and the
/// sums stay in registers.
#[target_feature(enable = "avx2,f16c")]
unsafe fn single_avx2<const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
    g: &[u8],
    nb: usize,
    tok: &TokenActs<'_>,
    out: &mut [f32; GROUP_ROWS],
) {
    let format = format_of(Q, OFF, SPLIT, S);
    let bb = format.block_bytes();
    let mut acc = [_mm256_setzero_ps(); 2];
    // SAFETY: (the whole body) block b lies at g[format.block_at(b)..] and the
    // token's values at qa[32 b..32 b + 32], both in bounds for b < nb (the
    // caller's contract).
    unsafe {
        for b in 0..nb {
            let blk = g.as_ptr().add(format.block_at(b));
            if prefetches(format) {
                prefetch_ahead(blk, bb);
            }
            let a = tok.qa.as_ptr().add(BLOCK * b);
            // sums[q][part]: values 16q..16q + 16, exact.
            let mut sums = [[_mm256_setzero_si256(); 2]; 2];
            for c in 0..8 {
                let steps = line_avx2::<Q, OFF, SPLIT, S>(blk, c);
                let q = c / 4;
                for (e, parts) in steps.iter().enumerate() {
                    let pair =
                        _mm256_set1_epi32(a.add(2 * (2 * c + e)).cast::<i32>().read_unaligned());
                    for (sum, &w) in sums[q].iter_mut().zip(parts) {
                        *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(w, pair));
                    }
                }
            }
            let [lo, hi] = sums.map(|s| rows_in_order(s));
            for (h, acc) in acc.iter_mut().enumerate() {
                let sc = scales_avx2::<Q, OFF, SPLIT, S>(g, blk, b, h);
                *acc = block_term::<OFF, SPLIT>(*acc, lo[h], hi[h], &sc, tok, b);
            }
        }
        _mm256_storeu_ps(out.as_mut_ptr(), acc[0]);
        _mm256_storeu_ps(out.as_mut_ptr().add(8), acc[1]);
    }
}

/// Tokens a register tile of [`tile_avx2`] sums at once: 4 tokens times 16
/// rows are 8 integer sums, which with the two steps and four activation
/// pairs fit AVX2's 16 registers (8 tokens spilled the sums to the stack).
const SUB_TILE: usize = 4;

/// Several tokens: each block is unpacked once into 1 KiB of 16-bit steps
/// (L1), then multiplied [`SUB_TILE`] tokens at a time with every sum in a
/// register.
#[target_feature(enable = "avx2,f16c")]
unsafe fn tile_avx2<const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
    g: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let n = tokens.len();
    assert!(
        (1..=TOKEN_TILE).contains(&n),
        "{n} tokens in one group call"
    );
    let format = format_of(Q, OFF, SPLIT, S);
    let bb = format.block_bytes();
    let mut acc = [[_mm256_setzero_ps(); 2]; TOKEN_TILE];
    // steps[part][p]: step p of the rows of `part` (see `line_avx2`).
    let mut steps = [[_mm256_setzero_si256(); 16]; 2];
    // SAFETY: (the whole body) block b lies at g[format.block_at(b)..] and token
    // values at qa[32 b..32 b + 32], both in bounds for b < nb (the caller's
    // contract); sub-tile indices are clamped to the n tokens.
    unsafe {
        for b in 0..nb {
            let blk = g.as_ptr().add(format.block_at(b));
            if prefetches(format) {
                prefetch_ahead(blk, bb);
            }
            for c in 0..8 {
                let line = line_avx2::<Q, OFF, SPLIT, S>(blk, c);
                for (e, parts) in line.into_iter().enumerate() {
                    steps[0][2 * c + e] = parts[0];
                    steps[1][2 * c + e] = parts[1];
                }
            }
            let sc = [
                scales_avx2::<Q, OFF, SPLIT, S>(g, blk, b, 0),
                scales_avx2::<Q, OFF, SPLIT, S>(g, blk, b, 1),
            ];
            for t0 in (0..n).step_by(SUB_TILE) {
                let a: [*const i16; SUB_TILE] =
                    std::array::from_fn(|i| tokens[(t0 + i).min(n - 1)].qa.as_ptr().add(BLOCK * b));
                let live = n - t0;
                if SPLIT {
                    // Per part of the rows: two sums (values 0..16, 16..32) per
                    // token, 8 registers; the first part's wait in memory.
                    let mut halves = [[[_mm256_setzero_si256(); 2]; 2]; SUB_TILE];
                    for (part, steps) in steps.iter().enumerate() {
                        let mut lo = [_mm256_setzero_si256(); SUB_TILE];
                        let mut hi = [_mm256_setzero_si256(); SUB_TILE];
                        for k in 0..8 {
                            let (wl, wh) = (steps[k], steps[k + 8]);
                            for i in 0..SUB_TILE {
                                lo[i] = madd_pair(lo[i], wl, a[i].add(2 * k));
                                hi[i] = madd_pair(hi[i], wh, a[i].add(2 * k + 16));
                            }
                        }
                        for i in 0..SUB_TILE {
                            halves[i][0][part] = lo[i];
                            halves[i][1][part] = hi[i];
                        }
                    }
                    for (i, [lo, hi]) in halves.into_iter().enumerate().take(live) {
                        let (t, lo, hi) = (t0 + i, rows_in_order(lo), rows_in_order(hi));
                        for h in 0..2 {
                            acc[t][h] = block_term::<OFF, SPLIT>(
                                acc[t][h], lo[h], hi[h], &sc[h], &tokens[t], b,
                            );
                        }
                    }
                } else {
                    // One sum over all 32 values per token and part (the twin
                    // adds the halves' exact sums: the same integer), 8 registers.
                    let mut sums = [[_mm256_setzero_si256(); 2]; SUB_TILE];
                    for p in 0..16 {
                        let (w0, w1) = (steps[0][p], steps[1][p]);
                        for (i, sum) in sums.iter_mut().enumerate() {
                            let pair =
                                _mm256_set1_epi32(a[i].add(2 * p).cast::<i32>().read_unaligned());
                            sum[0] = _mm256_add_epi32(sum[0], _mm256_madd_epi16(w0, pair));
                            sum[1] = _mm256_add_epi32(sum[1], _mm256_madd_epi16(w1, pair));
                        }
                    }
                    let zero = _mm256_setzero_si256();
                    for (i, sum) in sums.into_iter().enumerate().take(live) {
                        let (t, rows) = (t0 + i, rows_in_order(sum));
                        for h in 0..2 {
                            acc[t][h] = block_term::<OFF, SPLIT>(
                                acc[t][h], rows[h], zero, &sc[h], &tokens[t], b,
                            );
                        }
                    }
                }
            }
        }
        for t in 0..n {
            _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t][0]);
            _mm256_storeu_ps(out[t].as_mut_ptr().add(8), acc[t][1]);
        }
    }
}
