//! The read rate of a one-token packed product too large for any cache, as a
//! decode step streams its weights from memory:
//! `cargo run --release -p ferrox-core --example decode_stream -- TYPE THREADS [REPS]`.
//! A 65536 x 4096 matrix of TYPE (`Q4_K`, `Q6_K`, ...; 150-290 MB in the
//! file's bytes) is packed once, then multiplied by one token REPS times (30
//! unless given); prints the median rate in the file's bytes per second.
//! (`matmul_speed`'s matrices fit in L3: it measures the kernel, this the
//! memory stream the kernel sits on.)

use std::time::Instant;

use ferrox_core::DType;
use ferrox_core::kernels::reference::quantize;
use ferrox_core::ops::matmul::Matrix;
use ferrox_core::packed::{PackedMatrix, QuantizedRows, packed_matmul};

const ROWS: usize = 65536;
const COLS: usize = 4096;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dtype, threads, reps) = match &args[..] {
        [t, n, rest @ ..] => (
            DType::from_name(t).unwrap_or_else(|| panic!("{t} is not a GGUF type")),
            n.parse::<usize>().expect("a thread count"),
            rest.first()
                .map_or(30, |r| r.parse().expect("a count of runs")),
        ),
        _ => panic!("usage: decode_stream TYPE THREADS [REPS]"),
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool");
    let wf: Vec<f32> = (0..ROWS * COLS)
        .map(|i| ((i * 104729) % 1999) as f32 / 1000.0 - 1.0)
        .collect();
    let bytes = quantize(dtype, &wf).unwrap_or_else(|e| panic!("quantizing {dtype}: {e}"));
    drop(wf);
    let m = Matrix::new(dtype, ROWS, COLS, &bytes).expect("a matrix");
    let packed =
        PackedMatrix::pack(&m, &pool).unwrap_or_else(|| panic!("{dtype} has no packed form"));
    let file_bytes = bytes.len() as f64;
    drop(bytes);
    let x: Vec<f32> = (0..COLS)
        .map(|i| ((i * 7919) % 2003) as f32 / 1000.0 - 1.0)
        .collect();
    let mut q = QuantizedRows::default();
    q.quantize(&x, 1, COLS);
    if packed.format.needs_half_sums() {
        q.add_half_sums();
    }
    let mut out = vec![0.0; ROWS];
    let mut rates: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            packed_matmul(&packed, &q, &mut out, &pool);
            file_bytes / start.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    println!(
        "{dtype} {ROWS}x{COLS} x 1 token, {threads} thread(s): median {:.1} GB/s of the file's bytes ({:?})",
        rates[rates.len() / 2],
        packed.format
    );
}
