//! The instruction-set level the kernels run at, chosen once per process.
//!
//! Every kernel with several builds (hand-written AVX-512 / AVX2 / NEON, the
//! compiler-vectorized `dispatched!` bodies, the portable twin) asks
//! [`active`] which build to run; the level is detected on first use and never
//! changes. `FERROX_ISA` caps it (`portable`, `avx2`, `avx2vnni`, `avx512`,
//! `avx512vnni`, `neon`), so a machine with AVX-512 can run the whole engine on
//! its AVX2 builds. Tests run each kernel at every [`Level::supported`] level through
//! the kernels' `*_at(level, ...)` forms, which refuse a level this CPU lacks.
//!
//! Every build of a kernel returns the bits of its portable twin, so the level
//! changes speed only, never results.

use std::sync::OnceLock;

/// A set of instructions a kernel build needs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Plain Rust, any CPU.
    Portable,
    /// x86-64 AVX2 with F16C and FMA.
    Avx2,
    /// AVX2 plus AVX-VNNI (`vpdpwssd` on 256-bit registers, VEX-encoded):
    /// Intel's client cores since Alder Lake, which have no AVX-512. The AVX2
    /// builds run with the multiply-add of 16-bit pairs and its sum fused.
    Avx2Vnni,
    /// AVX2 plus AVX-512 F, BW and VL.
    Avx512,
    /// AVX-512 plus VNNI (`vpdpwssd`).
    Avx512Vnni,
    /// AArch64 Advanced SIMD.
    Neon,
}

/// `FERROX_ISA` names no level this CPU runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    #[error("FERROX_ISA={0:?} is not a level (portable, avx2, avx2vnni, avx512, avx512vnni, neon)")]
    Unknown(String),
    #[error("FERROX_ISA={0:?}: this CPU does not have those instructions")]
    Unsupported(String),
}

impl Level {
    /// Every level, lowest first per architecture.
    pub const ALL: [Level; 6] = [
        Level::Portable,
        Level::Avx2,
        Level::Avx2Vnni,
        Level::Avx512,
        Level::Avx512Vnni,
        Level::Neon,
    ];

    /// The name `FERROX_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            Level::Avx2 => "avx2",
            Level::Avx2Vnni => "avx2vnni",
            Level::Avx512 => "avx512",
            Level::Avx512Vnni => "avx512vnni",
            Level::Neon => "neon",
        }
    }

    /// Whether this CPU executes the level's instructions.
    pub fn runs_here(self) -> bool {
        match self {
            Level::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("f16c")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Level::Avx2Vnni => {
                Level::Avx2.runs_here() && std::arch::is_x86_feature_detected!("avxvnni")
            }
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => {
                Level::Avx2.runs_here()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
            }
            #[cfg(target_arch = "x86_64")]
            Level::Avx512Vnni => {
                Level::Avx512.runs_here() && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Level::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The levels this CPU runs, the portable one first.
    pub fn supported() -> Vec<Level> {
        Level::ALL.into_iter().filter(|l| l.runs_here()).collect()
    }

    /// The widest level this CPU runs.
    pub fn best() -> Level {
        [
            Level::Avx512Vnni,
            Level::Avx512,
            Level::Avx2Vnni,
            Level::Avx2,
            Level::Neon,
        ]
        .into_iter()
        .find(|l| l.runs_here())
        .unwrap_or(Level::Portable)
    }

    /// The level named `name`, if this CPU runs it.
    pub fn parse(name: &str) -> Result<Level, IsaError> {
        let level = Level::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| IsaError::Unknown(name.to_string()))?;
        if level.runs_here() {
            Ok(level)
        } else {
            Err(IsaError::Unsupported(name.to_string()))
        }
    }

    /// AVX2 builds may run (AVX-512 levels include AVX2).
    pub fn has_avx2(self) -> bool {
        matches!(
            self,
            Level::Avx2 | Level::Avx2Vnni | Level::Avx512 | Level::Avx512Vnni
        )
    }

    /// The AVX2 builds may fuse `vpmaddwd` and `vpaddd` into AVX-VNNI's
    /// `vpdpwssd` (the AVX-512 levels run their own builds where it matters).
    pub fn has_avx_vnni(self) -> bool {
        self == Level::Avx2Vnni
    }

    /// AVX-512 F/BW/VL builds may run.
    pub fn has_avx512(self) -> bool {
        matches!(self, Level::Avx512 | Level::Avx512Vnni)
    }

    /// AVX-512 VNNI builds may run.
    pub fn has_vnni(self) -> bool {
        self == Level::Avx512Vnni
    }

    /// NEON builds may run.
    pub fn has_neon(self) -> bool {
        self == Level::Neon
    }

    /// Panics unless this CPU runs the level: the `*_at` kernel forms call it
    /// before entering a build, which makes them safe to call with any level.
    pub fn assert_runs_here(self) {
        assert!(
            self.runs_here(),
            "this CPU cannot run the {} kernels",
            self.name()
        );
    }
}

/// The level `FERROX_ISA` asks for (`None` when unset or empty).
pub fn from_env() -> Result<Option<Level>, IsaError> {
    match std::env::var("FERROX_ISA") {
        Ok(v) if !v.trim().is_empty() => Level::parse(&v).map(Some),
        _ => Ok(None),
    }
}

static ACTIVE: OnceLock<Level> = OnceLock::new();

/// The level every kernel runs at: `FERROX_ISA` if set (and valid; the command
/// line checks it at start-up and refuses a bad value), else the widest this CPU
/// runs. Chosen on first use, then fixed.
pub fn active() -> Level {
    *ACTIVE.get_or_init(|| from_env().ok().flatten().unwrap_or_else(Level::best))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_portable_level_always_runs_and_the_best_is_supported() {
        let s = Level::supported();
        assert_eq!(s[0], Level::Portable);
        assert!(s.contains(&Level::best()));
        assert!(s.contains(&active()));
        for l in Level::ALL {
            assert_eq!(Level::parse(l.name()).is_ok(), l.runs_here(), "{l:?}");
        }
        assert!(matches!(Level::parse("sse9"), Err(IsaError::Unknown(_))));
    }

    #[test]
    #[should_panic(expected = "cannot run")]
    fn asking_for_a_level_this_cpu_lacks_panics_instead_of_faulting() {
        let missing = Level::ALL
            .into_iter()
            .find(|l| !l.runs_here())
            .expect("no CPU runs both x86 and ARM levels");
        missing.assert_runs_here();
    }
}
