//! The multiply-accumulate ceiling of one core's dot-product instructions,
//! from register-only loops (no memory): `vpdpwssd` (16-bit pairs, ferrox's
//! exact products), `vpdpbusd` (8-bit quads, llama.cpp's products with 8-bit
//! activations), `vfmadd231ps` (f32, the encoder's fused product: one 512-bit
//! FMA port or two decides its rate), on AVX2 `vpmaddwd` + `vpaddd`, and
//! AVX-VNNI's 256-bit `vpdpwssd` and `vpdpbusd` (the AVX2 builds' fused form).
//! `cargo run --release -p ferrox-core --example dot_peak`. Prints GMAC/s per
//! core, the best of 5 runs; set beside `matmul_speed`'s packed-kernel rate, it
//! says how close the kernel runs to what its instruction allows.

#[cfg(target_arch = "x86_64")]
fn main() {
    use std::time::Instant;
    const ROUNDS: u64 = 50_000_000;
    /// 8 independent accumulators per round, so the loop is bound by issue
    /// rate, not by one instruction's latency.
    macro_rules! peak {
        ($name:literal, $macs:expr, $feature:literal, $body:literal) => {{
            let has = match $feature {
                "avx2" => std::arch::is_x86_feature_detected!("avx2"),
                "avxvnni" => std::arch::is_x86_feature_detected!("avxvnni"),
                _ => {
                    std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512vnni")
                }
            };
            if has {
                let best = (0..5)
                    .map(|_| {
                        let t = Instant::now();
                        // SAFETY: the CPU has the feature (checked above); the
                        // loop reads and writes registers only.
                        unsafe {
                            std::arch::asm!(
                                "vpxord zmm0, zmm0, zmm0",
                                "2:",
                                $body,
                                "dec {n}",
                                "jnz 2b",
                                n = inout(reg) ROUNDS => _,
                                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                                out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                                out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                                out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
                                options(nostack, nomem),
                            );
                        }
                        (ROUNDS * 8 * $macs) as f64 / t.elapsed().as_secs_f64() / 1e9
                    })
                    .fold(0.0f64, f64::max);
                println!("{:28} {best:7.1} GMAC/s a core", $name);
            } else {
                println!("{:28} not on this CPU", $name);
            }
        }};
    }
    peak!(
        "vpdpwssd zmm (16-bit pairs)",
        32,
        "avx512vnni",
        "vpdpwssd zmm0, zmm8, zmm9\nvpdpwssd zmm1, zmm8, zmm9\nvpdpwssd zmm2, zmm8, zmm9\nvpdpwssd zmm3, zmm8, zmm9\nvpdpwssd zmm4, zmm8, zmm9\nvpdpwssd zmm5, zmm8, zmm9\nvpdpwssd zmm6, zmm8, zmm9\nvpdpwssd zmm7, zmm8, zmm9"
    );
    // The packed kernel's mix: a token's block is 16 `vpdpwssd` and up to
    // three f32 multiplies (its scale, `da`, its offset); counted as the
    // products' multiply-adds alone. Where the two share pipes (a Zen 4 runs
    // both 512-bit forms on its two multiply pipes), this is 16/19 of the
    // first line.
    peak!(
        "vpdpwssd zmm + 3 vmulps / 16",
        64,
        "avx512vnni",
        "vpdpwssd zmm0, zmm8, zmm9\nvpdpwssd zmm1, zmm8, zmm9\nvpdpwssd zmm2, zmm8, zmm9\nvpdpwssd zmm3, zmm8, zmm9\nvpdpwssd zmm4, zmm8, zmm9\nvpdpwssd zmm5, zmm8, zmm9\nvpdpwssd zmm6, zmm8, zmm9\nvpdpwssd zmm7, zmm8, zmm9\nvmulps zmm10, zmm8, zmm9\nvmulps zmm11, zmm8, zmm9\nvpdpwssd zmm0, zmm8, zmm9\nvpdpwssd zmm1, zmm8, zmm9\nvpdpwssd zmm2, zmm8, zmm9\nvpdpwssd zmm3, zmm8, zmm9\nvpdpwssd zmm4, zmm8, zmm9\nvpdpwssd zmm5, zmm8, zmm9\nvpdpwssd zmm6, zmm8, zmm9\nvpdpwssd zmm7, zmm8, zmm9\nvmulps zmm12, zmm8, zmm9"
    );
    peak!(
        "vpdpbusd zmm (8-bit quads)",
        64,
        "avx512vnni",
        "vpdpbusd zmm0, zmm8, zmm9\nvpdpbusd zmm1, zmm8, zmm9\nvpdpbusd zmm2, zmm8, zmm9\nvpdpbusd zmm3, zmm8, zmm9\nvpdpbusd zmm4, zmm8, zmm9\nvpdpbusd zmm5, zmm8, zmm9\nvpdpbusd zmm6, zmm8, zmm9\nvpdpbusd zmm7, zmm8, zmm9"
    );
    peak!(
        "vfmadd231ps zmm (f32)",
        16,
        "avx512vnni",
        "vfmadd231ps zmm0, zmm8, zmm9\nvfmadd231ps zmm1, zmm8, zmm9\nvfmadd231ps zmm2, zmm8, zmm9\nvfmadd231ps zmm3, zmm8, zmm9\nvfmadd231ps zmm4, zmm8, zmm9\nvfmadd231ps zmm5, zmm8, zmm9\nvfmadd231ps zmm6, zmm8, zmm9\nvfmadd231ps zmm7, zmm8, zmm9"
    );
    peak!(
        "vpmaddwd+vpaddd ymm (AVX2)",
        16,
        "avx2",
        "vpmaddwd ymm10, ymm8, ymm9\nvpaddd ymm0, ymm0, ymm10\nvpmaddwd ymm11, ymm8, ymm9\nvpaddd ymm1, ymm1, ymm11\nvpmaddwd ymm12, ymm8, ymm9\nvpaddd ymm2, ymm2, ymm12\nvpmaddwd ymm13, ymm8, ymm9\nvpaddd ymm3, ymm3, ymm13\nvpmaddwd ymm14, ymm8, ymm9\nvpaddd ymm4, ymm4, ymm14\nvpmaddwd ymm15, ymm8, ymm9\nvpaddd ymm5, ymm5, ymm15\nvpmaddwd ymm10, ymm8, ymm9\nvpaddd ymm6, ymm6, ymm10\nvpmaddwd ymm11, ymm8, ymm9\nvpaddd ymm7, ymm7, ymm11"
    );
    peak!(
        "vpdpwssd ymm (AVX-VNNI)",
        16,
        "avxvnni",
        "{{vex}} vpdpwssd ymm0, ymm8, ymm9\n{{vex}} vpdpwssd ymm1, ymm8, ymm9\n{{vex}} vpdpwssd ymm2, ymm8, ymm9\n{{vex}} vpdpwssd ymm3, ymm8, ymm9\n{{vex}} vpdpwssd ymm4, ymm8, ymm9\n{{vex}} vpdpwssd ymm5, ymm8, ymm9\n{{vex}} vpdpwssd ymm6, ymm8, ymm9\n{{vex}} vpdpwssd ymm7, ymm8, ymm9"
    );
    peak!(
        "vpdpbusd ymm (AVX-VNNI)",
        32,
        "avxvnni",
        "{{vex}} vpdpbusd ymm0, ymm8, ymm9\n{{vex}} vpdpbusd ymm1, ymm8, ymm9\n{{vex}} vpdpbusd ymm2, ymm8, ymm9\n{{vex}} vpdpbusd ymm3, ymm8, ymm9\n{{vex}} vpdpbusd ymm4, ymm8, ymm9\n{{vex}} vpdpbusd ymm5, ymm8, ymm9\n{{vex}} vpdpbusd ymm6, ymm8, ymm9\n{{vex}} vpdpbusd ymm7, ymm8, ymm9"
    );
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("dot_peak measures x86-64 instructions only");
}
