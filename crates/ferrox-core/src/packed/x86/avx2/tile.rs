//! The AVX2 build's product of two tokens and more: two tokens unpack each
//! line in registers ([`few_avx2`]); more share a block unpacked once into L1
//! ([`tile_avx2`]), [`SUB_TILE`] tokens' sums at a time in registers
//! ([`VNNI_SUB_TILE`] with AVX-VNNI).

use std::arch::x86_64::*;

use super::super::super::kernel::{TOKEN_TILE, TokenActs};
use super::super::super::{BLOCK, GROUP_ROWS};
use super::super::{format_of, prefetch_ahead, prefetches};
use super::{add_term, dot_add, line_avx2, scales_avx2};

/// The exact sums of `K` tokens' values over lines `FROM..TO` of the block at
/// `blk` (steps `2 FROM..2 TO`), token `t`'s block at `a[t]`, in part order
/// ([`line_avx2`]); the rest of the result zero. Each line is unpacked in
/// registers once for the tokens, as `single::half_sums` does for one.
///
/// # Safety
/// AVX2 runs; `blk` holds a whole block of format `(Q, OFF, SPLIT, S)` and
/// `a[..K]` point at the tokens' 32 values.
#[inline(always)]
unsafe fn few_sums<
    const VNNI: bool,
    const K: usize,
    const FROM: usize,
    const TO: usize,
    const Q: u8,
    const OFF: bool,
    const SPLIT: bool,
    const S: u8,
>(
    blk: *const u8,
    a: &[*const i16; SUB_TILE],
) -> [[__m256i; 2]; SUB_TILE] {
    const {
        assert!(
            K <= SUB_TILE && FROM < TO && TO <= 8 && FROM.is_multiple_of(2) && TO.is_multiple_of(2)
        )
    };
    // SAFETY: lines FROM..TO lie in the block and their pairs in each token's
    // block (caller).
    unsafe {
        let mut sum = [[_mm256_setzero_si256(); 2]; SUB_TILE];
        // A turn takes a pair of lines, so that each line's parity is known
        // where it is unpacked (Q6_K's and the 2-bit formats' bits depend on
        // it) whether or not the compiler unrolls the turns.
        for k in FROM / 2..TO / 2 {
            for c in [2 * k, 2 * k + 1] {
                let steps = line_avx2::<Q, OFF, SPLIT, S>(blk, c);
                for (e, parts) in steps.iter().enumerate() {
                    for (sum, a) in sum.iter_mut().zip(a).take(K) {
                        let pair = _mm256_set1_epi32(
                            a.add(2 * (2 * c + e)).cast::<i32>().read_unaligned(),
                        );
                        sum[0] = dot_add::<VNNI>(sum[0], parts[0], pair);
                        sum[1] = dot_add::<VNNI>(sum[1], parts[1], pair);
                    }
                }
            }
        }
        sum
    }
}

entries!(
    /// `K` tokens, two where it is called (a mixture's expert, two clients'
    /// decode step, a draft of one): each line is unpacked in registers where it
    /// is used, as for one token, and the tokens' sums stay in registers. Terms
    /// are added as [`tile_avx2`] adds them (part order, a split format's halves
    /// in turn).
    ///
    /// Staging the block in L1 ([`tile_avx2`]) shares its 32 stores a block among
    /// too few products for two tokens. On a Zen 4, one thread, `matmul_speed
    /// 2048 4096 2`, staged / this way, GMAC/s: Q4_K 38-40 / 44-46, Q8_0 41 /
    /// 47-52, Q6_K 32-33 / 34-35. Three tokens ran faster this way from L3 (Q4_K
    /// 44 / 50) but slower from memory (`matmul_speed 32768 4096 3`: Q4_K 38.4 /
    /// 36.7, Q6_K 38.5 / 34.6), as did the Llama-1B's decode of three sequences
    /// (56 / 52 t/s), so three stay staged.
    few_avx2, few_avx2_vnni => few
    <const K: usize, const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
        g: &[u8],
        nb: usize,
        tokens: &[TokenActs<'_>],
        out: &mut [[f32; GROUP_ROWS]]
    )
);

/// The body of [`few_avx2`] and [`few_avx2_vnni`].
///
/// # Safety
/// As for [`few_avx2_vnni`] if `VNNI`, else [`few_avx2`].
#[inline(always)]
unsafe fn few<
    const VNNI: bool,
    const K: usize,
    const Q: u8,
    const OFF: bool,
    const SPLIT: bool,
    const S: u8,
>(
    g: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    assert!(
        tokens.len() == K && out.len() >= K && K <= SUB_TILE,
        "{} tokens in a call for {K}",
        tokens.len()
    );
    let format = format_of(Q, OFF, SPLIT, S);
    let prefetch = prefetches(format);
    let rows = TokenRows::new::<SPLIT>(tokens);
    // SAFETY: AVX2 runs (caller).
    let mut acc = unsafe { [[_mm256_setzero_ps(); 2]; K] };
    // SAFETY: (the whole body) block b lies at g[format.block_at(b)..] and
    // each token's values at qa[32 b..32 b + 32], both in bounds for b < nb
    // (the caller's contract); the K tokens are rows 0..K of `rows`.
    unsafe {
        for b in 0..nb {
            let blk = g.as_ptr().add(format.block_at(b));
            prefetch_ahead(prefetch, format, blk);
            let a: [*const i16; SUB_TILE] =
                std::array::from_fn(|t| rows.qa.get_unchecked(t).add(BLOCK * b));
            let sc = part_scales::<Q, OFF, SPLIT, S>(g, blk, b);
            if SPLIT {
                let lo = few_sums::<VNNI, K, 0, 4, Q, OFF, SPLIT, S>(blk, &a);
                add_half::<K, OFF, SPLIT>(&mut acc, &rows, 0, K, &lo, &sc, b, 0);
                let hi = few_sums::<VNNI, K, 4, 8, Q, OFF, SPLIT, S>(blk, &a);
                add_half::<K, OFF, SPLIT>(&mut acc, &rows, 0, K, &hi, &sc, b, 1);
            } else {
                let sums = few_sums::<VNNI, K, 0, 8, Q, OFF, SPLIT, S>(blk, &a);
                add_half::<K, OFF, SPLIT>(&mut acc, &rows, 0, K, &sums, &sc, b, 0);
            }
        }
        for (acc, out) in acc.iter().zip(out.iter_mut()) {
            let rows = swap_order(*acc);
            _mm256_storeu_ps(out.as_mut_ptr(), rows[0]);
            _mm256_storeu_ps(out.as_mut_ptr().add(8), rows[1]);
        }
    }
}

/// Tokens a register tile of [`tile_avx2`] sums at once: 4 tokens times 16
/// rows are 8 integer sums, which with a step's two registers of weights and
/// two for the products fit AVX2's 16 registers (8 tokens spilled the sums to
/// the stack).
const SUB_TILE: usize = 4;

/// Tokens a register tile sums at once with AVX-VNNI: each token's 16 rows
/// take 4 registers (`tile_sums_vnni!`), so 3 tokens and a step's three
/// working registers fill the 16. At most [`SUB_TILE`], which sizes the
/// sub-tiles' arrays.
const VNNI_SUB_TILE: usize = 3;

/// Two registers of 8 rows (rows 0..8, 8..16) in [`line_avx2`]'s part order
/// (part 0 rows 0..4 and 8..12, part 1 rows 4..8 and 12..16), or back: the
/// permutation is its own inverse.
#[inline(always)]
unsafe fn swap_order(x: [__m256; 2]) -> [__m256; 2] {
    // SAFETY: register operations; AVX2 runs (callers).
    unsafe {
        [
            _mm256_permute2f128_ps::<0x20>(x[0], x[1]),
            _mm256_permute2f128_ps::<0x31>(x[0], x[1]),
        ]
    }
}

/// A block's scales and offsets in part order, per half of the values (the
/// second half's only for split formats): what each token's sums of the block
/// are multiplied by in [`tile_avx2`], permuted once per block so that no
/// token's sums are.
struct PartScales {
    scale: [[__m256; 2]; 2],
    offset: [[__m256; 2]; 2],
}

/// [`PartScales`] of block `b` (at `blk`) of group `g`.
///
/// # Safety
/// As for [`scales_avx2`].
#[inline(always)]
unsafe fn part_scales<const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
    g: &[u8],
    blk: *const u8,
    b: usize,
) -> PartScales {
    // SAFETY: the caller's contract.
    unsafe {
        // No closure (`[0, 1].map(..)`): see `line_avx2`.
        let r0 = scales_avx2::<Q, OFF, SPLIT, S>(g, blk, b, 0);
        let r1 = scales_avx2::<Q, OFF, SPLIT, S>(g, blk, b, 1);
        PartScales {
            scale: [swap_order([r0.s0, r1.s0]), swap_order([r0.s1, r1.s1])],
            offset: [
                swap_order([r0.off0, r1.off0]),
                swap_order([r0.off1, r1.off1]),
            ],
        }
    }
}

/// Defines `$name::<FROM, TO>(steps, a)`: the exact sums of steps `FROM..TO`
/// of one block (`steps[part][p]`, unpacked) for the tokens `$k` of a
/// sub-tile (the token's block at `a[k]`), per token and part (the rest of
/// the result zero). One `asm!` loop of a step a turn (index `i = 4 p`): the
/// step's two registers of weights are loaded once for the tokens, each
/// token's pair broadcast from memory, and the sums stay in registers.
/// Written with intrinsics and constant bounds, the compiler unrolled the
/// steps, hoisted their loads and spilled registers. Loading the weights as
/// `vpmaddwd`'s memory operand, once per token, was slower on a Zen 4 (Q4_K 53
/// against 58 GMAC/s a thread, IQ4_XS 55 against 60).
macro_rules! tile_sums {
    ($(#[$doc:meta])* $name:ident: $($k:literal => $s0:ident, $s1:ident, $a:ident);+) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// AVX2 runs; each `a[k]` used points at a token's 32 values.
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn $name<const FROM: usize, const TO: usize>(
            steps: &[[__m256i; 16]; 2],
            a: &[*const i16; SUB_TILE],
        ) -> [[__m256i; 2]; SUB_TILE] {
            const { assert!(FROM < TO && TO <= 16) };
            let mut s = [[_mm256_setzero_si256(); 2]; SUB_TILE];
            // SAFETY: the loop reads steps FROM..TO of `steps` and pairs
            // FROM..TO of each token's block (4 bytes at a[k] + 4 p): in
            // bounds (caller).
            unsafe {
                std::arch::asm!(
                    "2:",
                    "vmovdqa {w0}, ymmword ptr [{s} + 8*{i}]",
                    "vmovdqa {w1}, ymmword ptr [{s} + 8*{i} + 512]",
                    $(
                        concat!("vpbroadcastd {t}, dword ptr [{", stringify!($a), "} + {i}]"),
                        "vpmaddwd {x}, {w0}, {t}",
                        concat!("vpaddd {", stringify!($s0), "}, {", stringify!($s0), "}, {x}"),
                        "vpmaddwd {t}, {w1}, {t}",
                        concat!("vpaddd {", stringify!($s1), "}, {", stringify!($s1), "}, {t}"),
                    )+
                    "add {i}, 4",
                    "cmp {i}, {end}",
                    "jne 2b",
                    $(
                        $s0 = inout(ymm_reg) s[$k][0],
                        $s1 = inout(ymm_reg) s[$k][1],
                        $a = in(reg) a[$k],
                    )+
                    w0 = out(ymm_reg) _,
                    w1 = out(ymm_reg) _,
                    t = out(ymm_reg) _,
                    x = out(ymm_reg) _,
                    s = in(reg) steps.as_ptr(),
                    i = inout(reg) 4 * FROM => _,
                    end = in(reg) 4 * TO,
                    options(pure, readonly, nostack),
                );
            }
            s
        }
    };
}

tile_sums!(
    /// Four tokens: a whole sub-tile.
    sums4: 0 => s00, s01, a0; 1 => s10, s11, a1; 2 => s20, s21, a2; 3 => s30, s31, a3
);

tile_sums!(
    /// Three tokens (a sub-tile's last, where fewer than four remain: a
    /// mixture's experts see a few tokens each).
    sums3: 0 => s00, s01, a0; 1 => s10, s11, a1; 2 => s20, s21, a2
);

tile_sums!(
    /// Two tokens.
    sums2: 0 => s00, s01, a0; 1 => s10, s11, a1
);

tile_sums!(
    /// One token.
    sums1: 0 => s00, s01, a0
);

/// Defines `$name::<FROM, TO>(steps, a)`: [`tile_sums!`]'s sums with
/// AVX-VNNI, each token's sums in two sets of registers, one for the even
/// steps and one for the odd, added at the end (the same integers): one set
/// would chain each register's `vpdpwssd`s, five cycles apart, and at four
/// tokens the loop waits on them.
macro_rules! tile_sums_vnni {
    ($(#[$doc:meta])* $name:ident: $($k:literal => $e0:ident, $e1:ident, $o0:ident, $o1:ident, $a:ident);+) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// AVX2 and AVX-VNNI run; each `a[k]` used points at a token's 32
        /// values.
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn $name<const FROM: usize, const TO: usize>(
            steps: &[[__m256i; 16]; 2],
            a: &[*const i16; SUB_TILE],
        ) -> [[__m256i; 2]; SUB_TILE] {
            const { assert!(FROM < TO && TO <= 16 && FROM.is_multiple_of(2) && TO.is_multiple_of(2)) };
            let mut s = [[_mm256_setzero_si256(); 2]; SUB_TILE];
            let mut odd = [[_mm256_setzero_si256(); 2]; SUB_TILE];
            // SAFETY: the loop reads steps FROM..TO of `steps` and pairs
            // FROM..TO of each token's block: in bounds (caller).
            unsafe {
                std::arch::asm!(
                    "2:",
                    "vmovdqa {w0}, ymmword ptr [{s} + 8*{i}]",
                    "vmovdqa {w1}, ymmword ptr [{s} + 8*{i} + 512]",
                    $(
                        concat!("vpbroadcastd {t}, dword ptr [{", stringify!($a), "} + {i}]"),
                        dot_add_asm!(vnni, $e0, w0, t),
                        dot_add_asm!(vnni, $e1, w1, t),
                    )+
                    "vmovdqa {w0}, ymmword ptr [{s} + 8*{i} + 32]",
                    "vmovdqa {w1}, ymmword ptr [{s} + 8*{i} + 544]",
                    $(
                        concat!("vpbroadcastd {t}, dword ptr [{", stringify!($a), "} + {i} + 4]"),
                        dot_add_asm!(vnni, $o0, w0, t),
                        dot_add_asm!(vnni, $o1, w1, t),
                    )+
                    "add {i}, 8",
                    "cmp {i}, {end}",
                    "jne 2b",
                    $(
                        $e0 = inout(ymm_reg) s[$k][0],
                        $e1 = inout(ymm_reg) s[$k][1],
                        $o0 = inout(ymm_reg) odd[$k][0],
                        $o1 = inout(ymm_reg) odd[$k][1],
                        $a = in(reg) a[$k],
                    )+
                    w0 = out(ymm_reg) _,
                    w1 = out(ymm_reg) _,
                    t = out(ymm_reg) _,
                    s = in(reg) steps.as_ptr(),
                    i = inout(reg) 4 * FROM => _,
                    end = in(reg) 4 * TO,
                    options(pure, readonly, nostack),
                );
                for (s, odd) in s.iter_mut().zip(odd) {
                    s[0] = _mm256_add_epi32(s[0], odd[0]);
                    s[1] = _mm256_add_epi32(s[1], odd[1]);
                }
            }
            s
        }
    };
}

tile_sums_vnni!(
    /// Three tokens: a whole sub-tile with AVX-VNNI.
    vnni3: 0 => e00, e01, o00, o01, a0; 1 => e10, e11, o10, o11, a1; 2 => e20, e21, o20, o21, a2
);

tile_sums_vnni!(
    /// Two tokens.
    vnni2: 0 => e00, e01, o00, o01, a0; 1 => e10, e11, o10, o11, a1
);

tile_sums_vnni!(
    /// One token.
    vnni1: 0 => e00, e01, o00, o01, a0
);

/// The sums of a sub-tile's first `K` tokens (1 to [`SUB_TILE`], to
/// [`VNNI_SUB_TILE`] with AVX-VNNI), each count its own loop.
///
/// # Safety
/// AVX2 runs; `a[..K]` point at the tokens' 32 values.
#[inline(always)]
unsafe fn tile_sums<const VNNI: bool, const K: usize, const FROM: usize, const TO: usize>(
    steps: &[[__m256i; 16]; 2],
    a: &[*const i16; SUB_TILE],
) -> [[__m256i; 2]; SUB_TILE] {
    // SAFETY: the caller's contract.
    unsafe {
        if VNNI {
            assert!(K <= VNNI_SUB_TILE, "{K} tokens in a sub-tile of AVX-VNNI's");
            return match K {
                1 => vnni1::<FROM, TO>(steps, a),
                2 => vnni2::<FROM, TO>(steps, a),
                _ => vnni3::<FROM, TO>(steps, a),
            };
        }
        match K {
            1 => sums1::<FROM, TO>(steps, a),
            2 => sums2::<FROM, TO>(steps, a),
            3 => sums3::<FROM, TO>(steps, a),
            _ => sums4::<FROM, TO>(steps, a),
        }
    }
}

/// Adds block `b`'s terms of tokens `t0..t0 + K` to their accumulators: the
/// sums of each half in turn for split formats, of the whole block otherwise
/// (the twin adds the halves' exact sums: the same integer). One instance per
/// count, so that no sums pass between the counts' loops in memory.
///
/// # Safety
/// As for [`add_half`] with `live = K`, and `a[..K]` point at the tokens'
/// block `b`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sub_tile<const VNNI: bool, const K: usize, const OFF: bool, const SPLIT: bool>(
    acc: &mut [[__m256; 2]; TOKEN_TILE],
    rows: &TokenRows,
    t0: usize,
    steps: &[[__m256i; 16]; 2],
    a: &[*const i16; SUB_TILE],
    sc: &PartScales,
    b: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        if SPLIT {
            let lo = tile_sums::<VNNI, K, 0, 8>(steps, a);
            add_half::<TOKEN_TILE, OFF, SPLIT>(acc, rows, t0, K, &lo, sc, b, 0);
            let hi = tile_sums::<VNNI, K, 8, 16>(steps, a);
            add_half::<TOKEN_TILE, OFF, SPLIT>(acc, rows, t0, K, &hi, sc, b, 1);
        } else {
            let sums = tile_sums::<VNNI, K, 0, 16>(steps, a);
            add_half::<TOKEN_TILE, OFF, SPLIT>(acc, rows, t0, K, &sums, sc, b, 0);
        }
    }
}

/// The call's tokens as pointers: their activations, block scales, and the
/// sums their offsets take (block sums, or half-block sums for split formats;
/// unused without offsets). Those past the `n` tokens repeat the last: a short
/// sub-tile forms their pointers and never reads through them.
struct TokenRows {
    qa: [*const i16; TOKEN_TILE],
    da: [*const f32; TOKEN_TILE],
    x: [*const f32; TOKEN_TILE],
}

impl TokenRows {
    fn new<const SPLIT: bool>(tokens: &[TokenActs<'_>]) -> Self {
        let at = |t: usize| &tokens[t.min(tokens.len() - 1)];
        TokenRows {
            qa: std::array::from_fn(|t| at(t).qa.as_ptr()),
            da: std::array::from_fn(|t| at(t).da.as_ptr()),
            x: std::array::from_fn(|t| {
                if SPLIT {
                    at(t).sh.as_ptr()
                } else {
                    at(t).sa.as_ptr()
                }
            }),
        }
    }
}

/// Adds half `half` of block `b` (the whole block for unsplit formats) to the
/// accumulators of tokens `t0..t0 + live`, from their sums ([`tile_sums()`]):
/// the twin's f32 operations in its order.
///
/// # Safety
/// AVX2 runs; `t0 + live <= N <= TOKEN_TILE`, `live <= SUB_TILE`, and the
/// tokens hold block `b` (and its half sums for split offsets).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn add_half<const N: usize, const OFF: bool, const SPLIT: bool>(
    acc: &mut [[__m256; 2]; N],
    rows: &TokenRows,
    t0: usize,
    live: usize,
    sums: &[[__m256i; 2]; SUB_TILE],
    sc: &PartScales,
    b: usize,
    half: usize,
) {
    // SAFETY: t0 + i < N <= TOKEN_TILE, and the tokens' scales and sums hold block b
    // (caller).
    unsafe {
        // Unrolled over the sub-tile, so that each sum is a register.
        for (i, sum) in sums.iter().enumerate().take(live) {
            let t = t0 + i;
            let da = _mm256_set1_ps(*rows.da.get_unchecked(t).add(b));
            let x = match (OFF, SPLIT) {
                (false, _) => da,
                (true, true) => _mm256_set1_ps(*rows.x.get_unchecked(t).add(2 * b + half)),
                (true, false) => _mm256_set1_ps(*rows.x.get_unchecked(t).add(b)),
            };
            let acc = acc.get_unchecked_mut(t);
            for part in 0..2 {
                acc[part] = add_term::<OFF>(
                    acc[part],
                    sum[part],
                    sc.scale[half][part],
                    da,
                    sc.offset[half][part],
                    x,
                );
            }
        }
    }
}

entries!(
    /// Several tokens: each block is unpacked once into 1 KiB of 16-bit steps
    /// (L1), then multiplied [`SUB_TILE`] tokens at a time ([`VNNI_SUB_TILE`]
    /// with AVX-VNNI) with every sum in a register. A split format's two halves
    /// (steps 0..8, then 8..16) run in turn, each half's term added to the
    /// token's accumulators as soon as its sums are done, as the twin adds the
    /// first half's term, then the second's.
    /// (Each part of the rows on its own broadcast every activation pair twice:
    /// Q6_K ran at 38 GMAC/s a thread on a Zen 4, 51 without it.) Sums, scales and
    /// accumulators stay in part order; rows are put in order once, at the end.
    tile_avx2, tile_avx2_vnni => tile
    <const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
        g: &[u8],
        nb: usize,
        tokens: &[TokenActs<'_>],
        out: &mut [[f32; GROUP_ROWS]]
    )
);

/// The body of [`tile_avx2`] and [`tile_avx2_vnni`].
///
/// # Safety
/// As for [`tile_avx2_vnni`] if `VNNI`, else [`tile_avx2`].
#[inline(always)]
unsafe fn tile<const VNNI: bool, const Q: u8, const OFF: bool, const SPLIT: bool, const S: u8>(
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
    let prefetch = prefetches(format);
    let rows = TokenRows::new::<SPLIT>(tokens);
    // SAFETY: AVX2 runs (caller).
    let mut acc = unsafe { [[_mm256_setzero_ps(); 2]; TOKEN_TILE] };
    // steps[part][p]: step p of the rows of `part` (see `line_avx2`).
    // SAFETY: AVX2 runs (caller).
    let mut steps = unsafe { [[_mm256_setzero_si256(); 16]; 2] };
    // SAFETY: (the whole body) block b lies at g[format.block_at(b)..] and token
    // values at qa[32 b..32 b + 32], both in bounds for b < nb (the caller's
    // contract); a sub-tile's tokens t0..t0 + live lie below n <= TOKEN_TILE,
    // and the pointers past them (clamped to the last row, whose entries
    // repeat the last token) are never read.
    unsafe {
        for b in 0..nb {
            let blk = g.as_ptr().add(format.block_at(b));
            prefetch_ahead(prefetch, format, blk);
            for c in 0..8 {
                let line = line_avx2::<Q, OFF, SPLIT, S>(blk, c);
                for (e, parts) in line.into_iter().enumerate() {
                    steps[0][2 * c + e] = parts[0];
                    steps[1][2 * c + e] = parts[1];
                }
            }
            let sc = part_scales::<Q, OFF, SPLIT, S>(g, blk, b);
            // AVX-VNNI's sums take two sets of registers a token (`tile_sums_vnni!`).
            let sub = if VNNI { VNNI_SUB_TILE } else { SUB_TILE };
            for t0 in (0..n).step_by(sub) {
                let a: [*const i16; SUB_TILE] = std::array::from_fn(|i| {
                    let t = (t0 + i).min(TOKEN_TILE - 1);
                    rows.qa.get_unchecked(t).add(BLOCK * b)
                });
                let (acc, sc) = (&mut acc, &sc);
                match (n - t0).min(sub) {
                    1 => sub_tile::<VNNI, 1, OFF, SPLIT>(acc, &rows, t0, &steps, &a, sc, b),
                    2 => sub_tile::<VNNI, 2, OFF, SPLIT>(acc, &rows, t0, &steps, &a, sc, b),
                    3 => sub_tile::<VNNI, 3, OFF, SPLIT>(acc, &rows, t0, &steps, &a, sc, b),
                    _ => sub_tile::<VNNI, SUB_TILE, OFF, SPLIT>(acc, &rows, t0, &steps, &a, sc, b),
                }
            }
        }
        for (acc, out) in acc.iter().zip(out.iter_mut()).take(n) {
            let rows = swap_order(*acc);
            _mm256_storeu_ps(out.as_mut_ptr(), rows[0]);
            _mm256_storeu_ps(out.as_mut_ptr().add(8), rows[1]);
        }
    }
}
