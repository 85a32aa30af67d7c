//! Multiply-accumulate rate of the two matrix-product paths on one thread:
//! `cargo run --release -p ferrox-core --example matmul_speed -- [ROWS COLS TOKENS [TYPE...]]`.
//! Prints GMAC/s of the f32-activation tiles, of the fused product (the
//! encoder's) and of the packed integer kernel (medians of 7 runs), the
//! activation quantizer's rate and the repack's (median of 5), for every
//! weight type a GGUF may hold; types without a packed form print the two
//! float products only.

use std::time::Instant;

use ferrox_core::DType;
use ferrox_core::kernels::reference::quantize;
use ferrox_core::ops::matmul::{Matrix, matmul};
use ferrox_core::ops::matmul_fused::{Epilogue, matmul_fused};
use ferrox_core::packed::{PackedMatrix, QuantizedRows, packed_matmul};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A `rows x cols` matrix of `t`: quantized from a fixed pattern where ferrox has
/// a quantizer, else blocks of patterned bytes with their f16 scales set sanely.
fn weights(t: DType, rows: usize, cols: usize) -> Vec<u8> {
    let wf: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 104729) % 1999) as f32 / 1000.0 - 1.0)
        .collect();
    if let Ok(b) = quantize(t, &wf) {
        return b;
    }
    let scale_at: &[usize] = match t {
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q6_K => &[208],
        _ => &[0],
    };
    let nb = rows * cols / t.block_len();
    let bb = t.block_bytes();
    let mut b: Vec<u8> = (0..nb * bb).map(|i| (i * 37 % 251) as u8).collect();
    for k in 0..nb {
        for &at in scale_at {
            b[k * bb + at..k * bb + at + 2].copy_from_slice(&[0x1f, 0x21]);
        }
    }
    b
}

fn rate(macs: f64, mut f: impl FnMut()) -> f64 {
    median(
        (0..7)
            .map(|_| {
                let s = Instant::now();
                f();
                macs / s.elapsed().as_secs_f64() / 1e9
            })
            .collect(),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let count = |a: &String| a.parse::<usize>().expect("a count");
    let (rows, cols, n) = match &args[..] {
        [r, c, t, ..] => (count(r), count(c), count(t)),
        _ => (1536, 576, 512),
    };
    // Types named after the counts: only those.
    let only: Vec<&str> = args.iter().skip(3).map(String::as_str).collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let x: Vec<f32> = (0..n * cols)
        .map(|i| ((i * 7919) % 2003) as f32 / 1000.0 - 1.0)
        .collect();
    let macs = (rows * cols * n) as f64;
    let mut out = vec![0.0; n * rows];
    for t in DType::ALL {
        if matches!(t, DType::F32 | DType::Q8_1 | DType::Q8_K)
            || cols % t.block_len() != 0
            || !(only.is_empty() || only.contains(&t.to_string().as_str()))
        {
            continue;
        }
        let bytes = weights(t, rows, cols);
        let m = Matrix::new(t, rows, cols, &bytes).unwrap();
        let f32_rate = rate(macs, || matmul(&m, &x, n, &mut out, &pool));
        let fused_rate = rate(macs, || {
            matmul_fused(&m, &x, n, &mut out, Epilogue::default(), &pool)
        });
        let pack_rate = median(
            (0..5)
                .map(|_| {
                    let started = Instant::now();
                    drop(PackedMatrix::pack(&m, &pool));
                    bytes.len() as f64 / started.elapsed().as_secs_f64() / 1e6
                })
                .collect(),
        );
        let packed = PackedMatrix::pack(&m, &pool);
        let Some(p) = packed else {
            println!(
                "{t:6} {rows}x{cols} x {n} tokens: f32 {f32_rate:6.1} GMAC/s, fused {fused_rate:6.1}, no packed form"
            );
            continue;
        };
        let mut q = QuantizedRows::default();
        let quant_rate = rate((n * cols) as f64, || {
            q.quantize(&x, n, cols);
            if p.format.needs_half_sums() {
                q.add_half_sums();
            }
        });
        let int_rate = rate(macs, || packed_matmul(&p, &q, &mut out, &pool));
        println!(
            "{t:6} {rows}x{cols} x {n} tokens: f32 {f32_rate:6.1} GMAC/s, fused {fused_rate:6.1}, int16 {int_rate:6.1} GMAC/s ({:.2}x), quantize {quant_rate:.2} Gvalues/s, pack {pack_rate:.0} MB/s",
            int_rate / f32_rate
        );
    }
}
