//! `dispatched!`: one function compiled three times from one portable body (for
//! AVX-512, for AVX2 and as is), the widest build this CPU runs chosen at each
//! call. The body must be written so that any vector width computes the same
//! bits (element-wise work, or reductions in fixed lanes; no FMA contraction
//! happens in Rust), which makes the three builds interchangeable.

/// `dispatched!(/// doc  pub fn name = body(arg: Type, ...) -> Ret);`
macro_rules! dispatched {
    ($(#[$doc:meta])* $vis:vis fn $name:ident = $body:ident ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn avx512($($arg: $ty),*) -> $ret { $body($($arg),*) }
                #[target_feature(enable = "avx2,f16c")]
                unsafe fn avx2($($arg: $ty),*) -> $ret { $body($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx512bw") && std::arch::is_x86_feature_detected!("avx512vl") {
                    // SAFETY: the features were detected on this CPU.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("f16c") {
                    // SAFETY: the features were detected on this CPU.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}
