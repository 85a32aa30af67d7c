//! The AVX2 build of the group kernel (`packed::kernel::group_portable`): two
//! registers of 8 rows per group, `vpmaddwd` + `vpaddd` for the exact integer
//! sums (fused into AVX-VNNI's `vpdpwssd` where the CPU has it: the same
//! integers, so the same bits), each line unpacked in the 8-bit domain; the
//! invariants are those of the AVX-512 build in [`super`]. This file holds the
//! dispatch and what the paths share (a block's lines and scales, a term's f32
//! operations); [`single`] multiplies one token, [`tile`] two or more.

use std::arch::x86_64::*;

use super::super::layout::{Format, Grid, Quants, Scales};
use super::super::{GROUP_ROWS, kernel::TokenActs};
use super::{
    BYTE, CRUMB, CRUMB3, F32, HALF, IQ4, MXFP4, NIBBLE, NIBBLE5, NIBBLE6, SMALL, by_format,
    format_of, grid_table, is_grid,
};

/// The `asm!` lines that add the sums of `{$a}`'s and `{$b}`'s adjacent
/// 16-bit products to `{$s}` ([`dot_add`] in an `asm!` loop): `plain` is
/// `vpmaddwd` into `{$a}` (its values are spent) then `vpaddd`; `vnni` is
/// AVX-VNNI's `vpdpwssd`.
macro_rules! dot_add_asm {
    (plain, $s:ident, $a:ident, $b:ident) => {
        concat!(
            "vpmaddwd {",
            stringify!($a),
            "}, {",
            stringify!($a),
            "}, {",
            stringify!($b),
            "}\nvpaddd {",
            stringify!($s),
            "}, {",
            stringify!($s),
            "}, {",
            stringify!($a),
            "}",
        )
    };
    (vnni, $s:ident, $a:ident, $b:ident) => {
        concat!(
            "{{vex}} vpdpwssd {",
            stringify!($s),
            "}, {",
            stringify!($a),
            "}, {",
            stringify!($b),
            "}",
        )
    };
}

/// Defines a path's two entries: `$plain`, built for AVX2, and `$vnni`,
/// built for AVX2 with AVX-VNNI, each running `$body::<VNNI, ...>` (an
/// `#[inline(always)]` body generic over the flag, so each entry's features
/// cover what its body runs).
macro_rules! entries {
    (
        $(#[$doc:meta])*
        $plain:ident, $vnni:ident => $body:ident
        <$(const $g:ident: $t:ty),*>($($arg:ident: $ty:ty),*)
    ) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for [`super::group_avx2`].
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $plain<$(const $g: $t),*>($($arg: $ty),*) {
            // SAFETY: the caller's contract.
            unsafe { $body::<false, $($g),*>($($arg),*) }
        }

        #[doc = concat!("[`", stringify!($plain), "`] with AVX-VNNI's `vpdpwssd`.")]
        ///
        /// # Safety
        /// As for [`super::group_avx2`], and the CPU runs AVX-VNNI.
        #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
        pub(super) unsafe fn $vnni<$(const $g: $t),*>($($arg: $ty),*) {
            // SAFETY: the caller's contract.
            unsafe { $body::<true, $($g),*>($($arg),*) }
        }
    };
}

mod single;
mod tile;

use single::{single_avx2, single_avx2_vnni};
use tile::{few_avx2, few_avx2_vnni, tile_avx2, tile_avx2_vnni};

/// The AVX2 build of the group kernel: 8 rows per register (two halves of the
/// group), `vpmaddwd` plus `vpaddd` for the exact integer sums (`VNNI`:
/// AVX-VNNI's `vpdpwssd`, which adds the same pairs' products to the same
/// sums), and the scalar twin's f32 operations in its order per row.
///
/// # Safety
/// The CPU must run [`crate::isa::Level::Avx2`], and
/// [`crate::isa::Level::Avx2Vnni`] if `VNNI`; the rest as for [`super::group`].
pub unsafe fn group_avx2<const VNNI: bool>(
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
                // A decode step's one token, and two tokens, keep their sums
                // in registers and unpack each step where it is used; more
                // tokens share a block unpacked once into L1 (`tile_avx2`).
                match (tokens.len(), VNNI) {
                    (1, false) => {
                        single_avx2::<{ $q }, $off, $split, { $s }>(g, nb, &tokens[0], &mut out[0])
                    }
                    (1, true) => single_avx2_vnni::<{ $q }, $off, $split, { $s }>(
                        g,
                        nb,
                        &tokens[0],
                        &mut out[0],
                    ),
                    (2, false) => few_avx2::<2, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    (2, true) => {
                        few_avx2_vnni::<2, { $q }, $off, $split, { $s }>(g, nb, tokens, out)
                    }
                    (_, false) => tile_avx2::<{ $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    (_, true) => tile_avx2_vnni::<{ $q }, $off, $split, { $s }>(g, nb, tokens, out),
                }
            }
        };
    }
    by_format!(format, run)
}

/// `acc` plus the sums of `a`'s and `b`'s adjacent 16-bit products, per 32-bit
/// lane: `vpmaddwd` then `vpaddd`, or AVX-VNNI's `vpdpwssd` (`VNNI`), which
/// wraps as they do, so both give the same integers.
///
/// # Safety
/// AVX2 runs, and AVX-VNNI if `VNNI` (the caller is built with it).
#[inline(always)]
unsafe fn dot_add<const VNNI: bool>(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    // SAFETY: register operations on instructions this CPU runs (caller).
    unsafe {
        if VNNI {
            _mm256_dpwssd_avx_epi32(acc, a, b)
        } else {
            _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
        }
    }
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
/// No intrinsic is called inside a closure (`v.map(|x| ...)`): a closure does
/// not take its function's target features, so its intrinsics stay calls
/// (the grid formats' products ran at 0.7 GMAC/s a thread on one token, 5.2
/// on eight, `matmul_speed 4096 4096 T MXFP4` with `FERROX_ISA=avx2`).
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
        if Q == CRUMB || Q == CRUMB3 {
            // Steps 2c, 2c + 1 at bits 4 (c % 2) and 4 (c % 2) + 2 of line c / 2.
            let raw = _mm256_loadu_si256(blk.add(32 * (c / 2)).cast());
            let x = if c.is_multiple_of(2) {
                raw
            } else {
                _mm256_srli_epi16::<4>(raw)
            };
            let three = _mm256_set1_epi8(3);
            let v = [
                _mm256_and_si256(x, three),
                _mm256_and_si256(_mm256_srli_epi16::<2>(x), three),
            ];
            if Q == CRUMB {
                return [widen_unsigned(v[0]), widen_unsigned(v[1])];
            }
            // Less 4 where the sign bit is set.
            let (four, set) = (
                _mm256_set1_epi8(4),
                plane_bits(blk.add(format.bits_at()), c),
            );
            let x0 = _mm256_sub_epi8(v[0], _mm256_and_si256(set[0], four));
            let x1 = _mm256_sub_epi8(v[1], _mm256_and_si256(set[1], four));
            return [widen_signed(x0), widen_signed(x1)];
        }
        let raw = _mm256_loadu_si256(blk.add(32 * c).cast());
        let mut v = [
            _mm256_and_si256(raw, low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(raw), low),
        ];
        if is_grid(Q) {
            let table = grid_table(format);
            return [
                widen_signed(_mm256_shuffle_epi8(table, v[0])),
                widen_signed(_mm256_shuffle_epi8(table, v[1])),
            ];
        }
        if Q == NIBBLE5 {
            let set = plane_bits(blk.add(format.bits_at()), c);
            for (v, set) in v.iter_mut().zip(set) {
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
            return [widen_signed(v[0]), widen_signed(v[1])];
        }
        [widen_unsigned(v[0]), widen_unsigned(v[1])]
    }
}

/// Steps `2c`, `2c + 1` of a one-bit plane at `plane` (bit `i` of step `p`'s
/// 32-bit word is byte `i`'s) as bytes of all ones where the bit is set.
///
/// # Safety
/// AVX2 runs; `plane` holds the plane's 16 words.
#[inline(always)]
unsafe fn plane_bits(plane: *const u8, c: usize) -> [__m256i; 2] {
    // SAFETY: words 2c and 2c + 1 lie in the plane (caller).
    unsafe {
        let pick = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        let mut set = [_mm256_setzero_si256(); 2];
        for (e, s) in set.iter_mut().enumerate() {
            let word = plane.add(4 * (2 * c + e)).cast::<u32>().read_unaligned() as i32;
            let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(word), pick);
            *s = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
        }
        set
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

/// `fma(offset, x, fma(sum * scale, da, acc))` per lane, the twin's order (the
/// outer one only with offsets): one token's term of one half of a block.
#[inline(always)]
unsafe fn add_term<const OFF: bool>(
    acc: __m256,
    sum: __m256i,
    scale: __m256,
    da: __m256,
    offset: __m256,
    x: __m256,
) -> __m256 {
    // SAFETY: register operations; AVX2 and FMA run (callers).
    unsafe {
        let acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum), scale), da, acc);
        if OFF {
            _mm256_fmadd_ps(offset, x, acc)
        } else {
            acc
        }
    }
}
