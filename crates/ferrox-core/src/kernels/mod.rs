//! Kernels. `reference` is the scalar specification; SIMD twins chosen at run time
//! arrive with the performance work and are tested against it.

pub mod fast;
pub mod reference;
#[cfg(target_arch = "x86_64")]
pub mod x86;
#[cfg(target_arch = "x86_64")]
pub mod x86_attention;
#[cfg(target_arch = "x86_64")]
pub mod x86_panel;

/// Random quantized rows for kernel tests.
#[cfg(test)]
pub(crate) mod test_rows {
    use crate::dtype::DType;

    pub(crate) fn random(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    /// Random bytes for `nb` blocks with finite f16 scales.
    pub(crate) fn random_row(t: DType, nb: usize, seed: u64) -> Vec<u8> {
        let mut b = random(nb * t.block_bytes(), seed);
        let put = |b: &mut Vec<u8>, at: usize| {
            let v = half::f16::from_f32(0.01 + (b[at] as f32) / 4000.0)
                .to_bits()
                .to_le_bytes();
            b[at..at + 2].copy_from_slice(&v);
        };
        for k in 0..nb {
            let base = k * t.block_bytes();
            match t {
                DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::IQ4_NL | DType::IQ4_XS => {
                    put(&mut b, base)
                }
                DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => {
                    put(&mut b, base);
                    put(&mut b, base + 2);
                }
                DType::Q6_K => put(&mut b, base + 208),
                DType::Q2_K => {
                    put(&mut b, base + 80);
                    put(&mut b, base + 82);
                }
                DType::Q3_K => put(&mut b, base + 108),
                // A shared exponent near 1, so products stay finite.
                DType::MXFP4 => b[base] = 120 + b[base] % 12,
                _ => {}
            }
        }
        b
    }
}
