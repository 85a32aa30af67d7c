//! The bytes of one pool's pages: f32 as they are, or a ggml encoding (f16;
//! the Q8_0 and Q4_0 blocks of each head's vector rotated), written and
//! widened back exactly.

use ferrox_core::DType;
use ferrox_core::kernels::fast;
use ferrox_core::ops::prefetch::read_soon;
use half::f16;
use half::slice::HalfFloatSliceExt;

use super::KvElement;

/// The buffers of one pool's pages, by id, allocated on first write.
pub(super) struct PageBuffers<T> {
    /// Elements per page.
    floats: usize,
    /// `[page id]`
    pub(super) pages: Vec<Option<Box<[T]>>>,
}

impl<T: Copy + Default> PageBuffers<T> {
    pub(super) fn new(floats: usize) -> PageBuffers<T> {
        PageBuffers {
            floats,
            pages: Vec::new(),
        }
    }

    pub(super) fn page_mut(&mut self, id: u32) -> &mut [T] {
        let i = id as usize;
        if i >= self.pages.len() {
            self.pages.resize_with(i + 1, || None);
        }
        self.pages[i].get_or_insert_with(|| vec![T::default(); self.floats].into_boxed_slice())
    }

    /// Pages `a` and `b`, two distinct ids, both allocated.
    pub(super) fn pair_mut(&mut self, a: u32, b: u32) -> (&mut [T], &mut [T]) {
        assert_ne!(a, b, "a pair of pages is two pages");
        self.page_mut(a);
        self.page_mut(b);
        let (lo, hi) = (a.min(b) as usize, a.max(b) as usize);
        let (left, right) = self.pages.split_at_mut(hi);
        let low = left[lo].as_deref_mut().expect("allocated");
        let high = right[0].as_deref_mut().expect("allocated");
        if a < b { (low, high) } else { (high, low) }
    }

    pub(super) fn page(&self, id: u32) -> &[T] {
        self.pages
            .get(id as usize)
            .and_then(|p| p.as_deref())
            .expect("a page is written before it is read")
    }
}

/// One pool's KV pages, in the cache's element type.
pub(super) enum KvPages {
    F32(PageBuffers<f32>),
    /// Values in a ggml encoding: F16 (two little-endian bytes each), or the
    /// blocks of Q8_0 / Q4_0 (value `i` in block `i / 32`).
    Encoded(DType, PageBuffers<u8>),
}

impl KvPages {
    pub(super) fn new(element: KvElement, floats: usize) -> KvPages {
        match element {
            KvElement::F32 => KvPages::F32(PageBuffers::new(floats)),
            _ => KvPages::Encoded(element.dtype(), PageBuffers::new(element.row_bytes(floats))),
        }
    }

    /// Whether the pages hold their vectors rotated ([`rotate`]).
    fn rotated(&self) -> bool {
        matches!(self, KvPages::Encoded(t, _) if rotated(*t))
    }

    /// Stores `values` at `at` of page `id`, less `offset` (a key's
    /// [`super::KeyOffsets`]: rotated elements only, which
    /// `KvStore::with_key_offsets` checks once, so every write need not).
    pub(super) fn put(&mut self, id: u32, at: usize, values: &[f32], offset: Option<&[f32]>) {
        debug_assert!(
            offset.is_none() || self.rotated(),
            "only rotated KV pages subtract key offsets"
        );
        match self {
            KvPages::F32(b) => b.page_mut(id)[at..at + values.len()].copy_from_slice(values),
            KvPages::Encoded(t, b) => {
                let (first, bytes) = encoded_span(*t, at, values.len());
                let out = &mut b.page_mut(id)[first..first + bytes];
                if rotated(*t) {
                    ROTATED.with_borrow_mut(|r| {
                        r.clear();
                        match offset {
                            Some(c) => r.extend(values.iter().zip(c).map(|(v, c)| v - c)),
                            None => r.extend_from_slice(values),
                        }
                        rotate(r);
                        encode(*t, r, out);
                    });
                } else {
                    encode(*t, values, out);
                }
            }
        }
    }

    /// Hints that `n` elements at `at` of page `id` are read soon
    /// ([`read_soon`]).
    pub(super) fn prefetch(&self, id: u32, at: usize, n: usize) {
        match self {
            KvPages::F32(b) => read_soon(&b.page(id)[at..at + n]),
            KvPages::Encoded(t, b) => {
                let (first, bytes) = encoded_span(*t, at, n);
                read_soon(&b.page(id)[first..first + bytes]);
            }
        }
    }

    /// Writes the `out.len()` elements at `at` of page `id` to `out` as f32
    /// (widened from their encoding, exactly).
    pub(super) fn read_into(&self, id: u32, at: usize, out: &mut [f32]) {
        let n = out.len();
        match self {
            KvPages::F32(b) => out.copy_from_slice(&b.page(id)[at..at + n]),
            KvPages::Encoded(t, b) => {
                let (first, bytes) = encoded_span(*t, at, n);
                // Exact: every f16 is an f32, and each block value is its
                // block's f16 scale times its code (the kernels' widening).
                fast::dequantize_row(*t, &b.page(id)[first..first + bytes], out);
            }
        }
    }

    /// Calls `f` with `n` elements at `at` of page `id` as f32 (widened into
    /// `scratch` from their encoding).
    pub(super) fn with<R>(
        &self,
        id: u32,
        at: usize,
        n: usize,
        scratch: &mut Vec<f32>,
        f: impl FnOnce(&[f32]) -> R,
    ) -> R {
        match self {
            KvPages::F32(b) => f(&b.page(id)[at..at + n]),
            KvPages::Encoded(..) => {
                scratch.resize(n, 0.0);
                self.read_into(id, at, &mut scratch[..n]);
                f(&scratch[..n])
            }
        }
    }
}

thread_local! {
    /// One head's vector, rotated before it is quantized (every position of
    /// every layer is written through it, so it is not allocated each time).
    static ROTATED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether vectors are rotated ([`rotate`]) before they are quantized as `t`
/// (the 8- and 4-bit blocks; f16 is not).
pub(super) fn rotated(t: DType) -> bool {
    matches!(t, DType::Q8_0 | DType::Q4_0)
}

/// Rotates one head's key, value or query vector in place: fixed sign flips,
/// then an orthonormal Walsh-Hadamard transform of each 32-value block (the
/// ggml block the cache quantizes). It keeps dot products, and
/// [`rotate_back`] undoes it. A channel far larger than the rest of its
/// block (keys have them) is spread over the block before the block's scale
/// is taken from its largest value: on SmolLM2 and Gemma 3 an 8-bit cache
/// loses about half as much (0.034-0.037 -> 0.017-0.020 nats, mean top-5).
/// Sizes: whole-head transforms (64, 256) were 0.017 / 0.027, plain
/// 32-blocks without the signs 0.020 / 0.020.
pub fn rotate(v: &mut [f32]) {
    flip_signs(v);
    v.chunks_exact_mut(rotation_piece(v.len()))
        .for_each(hadamard);
}

/// The inverse of [`rotate`].
pub fn rotate_back(v: &mut [f32]) {
    v.chunks_exact_mut(rotation_piece(v.len()))
        .for_each(hadamard);
    flip_signs(v);
}

/// The values rotated together: a ggml block (32), or the largest power of
/// two dividing a shorter or odd length.
fn rotation_piece(len: usize) -> usize {
    (1usize << len.trailing_zeros().min(5)).max(1)
}

/// Flips the sign of the values at fixed pseudo-random indices (the same for
/// every vector), so that no structured vector (a constant run, say) is
/// turned into a single spike by the transform.
fn flip_signs(v: &mut [f32]) {
    for (i, x) in v.iter_mut().enumerate() {
        let h = (i as u32).wrapping_mul(0x9E37_79B9).rotate_left(13) ^ 0x85EB_CA6B;
        if h.wrapping_mul(0xC2B2_AE35) >> 31 == 1 {
            *x = -*x;
        }
    }
}

/// The orthonormal Walsh-Hadamard transform of a power-of-two run of values,
/// in place.
fn hadamard(x: &mut [f32]) {
    let mut h = 1;
    while h < x.len() {
        for i in (0..x.len()).step_by(2 * h) {
            for j in i..i + h {
                let (a, b) = (x[j], x[j + h]);
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
        h *= 2;
    }
    let norm = 1.0 / (x.len() as f32).sqrt();
    x.iter_mut().for_each(|v| *v *= norm);
}

/// The bytes of values `at..at + n` of a page encoded as `t`: where they
/// start, and how many. Both ends lie on block boundaries.
fn encoded_span(t: DType, at: usize, n: usize) -> (usize, usize) {
    let len = t.block_len();
    assert!(
        at.is_multiple_of(len) && n.is_multiple_of(len),
        "{} KV is read and written in whole blocks of {len} (values {at}..{})",
        t.name(),
        at + n
    );
    (at / len * t.block_bytes(), n / len * t.block_bytes())
}

/// `values` encoded as `t` into `out`: f16 rounded to nearest, ties to even
/// (F16C where the CPU has it); Q8_0 and Q4_0 blocks as ggml's reference
/// quantizer writes them (`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref`).
/// (Before rotation, a q8_0 scale searched for the least squared error gave
/// the same fidelity on SmolLM2: 0.0345 nats against 0.0339.)
fn encode(t: DType, values: &[f32], out: &mut [u8]) {
    use ferrox_core::blocks::{BlockQ4_0, BlockQ8_0, bytes_of};
    use ferrox_core::kernels::reference::legacy::{quantize_q4_0, quantize_q8_0};
    let blocks = out
        .chunks_exact_mut(t.block_bytes())
        .zip(values.chunks_exact(t.block_len()));
    match t {
        DType::F16 => {
            let mut halves = [f16::ZERO; 64];
            for (d, v) in out.chunks_mut(128).zip(values.chunks(64)) {
                let h = &mut halves[..v.len()];
                h.convert_from_f32_slice(v);
                for (pair, x) in d.chunks_exact_mut(2).zip(h.iter()) {
                    pair.copy_from_slice(&x.to_le_bytes());
                }
            }
        }
        DType::Q8_0 => {
            for (d, v) in blocks {
                let mut b = [BlockQ8_0::default()];
                quantize_q8_0(v, &mut b);
                d.copy_from_slice(bytes_of(&b));
            }
        }
        DType::Q4_0 => {
            for (d, v) in blocks {
                let mut b = [BlockQ4_0::default()];
                quantize_q4_0(v, &mut b);
                d.copy_from_slice(bytes_of(&b));
            }
        }
        _ => unreachable!("KV pages are encoded as F16, Q8_0 or Q4_0"),
    }
}
