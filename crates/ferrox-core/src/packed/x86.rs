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
//! The steps of a block are unpacked once and serve every token of a call (up
//! to `TOKEN_TILE`). On AVX-512 they stay in 16 registers while the tokens go
//! by four (`block_dots4`: eight independent sums) and their f32 sums wait in
//! memory between blocks; calls of 8 tokens unrolled in registers, one token
//! at a time, unpacked four times as often and ran at 0.65-0.75x on an Emerald
//! Rapids. On AVX2 they go into a 1 KiB buffer read by register tiles of 4
//! tokens times 16 rows (8 integer sums; a tile of 8 tokens spilled its sums
//! to the stack on every multiply-add, and the tile kernel made the
//! Llama-3.2-1B prefill 1.25x faster on a Zen 3). A decode step's one token has its own build that
//! unpacks each step where it is used. Each build is instantiated per packed
//! format (`by_format!`). This file holds the AVX-512 build and what both
//! builds share (formats, prefetch, the grid table); [`avx2`] the AVX2 build.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::kernel::{TOKEN_TILE, TokenActs};
use super::layout::{Format, Grid, Quants, Scales};
use super::{BLOCK, GROUP_ROWS};

mod avx2;
pub use avx2::group_avx2;

/// # Safety
/// The CPU must run [`crate::isa::Level::Avx512Vnni`]; `g` holds `nb` blocks of `format`; every token holds
/// `nb` blocks; `out` has a row per token; at most [`TOKEN_TILE`] tokens.
pub unsafe fn group(
    format: Format,
    g: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    assert!(tokens.len() <= TOKEN_TILE && out.len() >= tokens.len());
    macro_rules! by_tokens {
        ($q:expr, $off:literal, $split:literal, $s:expr) => {
            // SAFETY: the caller's contract.
            unsafe {
                match tokens.len() {
                    1 => kernel::<1, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
                    _ => kernel::<TOKEN_TILE, { $q }, $off, $split, { $s }>(g, nb, tokens, out),
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
            (Quants::Crumb, true, true, Scales::Small) => $run!(CRUMB, true, true, SMALL),
            (Quants::Nibble5, true, false, Scales::Half) => $run!(NIBBLE5, true, false, HALF),
            (Quants::Nibble5, true, false, Scales::F32) => $run!(NIBBLE5, true, false, F32),
            (Quants::Nibble5, true, false, Scales::Small) => $run!(NIBBLE5, true, false, SMALL),
            (Quants::Nibble6, false, true, Scales::Small) => $run!(NIBBLE6, false, true, SMALL),
            (Quants::Byte, false, false, Scales::Half) => $run!(BYTE, false, false, HALF),
            (Quants::Byte, false, false, Scales::F32) => $run!(BYTE, false, false, F32),
            (Quants::Byte, false, false, Scales::Small) => $run!(BYTE, false, false, SMALL),
            (Quants::Crumb3, false, true, Scales::Small) => $run!(CRUMB3, false, true, SMALL),
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
const CRUMB: u8 = 6;
const CRUMB3: u8 = 7;

/// Whether the integers of format `q` are grid codes ([`Quants::Grid`]).
const fn is_grid(q: u8) -> bool {
    matches!(q, IQ4 | MXFP4)
}

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
        CRUMB => Quants::Crumb,
        CRUMB3 => Quants::Crumb3,
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
/// lines of the block of `format` 32 KiB past `blk` into L2 (measured: +40 %
/// bytes/s over the hardware prefetcher alone at 16 KiB on Zen 4's Q8_0; 32 KiB
/// gave +3 % on the AVX2 build's Llama-3.2-1B decode on a Sapphire Rapids, the
/// same on its AVX-512 build), when `on` (the kernel's [`prefetches`]). A hint;
/// past the end it reads nothing.
#[inline(always)]
fn prefetch_ahead(on: bool, format: Format, blk: *const u8) {
    if !on {
        return;
    }
    let ahead = blk.wrapping_add(PREFETCH_BYTES);
    let mut line = 0;
    while line < format.block_bytes() {
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

/// Whether a kernel of `format` prefetches on this CPU ([`prefetch_ahead`]):
/// every format, but on AMD CPUs not the formats whose super-blocks carry
/// offset bases (Q4_K, Q5_K, Q2_K). `examples/decode_stream` (a 65536 x 4096
/// one-token product streaming from DRAM, medians) measured the hint both ways
/// on those formats:
/// * Zen 4: slower with it (with -> without: Q4_K on one thread 11.9 -> 19.8
///   GB/s, on two 20.4 -> 23.6-30.4; Q5_K 11.2 -> 17.6 on one), while Q4_0,
///   Q4_1, Q5_0, IQ4_NL and MXFP4 lost 10-25 % without it, and Q6_K and Q8_0
///   were even on two threads (Q6_K 20.3 -> 16.9 on one, Q8_0 19.4 -> 25.1);
/// * Intel Emerald Rapids: faster with it (without -> with, two threads:
///   Q4_K 14.3-16.6 -> 22.0-24.3 GB/s in three runs, Q5_K 15.0-16.0 ->
///   24.7-24.9 and Q2_K 10.6-12.6 -> 16.7-20.5 in two; Q6_K, prefetched
///   either way, 22-25).
fn prefetches(format: Format) -> bool {
    prefetches_on(format, is_amd())
}

/// [`prefetches`] on an AMD CPU or another.
fn prefetches_on(format: Format, amd: bool) -> bool {
    !(amd && matches!(format.scales, Scales::Small) && format.offset)
}

/// Whether the CPU is AMD's (or Hygon's, the same cores): its vendor string,
/// read once.
fn is_amd() -> bool {
    static AMD: OnceLock<bool> = OnceLock::new();
    *AMD.get_or_init(|| {
        // SAFETY: leaf 0 of CPUID exists on every x86-64 CPU. (The intrinsic
        // is safe in the current toolchain, unsafe at the MSRV.)
        #[allow(unused_unsafe)]
        let id = unsafe { __cpuid(0) };
        let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        matches!(&vendor[..], b"AuthenticAMD" | b"HygonGenuine")
    })
}

/// The integer dot products of one block's 16 steps `w` with one token's 32
/// activations at `a` (a decode step's token, and the tokens a call has past
/// its fours), in four sums: steps 0, 2, 4, 6 / 1, 3, 5, 7 / 8, 10, 12, 14 /
/// 9, 11, 13, 15 (the two halves of a split block stay apart).
///
/// One `asm!` block: each `vpdpwssd` broadcasts its pair of activations from
/// memory at a constant displacement from `a`. (LLVM rewrites the intrinsic
/// into `vpmaddwd` + `vpaddd`, without the broadcast operand; one `asm!` per
/// instruction had the compiler form each address in a register of its own,
/// a `lea` per product.)
///
/// # Safety
/// AVX-512 VNNI runs; `a` points at 32 i16 of the token's row (the 16 pairs
/// read; nothing else is touched).
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn block_dots(w: &[__m512i; 16], a: *const i16) -> [__m512i; 4] {
    let mut i = [_mm512_setzero_si512(); 4];
    // SAFETY: the caller's contract: the 16 dword reads lie in a[0..32].
    unsafe {
        std::arch::asm!(
            "vpdpwssd {i0}, {w0}, dword ptr [{a} + 0]{{1to16}}",
            "vpdpwssd {i1}, {w1}, dword ptr [{a} + 4]{{1to16}}",
            "vpdpwssd {i2}, {w8}, dword ptr [{a} + 32]{{1to16}}",
            "vpdpwssd {i3}, {w9}, dword ptr [{a} + 36]{{1to16}}",
            "vpdpwssd {i0}, {w2}, dword ptr [{a} + 8]{{1to16}}",
            "vpdpwssd {i1}, {w3}, dword ptr [{a} + 12]{{1to16}}",
            "vpdpwssd {i2}, {w10}, dword ptr [{a} + 40]{{1to16}}",
            "vpdpwssd {i3}, {w11}, dword ptr [{a} + 44]{{1to16}}",
            "vpdpwssd {i0}, {w4}, dword ptr [{a} + 16]{{1to16}}",
            "vpdpwssd {i1}, {w5}, dword ptr [{a} + 20]{{1to16}}",
            "vpdpwssd {i2}, {w12}, dword ptr [{a} + 48]{{1to16}}",
            "vpdpwssd {i3}, {w13}, dword ptr [{a} + 52]{{1to16}}",
            "vpdpwssd {i0}, {w6}, dword ptr [{a} + 24]{{1to16}}",
            "vpdpwssd {i1}, {w7}, dword ptr [{a} + 28]{{1to16}}",
            "vpdpwssd {i2}, {w14}, dword ptr [{a} + 56]{{1to16}}",
            "vpdpwssd {i3}, {w15}, dword ptr [{a} + 60]{{1to16}}",
            i0 = inout(zmm_reg) i[0],
            i1 = inout(zmm_reg) i[1],
            i2 = inout(zmm_reg) i[2],
            i3 = inout(zmm_reg) i[3],
            w0 = in(zmm_reg) w[0],
            w1 = in(zmm_reg) w[1],
            w2 = in(zmm_reg) w[2],
            w3 = in(zmm_reg) w[3],
            w4 = in(zmm_reg) w[4],
            w5 = in(zmm_reg) w[5],
            w6 = in(zmm_reg) w[6],
            w7 = in(zmm_reg) w[7],
            w8 = in(zmm_reg) w[8],
            w9 = in(zmm_reg) w[9],
            w10 = in(zmm_reg) w[10],
            w11 = in(zmm_reg) w[11],
            w12 = in(zmm_reg) w[12],
            w13 = in(zmm_reg) w[13],
            w14 = in(zmm_reg) w[14],
            w15 = in(zmm_reg) w[15],
            a = in(reg) a,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    i
}

/// The products of one block's 16 steps `w` with four tokens' activations (32
/// each, at `a[t]`), in two sums a token: the block's halves, steps 0..8 and
/// 8..16 (a split block's two scales). The 64 `vpdpwssd` rotate over the eight
/// sums, so each sum's chain waits on nothing the next seven do not hide
/// (four sums of one token: 1.1-1.3x slower on an Emerald Rapids).
///
/// # Safety
/// AVX-512 VNNI runs; each `a[t]` points at 32 i16 of a token's row.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn block_dots4(w: &[__m512i; 16], a: [*const i16; 4]) -> [[__m512i; 2]; 4] {
    let mut s = [[_mm512_setzero_si512(); 2]; 4];
    // SAFETY: the caller's contract: the dword reads lie in each a[t][0..32].
    unsafe {
        std::arch::asm!(
            "vpdpwssd {s00}, {w0}, dword ptr [{a0} + 0]{{1to16}}",
            "vpdpwssd {s10}, {w0}, dword ptr [{a1} + 0]{{1to16}}",
            "vpdpwssd {s20}, {w0}, dword ptr [{a2} + 0]{{1to16}}",
            "vpdpwssd {s30}, {w0}, dword ptr [{a3} + 0]{{1to16}}",
            "vpdpwssd {s01}, {w8}, dword ptr [{a0} + 32]{{1to16}}",
            "vpdpwssd {s11}, {w8}, dword ptr [{a1} + 32]{{1to16}}",
            "vpdpwssd {s21}, {w8}, dword ptr [{a2} + 32]{{1to16}}",
            "vpdpwssd {s31}, {w8}, dword ptr [{a3} + 32]{{1to16}}",
            "vpdpwssd {s00}, {w1}, dword ptr [{a0} + 4]{{1to16}}",
            "vpdpwssd {s10}, {w1}, dword ptr [{a1} + 4]{{1to16}}",
            "vpdpwssd {s20}, {w1}, dword ptr [{a2} + 4]{{1to16}}",
            "vpdpwssd {s30}, {w1}, dword ptr [{a3} + 4]{{1to16}}",
            "vpdpwssd {s01}, {w9}, dword ptr [{a0} + 36]{{1to16}}",
            "vpdpwssd {s11}, {w9}, dword ptr [{a1} + 36]{{1to16}}",
            "vpdpwssd {s21}, {w9}, dword ptr [{a2} + 36]{{1to16}}",
            "vpdpwssd {s31}, {w9}, dword ptr [{a3} + 36]{{1to16}}",
            "vpdpwssd {s00}, {w2}, dword ptr [{a0} + 8]{{1to16}}",
            "vpdpwssd {s10}, {w2}, dword ptr [{a1} + 8]{{1to16}}",
            "vpdpwssd {s20}, {w2}, dword ptr [{a2} + 8]{{1to16}}",
            "vpdpwssd {s30}, {w2}, dword ptr [{a3} + 8]{{1to16}}",
            "vpdpwssd {s01}, {w10}, dword ptr [{a0} + 40]{{1to16}}",
            "vpdpwssd {s11}, {w10}, dword ptr [{a1} + 40]{{1to16}}",
            "vpdpwssd {s21}, {w10}, dword ptr [{a2} + 40]{{1to16}}",
            "vpdpwssd {s31}, {w10}, dword ptr [{a3} + 40]{{1to16}}",
            "vpdpwssd {s00}, {w3}, dword ptr [{a0} + 12]{{1to16}}",
            "vpdpwssd {s10}, {w3}, dword ptr [{a1} + 12]{{1to16}}",
            "vpdpwssd {s20}, {w3}, dword ptr [{a2} + 12]{{1to16}}",
            "vpdpwssd {s30}, {w3}, dword ptr [{a3} + 12]{{1to16}}",
            "vpdpwssd {s01}, {w11}, dword ptr [{a0} + 44]{{1to16}}",
            "vpdpwssd {s11}, {w11}, dword ptr [{a1} + 44]{{1to16}}",
            "vpdpwssd {s21}, {w11}, dword ptr [{a2} + 44]{{1to16}}",
            "vpdpwssd {s31}, {w11}, dword ptr [{a3} + 44]{{1to16}}",
            "vpdpwssd {s00}, {w4}, dword ptr [{a0} + 16]{{1to16}}",
            "vpdpwssd {s10}, {w4}, dword ptr [{a1} + 16]{{1to16}}",
            "vpdpwssd {s20}, {w4}, dword ptr [{a2} + 16]{{1to16}}",
            "vpdpwssd {s30}, {w4}, dword ptr [{a3} + 16]{{1to16}}",
            "vpdpwssd {s01}, {w12}, dword ptr [{a0} + 48]{{1to16}}",
            "vpdpwssd {s11}, {w12}, dword ptr [{a1} + 48]{{1to16}}",
            "vpdpwssd {s21}, {w12}, dword ptr [{a2} + 48]{{1to16}}",
            "vpdpwssd {s31}, {w12}, dword ptr [{a3} + 48]{{1to16}}",
            "vpdpwssd {s00}, {w5}, dword ptr [{a0} + 20]{{1to16}}",
            "vpdpwssd {s10}, {w5}, dword ptr [{a1} + 20]{{1to16}}",
            "vpdpwssd {s20}, {w5}, dword ptr [{a2} + 20]{{1to16}}",
            "vpdpwssd {s30}, {w5}, dword ptr [{a3} + 20]{{1to16}}",
            "vpdpwssd {s01}, {w13}, dword ptr [{a0} + 52]{{1to16}}",
            "vpdpwssd {s11}, {w13}, dword ptr [{a1} + 52]{{1to16}}",
            "vpdpwssd {s21}, {w13}, dword ptr [{a2} + 52]{{1to16}}",
            "vpdpwssd {s31}, {w13}, dword ptr [{a3} + 52]{{1to16}}",
            "vpdpwssd {s00}, {w6}, dword ptr [{a0} + 24]{{1to16}}",
            "vpdpwssd {s10}, {w6}, dword ptr [{a1} + 24]{{1to16}}",
            "vpdpwssd {s20}, {w6}, dword ptr [{a2} + 24]{{1to16}}",
            "vpdpwssd {s30}, {w6}, dword ptr [{a3} + 24]{{1to16}}",
            "vpdpwssd {s01}, {w14}, dword ptr [{a0} + 56]{{1to16}}",
            "vpdpwssd {s11}, {w14}, dword ptr [{a1} + 56]{{1to16}}",
            "vpdpwssd {s21}, {w14}, dword ptr [{a2} + 56]{{1to16}}",
            "vpdpwssd {s31}, {w14}, dword ptr [{a3} + 56]{{1to16}}",
            "vpdpwssd {s00}, {w7}, dword ptr [{a0} + 28]{{1to16}}",
            "vpdpwssd {s10}, {w7}, dword ptr [{a1} + 28]{{1to16}}",
            "vpdpwssd {s20}, {w7}, dword ptr [{a2} + 28]{{1to16}}",
            "vpdpwssd {s30}, {w7}, dword ptr [{a3} + 28]{{1to16}}",
            "vpdpwssd {s01}, {w15}, dword ptr [{a0} + 60]{{1to16}}",
            "vpdpwssd {s11}, {w15}, dword ptr [{a1} + 60]{{1to16}}",
            "vpdpwssd {s21}, {w15}, dword ptr [{a2} + 60]{{1to16}}",
            "vpdpwssd {s31}, {w15}, dword ptr [{a3} + 60]{{1to16}}",
            s00 = inout(zmm_reg) s[0][0],
            s01 = inout(zmm_reg) s[0][1],
            s10 = inout(zmm_reg) s[1][0],
            s11 = inout(zmm_reg) s[1][1],
            s20 = inout(zmm_reg) s[2][0],
            s21 = inout(zmm_reg) s[2][1],
            s30 = inout(zmm_reg) s[3][0],
            s31 = inout(zmm_reg) s[3][1],
            w0 = in(zmm_reg) w[0],
            w1 = in(zmm_reg) w[1],
            w2 = in(zmm_reg) w[2],
            w3 = in(zmm_reg) w[3],
            w4 = in(zmm_reg) w[4],
            w5 = in(zmm_reg) w[5],
            w6 = in(zmm_reg) w[6],
            w7 = in(zmm_reg) w[7],
            w8 = in(zmm_reg) w[8],
            w9 = in(zmm_reg) w[9],
            w10 = in(zmm_reg) w[10],
            w11 = in(zmm_reg) w[11],
            w12 = in(zmm_reg) w[12],
            w13 = in(zmm_reg) w[13],
            w14 = in(zmm_reg) w[14],
            w15 = in(zmm_reg) w[15],
            a0 = in(reg) a[0],
            a1 = in(reg) a[1],
            a2 = in(reg) a[2],
            a3 = in(reg) a[3],
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    s
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

/// The 16 steps of a [`Quants::Crumb3`] block at `blk` (its sign plane at
/// `bits_at`) as 16-bit values: each line's four steps of crumbs widened
/// once, each step less 4 under its sign word. (Formed in the 8-bit domain
/// two steps a register, as `nibble6_steps` does, one token ran at 0.8x.)
///
/// # Safety
/// AVX-512 BW runs; `blk` holds a whole Crumb3 block.
#[inline(always)]
unsafe fn crumb3_steps(blk: *const u8, bits_at: usize, w: &mut [__m512i; 16]) {
    // SAFETY: lines 0..4 of the crumbs and the 16 sign words lie in the block
    // (the layout; caller).
    unsafe {
        crumb_steps(blk, w);
        let (four, signs) = (_mm512_set1_epi16(4), blk.add(bits_at).cast::<u32>());
        for (p, wp) in w.iter_mut().enumerate() {
            *wp = _mm512_mask_sub_epi16(*wp, signs.add(p).read_unaligned(), *wp, four);
        }
    }
}

/// The 16 steps of a [`Quants::Crumb`] block at `blk` as 16-bit values.
///
/// # Safety
/// AVX-512 BW runs; `blk` holds a whole block's crumbs.
#[inline(always)]
unsafe fn crumb_steps(blk: *const u8, w: &mut [__m512i; 16]) {
    // SAFETY: lines 0..4 lie in the block (caller).
    unsafe {
        let three = _mm512_set1_epi16(3);
        for c in 0..4 {
            let raw = _mm512_cvtepu8_epi16(_mm256_loadu_si256(blk.add(32 * c).cast()));
            w[4 * c] = _mm512_and_si512(raw, three);
            w[4 * c + 1] = _mm512_and_si512(_mm512_srli_epi16::<2>(raw), three);
            w[4 * c + 2] = _mm512_and_si512(_mm512_srli_epi16::<4>(raw), three);
            w[4 * c + 3] = _mm512_srli_epi16::<6>(raw);
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn kernel<const MAX: usize, const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
    g: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let format = format_of(Q, OFF, SPLIT, S);
    let (size, scales_at, offsets_at) =
        (format.scale_size(), format.scales_at(), format.offsets_at());
    // The one-token instance knows its count; the other runs `n` in a loop.
    let n = if MAX == 1 { 1 } else { tokens.len() };
    let mut acc = [_mm512_setzero_ps(); MAX];
    // Each token's rows (null past `n`, never read).
    let qa: [*const i16; MAX] =
        std::array::from_fn(|t| tokens.get(t).map_or(std::ptr::null(), |x| x.qa.as_ptr()));
    let da: [*const f32; MAX] =
        std::array::from_fn(|t| tokens.get(t).map_or(std::ptr::null(), |x| x.da.as_ptr()));
    let sa: [*const f32; MAX] =
        std::array::from_fn(|t| tokens.get(t).map_or(std::ptr::null(), |x| x.sa.as_ptr()));
    let sh: [*const f32; MAX] =
        std::array::from_fn(|t| tokens.get(t).map_or(std::ptr::null(), |x| x.sh.as_ptr()));
    let prefetch = prefetches(format);
    // SAFETY: (the whole body) block b lies at g[format.block_at(b)..] and token values at
    // qa[32 b..32 b + 32], both in bounds for b < nb (the caller's contract).
    unsafe {
        let low = _mm512_set1_epi16(0x0F);
        let sixteen = _mm512_set1_epi16(16);
        for b in 0..nb {
            let blk = g.as_ptr().add(format.block_at(b));
            prefetch_ahead(prefetch, format, blk);
            let mut w = [_mm512_setzero_si512(); 16];
            if is_grid(Q) {
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
            } else if Q == CRUMB3 {
                crumb3_steps(blk, format.bits_at(), &mut w);
            } else if Q == CRUMB {
                crumb_steps(blk, &mut w);
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
            let (off, off1) = if OFF {
                let obase = bases16::<S>(bases.add(2 * GROUP_ROWS));
                let off = scales16::<S>(blk.add(offsets_at), obase);
                if SPLIT {
                    (
                        off,
                        scales16::<S>(blk.add(offsets_at + size * GROUP_ROWS), obase),
                    )
                } else {
                    (off, off)
                }
            } else {
                (s0, s0)
            };
            // Token t's products `i` into its lane sums, in the scalar twin's order.
            let mut fold = |t: usize, lo: __m512i, hi: __m512i| {
                let dav = _mm512_set1_ps(*da[t].add(b));
                let a = &mut acc[t];
                if SPLIT {
                    *a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lo), s0), dav, *a);
                    if OFF {
                        *a = _mm512_fmadd_ps(off, _mm512_set1_ps(*sh[t].add(2 * b)), *a);
                    }
                    *a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(hi), s1), dav, *a);
                    if OFF {
                        *a = _mm512_fmadd_ps(off1, _mm512_set1_ps(*sh[t].add(2 * b + 1)), *a);
                    }
                } else {
                    let sum = _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi));
                    *a = _mm512_fmadd_ps(_mm512_mul_ps(sum, s0), dav, *a);
                    if OFF {
                        *a = _mm512_fmadd_ps(off, _mm512_set1_ps(*sa[t].add(b)), *a);
                    }
                }
            };
            let at = |t: usize| qa[t].add(BLOCK * b);
            let mut t = 0;
            while t + 4 <= n {
                let s = block_dots4(&w, [at(t), at(t + 1), at(t + 2), at(t + 3)]);
                for (k, [lo, hi]) in s.into_iter().enumerate() {
                    fold(t + k, lo, hi);
                }
                t += 4;
            }
            for t in t..n {
                let i = block_dots(&w, at(t));
                fold(
                    t,
                    _mm512_add_epi32(i[0], i[1]),
                    _mm512_add_epi32(i[2], i[3]),
                );
            }
        }
        for t in 0..n {
            _mm512_storeu_ps(out[t].as_mut_ptr(), acc[t]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn only_amd_cpus_leave_the_offset_super_block_formats_to_the_hardware_prefetcher() {
        let format = |d| Format::for_dtype(d).expect("a packed format");
        for d in [DType::Q4_K, DType::Q5_K, DType::Q2_K] {
            assert!(!prefetches_on(format(d), true), "{d}");
            assert!(prefetches_on(format(d), false), "{d}");
        }
        for d in [
            DType::Q4_0,
            DType::Q6_K,
            DType::Q8_0,
            DType::IQ4_XS,
            DType::MXFP4,
        ] {
            assert!(
                prefetches_on(format(d), true) && prefetches_on(format(d), false),
                "{d}"
            );
        }
    }
}
