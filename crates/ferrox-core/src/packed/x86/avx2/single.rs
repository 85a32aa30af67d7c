//! The AVX2 build's product of one token (a decode step): each line is
//! unpacked in registers where it is used, and the sums stay in registers.

use std::arch::x86_64::*;

use super::super::super::kernel::TokenActs;
use super::super::super::{BLOCK, GROUP_ROWS};
use super::super::{NIBBLE, NIBBLE6, format_of, prefetch_ahead, prefetches};
use super::{Scales8, add_term, dot_add, line_avx2, rows_in_order, scales_avx2};

/// The `asm!` lines of [`q6_sums`] that multiply a step's values (`{v}`,
/// 32 bytes) by the token's pair at byte `$at` of `{x}` and add the products
/// to the sums (`$flavor`: see `dot_add_asm!`).
macro_rules! q6_step {
    ($flavor:ident, $at:literal) => {
        concat!(
            "vpbroadcastd {p}, dword ptr [{x} + ",
            $at,
            "]\n",
            "vpunpcklbw {t}, {v}, {z}\n",
            "vpunpckhbw {v}, {v}, {z}\n",
            dot_add_asm!($flavor, s0, t, p),
            "\n",
            dot_add_asm!($flavor, s1, v, p),
        )
    };
}

/// One token's sums over the values of Q6_K (`NIBBLE6`) plus 32 (0..63,
/// widened as unsigned: four operations a line fewer than the signed values)
/// over line pairs `from..from + 2` (steps `4 from..4 from + 8`, one half of
/// the block) of the block at `blk`, the token's block at `a`, in part order
/// ([`line_avx2`]). [`single_avx2`] takes the bias back from the sums: 32
/// times the token's integer sum of the half (`TokenActs::hs`). One `asm!`
/// loop of a line pair a turn (written with intrinsics, the unrolled block
/// kept 46 registers' worth of values on the stack).
///
/// # Safety
/// AVX2 runs; `blk` holds a whole Q6_K block whose high bits lie at
/// `bits_at`, and `a` the token's 32 values.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q6_sums<const VNNI: bool>(
    blk: *const u8,
    bits_at: usize,
    a: *const i16,
    from: usize,
) -> [__m256i; 2] {
    let (mut s0, mut s1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    // SAFETY: line pairs from..from + 2 (64 bytes each, and 32 bytes of high
    // bits each) lie in the block, and their pairs (16 bytes a line pair) in
    // the token's block (caller).
    unsafe {
        macro_rules! sums {
            ($flavor:ident) => {
                std::arch::asm!(
                    "2:",
                    "vmovdqu {b}, ymmword ptr [{hb}]",
                    // Line 2k: steps 4k (low nibbles, bits 0-1) and 4k + 1 (high
                    // nibbles, bits 2-3).
                    "vmovdqu {r}, ymmword ptr [{w}]",
                    "vpand {v}, {r}, {m4}",
                    "vpsllw {t}, {b}, 4",
                    "vpand {t}, {t}, {m6}",
                    "vpor {v}, {v}, {t}",
                    q6_step!($flavor, "0"),
                    "vpsrlw {v}, {r}, 4",
                    "vpand {v}, {v}, {m4}",
                    "vpsllw {t}, {b}, 2",
                    "vpand {t}, {t}, {m6}",
                    "vpor {v}, {v}, {t}",
                    q6_step!($flavor, "4"),
                    // Line 2k + 1: steps 4k + 2 (bits 4-5) and 4k + 3 (bits 6-7).
                    "vmovdqu {r}, ymmword ptr [{w} + 32]",
                    "vpand {v}, {r}, {m4}",
                    "vpand {t}, {b}, {m6}",
                    "vpor {v}, {v}, {t}",
                    q6_step!($flavor, "8"),
                    "vpsrlw {v}, {r}, 4",
                    "vpand {v}, {v}, {m4}",
                    "vpsrlw {t}, {b}, 2",
                    "vpand {t}, {t}, {m6}",
                    "vpor {v}, {v}, {t}",
                    q6_step!($flavor, "12"),
                    "add {w}, 64",
                    "add {hb}, 32",
                    "add {x}, 16",
                    "cmp {w}, {end}",
                    "jne 2b",
                    s0 = inout(ymm_reg) s0,
                    s1 = inout(ymm_reg) s1,
                    w = inout(reg) blk.add(64 * from) => _,
                    hb = inout(reg) blk.add(bits_at + 32 * from) => _,
                    x = inout(reg) a.add(8 * from) => _,
                    end = in(reg) blk.add(64 * (from + 2)),
                    m4 = in(ymm_reg) _mm256_set1_epi8(0x0F),
                    m6 = in(ymm_reg) _mm256_set1_epi8(0x30),
                    z = in(ymm_reg) _mm256_setzero_si256(),
                    b = out(ymm_reg) _,
                    r = out(ymm_reg) _,
                    v = out(ymm_reg) _,
                    t = out(ymm_reg) _,
                    p = out(ymm_reg) _,
                    options(pure, readonly, nostack),
                );
            };
        }
        if VNNI {
            sums!(vnni);
        } else {
            sums!(plain);
        }
    }
    [s0, s1]
}

/// One token's exact sums of a block of a 4-bit format without a grid (Q4_K,
/// Q4_0, Q4_1, none split) at `blk`, the token's block at
/// `a`, in row order (rows 0..8, rows 8..16). Each 16 bytes are widened as
/// they are loaded, and each 16-bit lane (a whole byte) gives its low nibble
/// by a mask and its high one by a shift: six operations a line where
/// [`line_avx2`] takes seven, two of them shuffles where it takes four, and
/// no permutation of the sums after. One `asm!` loop of a line a turn
/// (written with intrinsics, the compiler ran the two halves of the rows one
/// after the other, the activations' broadcasts spilled between them).
///
/// # Safety
/// AVX2 runs; `blk` holds a whole block of a nibble format and `a` the
/// token's 32 values.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn nibble_sums<const VNNI: bool>(blk: *const u8, a: *const i16) -> [__m256i; 2] {
    let (mut s0, mut s1, mut s2, mut s3) = (
        _mm256_setzero_si256(),
        _mm256_setzero_si256(),
        _mm256_setzero_si256(),
        _mm256_setzero_si256(),
    );
    // SAFETY: the block's 8 lines (32 bytes each) and the token's 16 pairs are
    // read, nothing else (caller).
    unsafe {
        macro_rules! sums {
            ($flavor:ident) => {
                std::arch::asm!(
                    "2:",
                    "vpmovzxbw {w0}, xmmword ptr [{w}]",
                    "vpmovzxbw {w1}, xmmword ptr [{w} + 16]",
                    "vpbroadcastd {p0}, dword ptr [{x}]",
                    "vpbroadcastd {p1}, dword ptr [{x} + 4]",
                    "vpand {l0}, {w0}, {m}",
                    "vpand {l1}, {w1}, {m}",
                    "vpsrlw {w0}, {w0}, 4",
                    "vpsrlw {w1}, {w1}, 4",
                    dot_add_asm!($flavor, s0, l0, p0),
                    dot_add_asm!($flavor, s1, l1, p0),
                    dot_add_asm!($flavor, s2, w0, p1),
                    dot_add_asm!($flavor, s3, w1, p1),
                    "add {w}, 32",
                    "add {x}, 8",
                    "cmp {w}, {end}",
                    "jne 2b",
                    s0 = inout(ymm_reg) s0,
                    s1 = inout(ymm_reg) s1,
                    s2 = inout(ymm_reg) s2,
                    s3 = inout(ymm_reg) s3,
                    w = inout(reg) blk => _,
                    x = inout(reg) a => _,
                    end = in(reg) blk.add(32 * 8),
                    m = in(ymm_reg) _mm256_set1_epi16(0x0F),
                    w0 = out(ymm_reg) _,
                    w1 = out(ymm_reg) _,
                    l0 = out(ymm_reg) _,
                    l1 = out(ymm_reg) _,
                    p0 = out(ymm_reg) _,
                    p1 = out(ymm_reg) _,
                    options(pure, readonly, nostack),
                );
            };
        }
        if VNNI {
            sums!(vnni);
        } else {
            sums!(plain);
        }
        [_mm256_add_epi32(s0, s2), _mm256_add_epi32(s1, s3)]
    }
}

/// Adds block `b`'s term of one token to `acc` (rows `8h..8h + 8`), from the
/// exact integer sums of its values 0..16 (`lo`) and 16..32 (`hi`): the first
/// half's term, then the second's, for split formats, else the term of their
/// sum ([`add_term`]: the twin's f32 operations in its order).
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
            let (sh0, sh1) = if OFF {
                let sh = tok.sh.as_ptr().add(2 * b);
                (_mm256_set1_ps(*sh), _mm256_set1_ps(*sh.add(1)))
            } else {
                (dav, dav)
            };
            let acc = add_term::<OFF>(acc, lo, sc.s0, dav, sc.off0, sh0);
            add_term::<OFF>(acc, hi, sc.s1, dav, sc.off1, sh1)
        } else {
            let sa = if OFF {
                _mm256_set1_ps(*tok.sa.get_unchecked(b))
            } else {
                dav
            };
            add_term::<OFF>(acc, _mm256_add_epi32(lo, hi), sc.s0, dav, sc.off0, sa)
        }
    }
}

/// The exact sums of one token's values `16q..16q + 16` (lines `4q..4q + 4`
/// of the block at `blk`, the token's block at `a`) in both parts of the rows
/// ([`line_avx2`]'s order). The sums are this function's own locals, and each
/// line pair's parity is known when it is unpacked, so they stay in registers
/// whether or not the loop is unrolled (one `[q][part]` array indexed by
/// `c / 4` kept Q6_K's sums on the stack, a store and a reload every step).
///
/// # Safety
/// AVX2 runs; `blk` holds a whole block of format `(Q, OFF, SPLIT, S)` and `a`
/// the token's 32 values.
#[inline(always)]
unsafe fn half_sums<
    const VNNI: bool,
    const Q: u8,
    const OFF: bool,
    const SPLIT: bool,
    const S: u8,
>(
    blk: *const u8,
    a: *const i16,
    q: usize,
) -> [__m256i; 2] {
    // SAFETY: lines 4q..4q + 4 lie in the block and pairs 8q..8q + 8 in the
    // token's block (caller).
    unsafe {
        let mut sum = [_mm256_setzero_si256(); 2];
        for k in 0..2 {
            for c in [4 * q + 2 * k, 4 * q + 2 * k + 1] {
                let steps = line_avx2::<Q, OFF, SPLIT, S>(blk, c);
                for (e, parts) in steps.iter().enumerate() {
                    let pair =
                        _mm256_set1_epi32(a.add(2 * (2 * c + e)).cast::<i32>().read_unaligned());
                    sum[0] = dot_add::<VNNI>(sum[0], parts[0], pair);
                    sum[1] = dot_add::<VNNI>(sum[1], parts[1], pair);
                }
            }
        }
        sum
    }
}

/// One token's exact sums of the block at `blk` (the token's values at `a`,
/// its integer half sums at `hs`): values 0..16, then 16..32, each as rows
/// 0..8 and 8..16. (The 4-bit formats, unsplit, give the whole block's sums
/// and zeros: [`block_term`] adds the two.)
///
/// # Safety
/// AVX2 runs; `blk` holds a whole block of format `(Q, OFF, SPLIT, S)`, `a`
/// the token's 32 values and `hs` their two half sums.
#[inline(always)]
unsafe fn single_sums<
    const VNNI: bool,
    const Q: u8,
    const OFF: bool,
    const SPLIT: bool,
    const S: u8,
>(
    blk: *const u8,
    a: *const i16,
    hs: *const i32,
) -> [[__m256i; 2]; 2] {
    // SAFETY: the caller's contract.
    unsafe {
        match Q {
            // Row order already.
            NIBBLE => [nibble_sums::<VNNI>(blk, a), [_mm256_setzero_si256(); 2]],
            NIBBLE6 => {
                let bits_at = format_of(Q, OFF, SPLIT, S).bits_at();
                [
                    rows_in_order(less_bias(q6_sums::<VNNI>(blk, bits_at, a, 0), *hs)),
                    rows_in_order(less_bias(q6_sums::<VNNI>(blk, bits_at, a, 2), *hs.add(1))),
                ]
            }
            _ => [
                rows_in_order(half_sums::<VNNI, Q, OFF, SPLIT, S>(blk, a, 0)),
                rows_in_order(half_sums::<VNNI, Q, OFF, SPLIT, S>(blk, a, 1)),
            ],
        }
    }
}

/// `sums` less 32 times `half_sum` in every lane: [`q6_sums`]' sums of
/// biased values made the sums of the values.
#[inline(always)]
unsafe fn less_bias(sums: [__m256i; 2], half_sum: i32) -> [__m256i; 2] {
    // SAFETY: register operations; AVX2 runs (callers).
    unsafe {
        let bias = _mm256_slli_epi32::<5>(_mm256_set1_epi32(half_sum));
        [
            _mm256_sub_epi32(sums[0], bias),
            _mm256_sub_epi32(sums[1], bias),
        ]
    }
}

entries!(
    /// One token (a decode step): each line is unpacked where it is used and
    /// the sums stay in registers.
    single_avx2, single_avx2_vnni => single
    <const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
        g: &[u8],
        nb: usize,
        tok: &TokenActs<'_>,
        out: &mut [f32; GROUP_ROWS]
    )
);

/// The body of [`single_avx2`] and [`single_avx2_vnni`].
///
/// # Safety
/// As for [`single_avx2_vnni`] if `VNNI`, else [`single_avx2`].
#[inline(always)]
unsafe fn single<const VNNI: bool, const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
    g: &[u8],
    nb: usize,
    tok: &TokenActs<'_>,
    out: &mut [f32; GROUP_ROWS],
) {
    let format = format_of(Q, OFF, SPLIT, S);
    let prefetch = prefetches(format);
    // SAFETY: AVX2 runs (caller).
    let mut acc = unsafe { [_mm256_setzero_ps(); 2] };
    // SAFETY: (the whole body) block b lies at g[format.block_at(b)..], the
    // token's values at qa[32 b..32 b + 32] and its half sums at hs[2 b..2 b +
    // 2], all in bounds for b < nb (the caller's contract).
    unsafe {
        for b in 0..nb {
            let blk = g.as_ptr().add(format.block_at(b));
            prefetch_ahead(prefetch, format, blk);
            let a = tok.qa.as_ptr().add(BLOCK * b);
            let [lo, hi] =
                single_sums::<VNNI, Q, OFF, SPLIT, S>(blk, a, tok.hs.as_ptr().add(2 * b));
            for (h, acc) in acc.iter_mut().enumerate() {
                let sc = scales_avx2::<Q, OFF, SPLIT, S>(g, blk, b, h);
                *acc = block_term::<OFF, SPLIT>(*acc, lo[h], hi[h], &sc, tok, b);
            }
        }
        _mm256_storeu_ps(out.as_mut_ptr(), acc[0]);
        _mm256_storeu_ps(out.as_mut_ptr().add(8), acc[1]);
    }
}
