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
    /// Zeros in the registers the loops read: zmm0-17, or ymm0-15 (the VEX
    /// forms' registers, on CPUs without AVX-512). An f32 loop on whatever
    /// they held ran into denormals' microcode assists.
    macro_rules! zero {
        (zmm) => {
            "vpxord zmm0, zmm0, zmm0\nvpxord zmm1, zmm1, zmm1\nvpxord zmm2, zmm2, zmm2\nvpxord zmm3, zmm3, zmm3\nvpxord zmm4, zmm4, zmm4\nvpxord zmm5, zmm5, zmm5\nvpxord zmm6, zmm6, zmm6\nvpxord zmm7, zmm7, zmm7\nvpxord zmm8, zmm8, zmm8\nvpxord zmm9, zmm9, zmm9\nvpxord zmm10, zmm10, zmm10\nvpxord zmm11, zmm11, zmm11\nvpxord zmm12, zmm12, zmm12\nvpxord zmm13, zmm13, zmm13\nvpxord zmm14, zmm14, zmm14\nvpxord zmm15, zmm15, zmm15\nvpxord zmm16, zmm16, zmm16\nvpxord zmm17, zmm17, zmm17"
        };
        (ymm) => {
            "vpxor ymm0, ymm0, ymm0\nvpxor ymm1, ymm1, ymm1\nvpxor ymm2, ymm2, ymm2\nvpxor ymm3, ymm3, ymm3\nvpxor ymm4, ymm4, ymm4\nvpxor ymm5, ymm5, ymm5\nvpxor ymm6, ymm6, ymm6\nvpxor ymm7, ymm7, ymm7\nvpxor ymm8, ymm8, ymm8\nvpxor ymm9, ymm9, ymm9\nvpxor ymm10, ymm10, ymm10\nvpxor ymm11, ymm11, ymm11\nvpxor ymm12, ymm12, ymm12\nvpxor ymm13, ymm13, ymm13\nvpxor ymm14, ymm14, ymm14\nvpxor ymm15, ymm15, ymm15"
        };
    }
    /// `$name`'s GMAC/s, the best of 5 runs of `$body`, a round of
    /// `$per_round` multiply-adds. Each round's accumulators are independent:
    /// 16 of them (14 for the VEX forms, which reach 16 registers), so that
    /// the loop is bound by the issue rate, not by the instruction's latency
    /// (eight `vpdpwssd` zmm chains ran at 124 GMAC/s a core on an Emerald
    /// Rapids, sixteen at 188: about six cycles of latency against two issued
    /// a cycle).
    macro_rules! peak {
        ($name:literal, $per_round:expr, $feature:literal, $regs:ident, $body:literal) => {{
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
                                zero!($regs),
                                "2:",
                                $body,
                                "dec {n}",
                                "jnz 2b",
                                n = inout(reg) ROUNDS => _,
                                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                                out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                                out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                                out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
                                out("zmm20") _, out("zmm21") _, out("zmm22") _,
                                options(nostack, nomem),
                            );
                        }
                        (ROUNDS * $per_round) as f64 / t.elapsed().as_secs_f64() / 1e9
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
        16 * 32,
        "avx512vnni",
        zmm,
        "vpdpwssd zmm0, zmm16, zmm17\nvpdpwssd zmm1, zmm16, zmm17\nvpdpwssd zmm2, zmm16, zmm17\nvpdpwssd zmm3, zmm16, zmm17\nvpdpwssd zmm4, zmm16, zmm17\nvpdpwssd zmm5, zmm16, zmm17\nvpdpwssd zmm6, zmm16, zmm17\nvpdpwssd zmm7, zmm16, zmm17\nvpdpwssd zmm8, zmm16, zmm17\nvpdpwssd zmm9, zmm16, zmm17\nvpdpwssd zmm10, zmm16, zmm17\nvpdpwssd zmm11, zmm16, zmm17\nvpdpwssd zmm12, zmm16, zmm17\nvpdpwssd zmm13, zmm16, zmm17\nvpdpwssd zmm14, zmm16, zmm17\nvpdpwssd zmm15, zmm16, zmm17"
    );
    // The packed kernel's mix: a token's block is 16 `vpdpwssd` and up to
    // three f32 multiplies (its scale, `da`, its offset); counted as the
    // products' multiply-adds alone. Where the two share pipes (a Zen 4 runs
    // both 512-bit forms on its two multiply pipes), this is 16/19 of the
    // first line.
    peak!(
        "vpdpwssd zmm + 3 vmulps / 16",
        16 * 32,
        "avx512vnni",
        zmm,
        "vpdpwssd zmm0, zmm16, zmm17\nvpdpwssd zmm1, zmm16, zmm17\nvpdpwssd zmm2, zmm16, zmm17\nvpdpwssd zmm3, zmm16, zmm17\nvpdpwssd zmm4, zmm16, zmm17\nvpdpwssd zmm5, zmm16, zmm17\nvpdpwssd zmm6, zmm16, zmm17\nvpdpwssd zmm7, zmm16, zmm17\nvpdpwssd zmm8, zmm16, zmm17\nvpdpwssd zmm9, zmm16, zmm17\nvpdpwssd zmm10, zmm16, zmm17\nvpdpwssd zmm11, zmm16, zmm17\nvpdpwssd zmm12, zmm16, zmm17\nvpdpwssd zmm13, zmm16, zmm17\nvpdpwssd zmm14, zmm16, zmm17\nvpdpwssd zmm15, zmm16, zmm17\nvmulps zmm20, zmm16, zmm17\nvmulps zmm21, zmm16, zmm17\nvmulps zmm22, zmm16, zmm17"
    );
    peak!(
        "vpdpbusd zmm (8-bit quads)",
        16 * 64,
        "avx512vnni",
        zmm,
        "vpdpbusd zmm0, zmm16, zmm17\nvpdpbusd zmm1, zmm16, zmm17\nvpdpbusd zmm2, zmm16, zmm17\nvpdpbusd zmm3, zmm16, zmm17\nvpdpbusd zmm4, zmm16, zmm17\nvpdpbusd zmm5, zmm16, zmm17\nvpdpbusd zmm6, zmm16, zmm17\nvpdpbusd zmm7, zmm16, zmm17\nvpdpbusd zmm8, zmm16, zmm17\nvpdpbusd zmm9, zmm16, zmm17\nvpdpbusd zmm10, zmm16, zmm17\nvpdpbusd zmm11, zmm16, zmm17\nvpdpbusd zmm12, zmm16, zmm17\nvpdpbusd zmm13, zmm16, zmm17\nvpdpbusd zmm14, zmm16, zmm17\nvpdpbusd zmm15, zmm16, zmm17"
    );
    peak!(
        "vfmadd231ps zmm (f32)",
        16 * 16,
        "avx512vnni",
        zmm,
        "vfmadd231ps zmm0, zmm16, zmm17\nvfmadd231ps zmm1, zmm16, zmm17\nvfmadd231ps zmm2, zmm16, zmm17\nvfmadd231ps zmm3, zmm16, zmm17\nvfmadd231ps zmm4, zmm16, zmm17\nvfmadd231ps zmm5, zmm16, zmm17\nvfmadd231ps zmm6, zmm16, zmm17\nvfmadd231ps zmm7, zmm16, zmm17\nvfmadd231ps zmm8, zmm16, zmm17\nvfmadd231ps zmm9, zmm16, zmm17\nvfmadd231ps zmm10, zmm16, zmm17\nvfmadd231ps zmm11, zmm16, zmm17\nvfmadd231ps zmm12, zmm16, zmm17\nvfmadd231ps zmm13, zmm16, zmm17\nvfmadd231ps zmm14, zmm16, zmm17\nvfmadd231ps zmm15, zmm16, zmm17"
    );
    // `vpaddd`'s one-cycle chains hide `vpmaddwd`'s latency with eight.
    peak!(
        "vpmaddwd+vpaddd ymm (AVX2)",
        8 * 16,
        "avx2",
        ymm,
        "vpmaddwd ymm10, ymm14, ymm15\nvpaddd ymm0, ymm0, ymm10\nvpmaddwd ymm11, ymm14, ymm15\nvpaddd ymm1, ymm1, ymm11\nvpmaddwd ymm12, ymm14, ymm15\nvpaddd ymm2, ymm2, ymm12\nvpmaddwd ymm13, ymm14, ymm15\nvpaddd ymm3, ymm3, ymm13\nvpmaddwd ymm10, ymm14, ymm15\nvpaddd ymm4, ymm4, ymm10\nvpmaddwd ymm11, ymm14, ymm15\nvpaddd ymm5, ymm5, ymm11\nvpmaddwd ymm12, ymm14, ymm15\nvpaddd ymm6, ymm6, ymm12\nvpmaddwd ymm13, ymm14, ymm15\nvpaddd ymm7, ymm7, ymm13"
    );
    peak!(
        "vpdpwssd ymm (AVX-VNNI)",
        14 * 16,
        "avxvnni",
        ymm,
        "{{vex}} vpdpwssd ymm0, ymm14, ymm15\n{{vex}} vpdpwssd ymm1, ymm14, ymm15\n{{vex}} vpdpwssd ymm2, ymm14, ymm15\n{{vex}} vpdpwssd ymm3, ymm14, ymm15\n{{vex}} vpdpwssd ymm4, ymm14, ymm15\n{{vex}} vpdpwssd ymm5, ymm14, ymm15\n{{vex}} vpdpwssd ymm6, ymm14, ymm15\n{{vex}} vpdpwssd ymm7, ymm14, ymm15\n{{vex}} vpdpwssd ymm8, ymm14, ymm15\n{{vex}} vpdpwssd ymm9, ymm14, ymm15\n{{vex}} vpdpwssd ymm10, ymm14, ymm15\n{{vex}} vpdpwssd ymm11, ymm14, ymm15\n{{vex}} vpdpwssd ymm12, ymm14, ymm15\n{{vex}} vpdpwssd ymm13, ymm14, ymm15"
    );
    peak!(
        "vpdpbusd ymm (AVX-VNNI)",
        14 * 32,
        "avxvnni",
        ymm,
        "{{vex}} vpdpbusd ymm0, ymm14, ymm15\n{{vex}} vpdpbusd ymm1, ymm14, ymm15\n{{vex}} vpdpbusd ymm2, ymm14, ymm15\n{{vex}} vpdpbusd ymm3, ymm14, ymm15\n{{vex}} vpdpbusd ymm4, ymm14, ymm15\n{{vex}} vpdpbusd ymm5, ymm14, ymm15\n{{vex}} vpdpbusd ymm6, ymm14, ymm15\n{{vex}} vpdpbusd ymm7, ymm14, ymm15\n{{vex}} vpdpbusd ymm8, ymm14, ymm15\n{{vex}} vpdpbusd ymm9, ymm14, ymm15\n{{vex}} vpdpbusd ymm10, ymm14, ymm15\n{{vex}} vpdpbusd ymm11, ymm14, ymm15\n{{vex}} vpdpbusd ymm12, ymm14, ymm15\n{{vex}} vpdpbusd ymm13, ymm14, ymm15"
    );
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("dot_peak measures x86-64 instructions only");
}
