//! Multiply-accumulate rate of the two matrix-product paths on one thread:
//! `cargo run --release -p ferrox-core --example matmul_speed -- [ROWS COLS TOKENS]`.
//! (`THREADS=N` for a pool of N threads.) Prints GMAC/s of the f32-activation tiles and of the packed integer kernel
//! (medians of 7 runs) for Q4_1, Q5_0, Q8_0 and Q4_K weights.

use std::time::Instant;

use ferrox_core::DType;
use ferrox_core::ops::matmul::{Matrix, matmul};
use ferrox_core::packed::{PackedMatrix, QuantizedRows, packed_matmul};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a count"))
        .collect();
    let (rows, cols, n) = match args[..] {
        [r, c, t] => (r, c, t),
        _ => (1536, 576, 512),
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let x: Vec<f32> = (0..n * cols)
        .map(|i| ((i * 7919) % 2003) as f32 / 1000.0 - 1.0)
        .collect();
    let macs = (rows * cols * n) as f64;
    for t in [DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4_K] {
        if cols % t.block_len() != 0 {
            continue;
        }
        let wf: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 104729) % 1999) as f32 / 1000.0 - 1.0)
            .collect();
        let Ok(bytes) = ferrox_core::kernels::reference::quantize(
            if t == DType::Q4_K { DType::Q4_1 } else { t },
            &wf,
        ) else {
            continue;
        };
        let (t, bytes) = if t == DType::Q4_K {
            // A K-quant matrix of the same size: reinterpret random bytes with sane scales.
            let nb = rows * cols / 256;
            let mut b = vec![0u8; nb * 144];
            for (i, v) in b.iter_mut().enumerate() {
                *v = (i * 37 % 251) as u8;
            }
            for k in 0..nb {
                b[k * 144..k * 144 + 4].copy_from_slice(&[0x00, 0x1c, 0x00, 0x1c]);
            }
            (t, b)
        } else {
            (t, bytes)
        };
        let m = Matrix::new(t, rows, cols, &bytes).unwrap();
        let p = PackedMatrix::pack(&m, &pool).unwrap();
        let mut out = vec![0.0; n * rows];
        let f32_rate = median(
            (0..7)
                .map(|_| {
                    let s = Instant::now();
                    matmul(&m, &x, n, &mut out, &pool);
                    macs / s.elapsed().as_secs_f64() / 1e9
                })
                .collect(),
        );
        let mut q = QuantizedRows::default();
        let quant_rate = median(
            (0..7)
                .map(|_| {
                    let s = Instant::now();
                    q.quantize(&x, n, cols);
                    (n * cols) as f64 / s.elapsed().as_secs_f64() / 1e9
                })
                .collect(),
        );
        let int_rate = median(
            (0..7)
                .map(|_| {
                    let s = Instant::now();
                    packed_matmul(&p, &q, &mut out, &pool);
                    macs / s.elapsed().as_secs_f64() / 1e9
                })
                .collect(),
        );
        println!(
            "{t:6} {rows}x{cols} x {n} tokens: f32 {f32_rate:6.1} GMAC/s, int16 {int_rate:6.1} GMAC/s ({:.2}x), quantize {quant_rate:.2} Gvalues/s",
            int_rate / f32_rate
        );
    }
}
