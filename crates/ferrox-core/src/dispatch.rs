//! `dispatched!`: one function compiled three times from one portable body (for
//! AVX-512, for AVX2 and as is), the build chosen by the process's kernel level
//! ([`crate::isa::active`]). The body must be written so that any vector width
//! computes the same bits (element-wise work, or reductions in fixed lanes; no
//! FMA contraction happens in Rust), which makes the three builds
//! interchangeable.
//!
//! `dispatched!(/// doc  pub fn name / name_at = body(arg: Type, ...) -> Ret);`
//! defines `name` (at the active level) and `name_at(level, ...)` (at `level`,
//! panicking if this CPU cannot run it), which tests call for every level.

macro_rules! dispatched {
    ($(#[$doc:meta])* $vis:vis fn $name:ident / $at:ident = $body:ident ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        #[doc(hidden)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            /// The build for `level`, which this CPU must run.
            #[inline(always)]
            pub(super) fn run(level: $crate::isa::Level, $($arg: $ty),*) -> $ret {
                #[cfg(target_arch = "x86_64")]
                {
                    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                    fn avx512($($arg: $ty),*) -> $ret { $body($($arg),*) }
                    #[target_feature(enable = "avx2,f16c")]
                    fn avx2($($arg: $ty),*) -> $ret { $body($($arg),*) }
                    if level.has_avx512() {
                        // SAFETY: the level's features run on this CPU (the callers'
                        // contract: the active level, or one asserted).
                        return unsafe { avx512($($arg),*) };
                    }
                    if level.has_avx2() {
                        // SAFETY: as above.
                        return unsafe { avx2($($arg),*) };
                    }
                }
                let _ = level;
                $body($($arg),*)
            }
        }

        $(#[$doc])*
        #[allow(dead_code)]
        $vis fn $name($($arg: $ty),*) -> $ret {
            $name::run($crate::isa::active(), $($arg),*)
        }

        /// The same function built for `level` (panics if this CPU cannot run it).
        #[allow(dead_code)]
        $vis fn $at(level: $crate::isa::Level, $($arg: $ty),*) -> $ret {
            level.assert_runs_here();
            $name::run(level, $($arg),*)
        }
    };
}
