//! NEON build of the group kernel (`packed::kernel::group_portable`), for aarch64.
//!
//! Invariants: one 32-bit lane per weight row, four rows per register. A block's
//! integer dot products are `vmlal_s16` products accumulated in 32-bit lanes (each
//! lane gathers at most 8 products of at most 2^22, no overflow) and paired by
//! `vpaddq_s32`; exact, so their order is free. The f32 steps are the scalar
//! twin's, in its order, as separate multiplies and adds (no fused `vmlaq`).
//!
//! Tested bit for bit against the twin under qemu (`scripts/test-aarch64`). Not
//! chosen by `--activations auto` until measured against the f32 path on aarch64
//! hardware (none here); `--activations int16` runs it.

#![cfg(target_arch = "aarch64")]

use std::arch::aarch64::*;

use super::kernel::{REGISTER_TILE, TokenActs};
use super::layout::{Format, Quants, Scales};
use super::{BLOCK, GROUP_ROWS};

/// The 16 steps of a block, as 32 integers each (values `2p`, `2p + 1` of rows 0..16).
#[inline(always)]
unsafe fn unpack(format: Format, blk: *const u8, w: &mut [[i16; 32]; 16]) {
    // SAFETY: `blk` holds one block of `format` (caller).
    unsafe {
        match format.quants {
            Quants::Nibble | Quants::Nibble5 | Quants::Nibble6 => {
                for c in 0..8 {
                    for half in 0..2 {
                        let b = vld1q_u8(blk.add(32 * c + 16 * half));
                        let (lo, hi) = (vandq_u8(b, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(b));
                        let base = 16 * half;
                        vst1q_s16(
                            w[2 * c].as_mut_ptr().add(base),
                            vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(lo))),
                        );
                        vst1q_s16(
                            w[2 * c].as_mut_ptr().add(base + 8),
                            vreinterpretq_s16_u16(vmovl_high_u8(lo)),
                        );
                        vst1q_s16(
                            w[2 * c + 1].as_mut_ptr().add(base),
                            vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(hi))),
                        );
                        vst1q_s16(
                            w[2 * c + 1].as_mut_ptr().add(base + 8),
                            vreinterpretq_s16_u16(vmovl_high_u8(hi)),
                        );
                    }
                }
                if format.quants == Quants::Nibble5 {
                    add_plane(format, blk, w, 16);
                }
                if format.quants == Quants::Nibble6 {
                    for (p, wp) in w.iter_mut().enumerate() {
                        let line = blk.add(format.bits_at() + 32 * (p / 4));
                        for (i, v) in wp.iter_mut().enumerate() {
                            let two = (*line.add(i) >> (2 * (p % 4))) & 3;
                            *v = (*v | ((two as i16) << 4)) - 32;
                        }
                    }
                }
            }
            Quants::Grid(grid) => {
                let table = vld1q_s8(grid.values().as_ptr());
                for c in 0..8 {
                    for half in 0..2 {
                        let b = vld1q_u8(blk.add(32 * c + 16 * half));
                        let (lo, hi) = (vandq_u8(b, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(b));
                        for (p, idx) in [(2 * c, lo), (2 * c + 1, hi)] {
                            let v = vqtbl1q_s8(table, idx);
                            let at = w[p].as_mut_ptr().add(16 * half);
                            vst1q_s16(at, vmovl_s8(vget_low_s8(v)));
                            vst1q_s16(at.add(8), vmovl_high_s8(v));
                        }
                    }
                }
            }
            Quants::Crumb | Quants::Crumb3 => {
                let three = vdupq_n_u8(3);
                for c in 0..4 {
                    for half in 0..2 {
                        let b = vld1q_u8(blk.add(32 * c + 16 * half));
                        let steps = [
                            vandq_u8(b, three),
                            vandq_u8(vshrq_n_u8::<2>(b), three),
                            vandq_u8(vshrq_n_u8::<4>(b), three),
                            vshrq_n_u8::<6>(b),
                        ];
                        for (k, v) in steps.into_iter().enumerate() {
                            let at = w[4 * c + k].as_mut_ptr().add(16 * half);
                            vst1q_s16(at, vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(v))));
                            vst1q_s16(at.add(8), vreinterpretq_s16_u16(vmovl_high_u8(v)));
                        }
                    }
                }
                if format.quants == Quants::Crumb3 {
                    add_plane(format, blk, w, -4);
                }
            }
            Quants::Byte => {
                for (p, wp) in w.iter_mut().enumerate() {
                    let b = vld1q_s8(blk.add(32 * p).cast());
                    let c = vld1q_s8(blk.add(32 * p + 16).cast());
                    vst1q_s16(wp.as_mut_ptr(), vmovl_s8(vget_low_s8(b)));
                    vst1q_s16(wp.as_mut_ptr().add(8), vmovl_high_s8(b));
                    vst1q_s16(wp.as_mut_ptr().add(16), vmovl_s8(vget_low_s8(c)));
                    vst1q_s16(wp.as_mut_ptr().add(24), vmovl_high_s8(c));
                }
            }
        }
    }
}

/// Adds `weight` to each value whose bit is set in the block's one-bit plane
/// ([`Quants::Nibble5`]'s fifth bits: 16; [`Quants::Crumb3`]'s signs: -4).
#[inline(always)]
unsafe fn add_plane(format: Format, blk: *const u8, w: &mut [[i16; 32]; 16], weight: i16) {
    for (p, wp) in w.iter_mut().enumerate() {
        // SAFETY: the plane's 16 words lie in the block (caller).
        let bits = unsafe {
            blk.add(format.bits_at() + 4 * p)
                .cast::<u32>()
                .read_unaligned()
        };
        for (i, v) in wp.iter_mut().enumerate() {
            *v += ((bits >> i) & 1) as i16 * weight;
        }
    }
}

/// 4 halves at `p`.
#[inline(always)]
unsafe fn four_halves(p: *const u8) -> float32x4_t {
    // SAFETY: 8 bytes at `p` (caller).
    unsafe {
        let v: [f32; 4] = std::array::from_fn(|i| {
            half::f16::from_le_bytes([*p.add(2 * i), *p.add(2 * i + 1)]).to_f32()
        });
        vld1q_f32(v.as_ptr())
    }
}

/// 4 scales (or offsets) of rows `4 s..4 s + 4` stored from `at` (multipliers of
/// `base` for [`Scales::Small`]).
#[inline(always)]
unsafe fn four(
    format: Format,
    blk: *const u8,
    at: usize,
    s: usize,
    base: float32x4_t,
) -> float32x4_t {
    // SAFETY: 4 values at `at` inside the block (caller).
    unsafe {
        match format.scales {
            Scales::Half => four_halves(blk.add(at + 2 * 4 * s)),
            Scales::F32 => vld1q_f32(blk.add(at + 4 * 4 * s).cast()),
            Scales::Small => {
                let p = blk.add(at + 4 * s);
                let m: [f32; 4] = std::array::from_fn(|i| *p.add(i) as i8 as f32);
                vmulq_f32(base, vld1q_f32(m.as_ptr()))
            }
        }
    }
}

/// The bases of rows `4 s..4 s + 4` at `p` (ones for the formats without).
#[inline(always)]
unsafe fn four_bases(format: Format, p: *const u8, s: usize) -> float32x4_t {
    // SAFETY: 32 bytes at `p` when the format has bases (caller).
    unsafe {
        if format.scales == Scales::Small {
            four_halves(p.add(2 * 4 * s))
        } else {
            vdupq_n_f32(1.0)
        }
    }
}

/// # Safety
/// The CPU must run [`crate::isa::Level::Neon`]; `g` holds `nb` blocks of `format`; every token holds
/// `nb` blocks; `out` has a row per token; at most `REGISTER_TILE` tokens.
#[target_feature(enable = "neon")]
pub unsafe fn group(
    format: Format,
    g: &[u8],
    nb: usize,
    tokens: &[TokenActs<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    assert!(tokens.len() <= REGISTER_TILE && out.len() >= tokens.len());
    let size = format.scale_size();
    let mut acc = [[vdupq_n_f32(0.0); 4]; REGISTER_TILE];
    let mut w = [[0i16; 32]; 16];
    // SAFETY: (the whole body) block b lies at g[format.block_at(b)..] and token values at
    // qa[32 b..32 b + 32], both in bounds for b < nb (the caller's contract).
    unsafe {
        for b in 0..nb {
            let blk = g.as_ptr().add(format.block_at(b));
            unpack(format, blk, &mut w);
            let bases = g.as_ptr().add(format.bases_at(b));
            for s in 0..4 {
                let sbase = four_bases(format, bases, s);
                let s0 = four(format, blk, format.scales_at(), s, sbase);
                let s1 = if format.split {
                    four(
                        format,
                        blk,
                        format.scales_at() + size * GROUP_ROWS,
                        s,
                        sbase,
                    )
                } else {
                    s0
                };
                let (off, off1) = if format.offset {
                    let obase = four_bases(format, bases.add(2 * GROUP_ROWS), s);
                    let off = four(format, blk, format.offsets_at(), s, obase);
                    if format.split {
                        let at = format.offsets_at() + size * GROUP_ROWS;
                        (off, four(format, blk, at, s, obase))
                    } else {
                        (off, off)
                    }
                } else {
                    (s0, s0)
                };
                for (t, tok) in tokens.iter().enumerate() {
                    let a = tok.qa.as_ptr().add(BLOCK * b).cast::<i32>();
                    // Per half of the block: products of even and odd values.
                    let mut part = [[vdupq_n_s32(0); 2]; 2];
                    for p in 0..16 {
                        let wv = vld1q_s16(w[p].as_ptr().add(8 * s));
                        let av = vreinterpretq_s16_s32(vdupq_n_s32(a.add(p).read_unaligned()));
                        let h = &mut part[p / 8];
                        h[0] = vmlal_s16(h[0], vget_low_s16(wv), vget_low_s16(av));
                        h[1] = vmlal_high_s16(h[1], wv, av);
                    }
                    let lo = vpaddq_s32(part[0][0], part[0][1]);
                    let hi = vpaddq_s32(part[1][0], part[1][1]);
                    let da = *tok.da.get_unchecked(b);
                    let a = &mut acc[t][s];
                    if format.split {
                        *a = vfmaq_n_f32(*a, vmulq_f32(vcvtq_f32_s32(lo), s0), da);
                        if format.offset {
                            *a = vfmaq_n_f32(*a, off, *tok.sh.get_unchecked(2 * b));
                        }
                        *a = vfmaq_n_f32(*a, vmulq_f32(vcvtq_f32_s32(hi), s1), da);
                        if format.offset {
                            *a = vfmaq_n_f32(*a, off1, *tok.sh.get_unchecked(2 * b + 1));
                        }
                    } else {
                        let sum = vcvtq_f32_s32(vaddq_s32(lo, hi));
                        *a = vfmaq_n_f32(*a, vmulq_f32(sum, s0), da);
                        if format.offset {
                            *a = vfmaq_n_f32(*a, off, *tok.sa.get_unchecked(b));
                        }
                    }
                }
            }
        }
        for (t, o) in out.iter_mut().enumerate().take(tokens.len()) {
            for s in 0..4 {
                vst1q_f32(o.as_mut_ptr().add(4 * s), acc[t][s]);
            }
        }
    }
}
