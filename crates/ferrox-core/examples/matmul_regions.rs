//! What one parallel region per matrix costs a decode step of a mixture of
//! experts: 16 expert-shaped products (Q4_K, 768 x 2048, one token, as Qwen3-30B-A3B's
//! 8 chosen experts' gate and up) on 2 threads, one `packed_matmul` each
//! against one `packed_matmul_each` for all:
//! `cargo run --release -p ferrox-core --example matmul_regions`.

use std::time::Instant;

use ferrox_core::DType;
use ferrox_core::kernels::reference::quantize;
use ferrox_core::ops::matmul::Matrix;
use ferrox_core::packed::{PackedMatrix, QuantizedRows, packed_matmul, packed_matmul_each};

fn main() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let (rows, cols, matrices, reps) = (768, 2048, 16, 200);
    let wf: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 104729) % 1999) as f32 / 1000.0 - 1.0)
        .collect();
    let bytes = quantize(DType::Q4_K, &wf).unwrap();
    let m = Matrix::new(DType::Q4_K, rows, cols, &bytes).unwrap();
    // Distinct copies, so that each product reads its own weights.
    let packed: Vec<PackedMatrix> = (0..matrices)
        .map(|_| PackedMatrix::pack(&m, &pool).unwrap())
        .collect();
    let x: Vec<f32> = (0..cols).map(|i| (i % 7) as f32 - 3.0).collect();
    let mut q = QuantizedRows::default();
    q.quantize(&x, 1, cols);
    let mut outs = vec![vec![0.0f32; rows]; matrices];
    for round in 0..5 {
        let started = Instant::now();
        for _ in 0..reps {
            for (p, o) in packed.iter().zip(outs.iter_mut()) {
                packed_matmul(p, &q, o, &pool);
            }
        }
        let apart = started.elapsed().as_secs_f64() / reps as f64;
        let started = Instant::now();
        for _ in 0..reps {
            let mut jobs: Vec<(&PackedMatrix, &QuantizedRows, &mut [f32])> = packed
                .iter()
                .zip(outs.iter_mut())
                .map(|(p, o)| (p, &q, o.as_mut_slice()))
                .collect();
            packed_matmul_each(&mut jobs, &pool);
        }
        let together = started.elapsed().as_secs_f64() / reps as f64;
        println!(
            "round {round}: {matrices} regions {:.0} us, one region {:.0} us ({:.2}x)",
            apart * 1e6,
            together * 1e6,
            apart / together
        );
    }
}
