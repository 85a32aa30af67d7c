//! Memory sizes as people write them (`2GiB`, `512MiB`, `1.5GB`, `1048576`) and
//! as reports print them.
//!
//! Invariant: `KiB`/`MiB`/`GiB`/`TiB` and the bare `K`/`M`/`G`/`T` are powers of
//! 1024; `KB`/`MB`/`GB`/`TB` are powers of 1000 (as in IEC / SI). Results that do
//! not fit in a u64 or are not whole bytes are errors, never rounded silently.

/// A size that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {text:?}: {reason} (examples: 512MiB, 2GiB, 1.5GB, 1048576)")]
pub struct SizeError {
    pub text: String,
    pub reason: String,
}

/// Parses a byte size.
pub fn parse_byte_size(text: &str) -> Result<u64, SizeError> {
    let err = |reason: &str| SizeError {
        text: text.to_string(),
        reason: reason.to_string(),
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(err("no number"));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(err("unknown unit")),
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(|| err("too large"));
    }
    let x: f64 = num.parse().map_err(|_| err("not a number"))?;
    let bytes = x * mult as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(err("too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(err("not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Formats bytes with a binary unit: `512 B`, `22.50 KiB`, `1.00 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_byte_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_byte_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_byte_size("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_byte_size("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_byte_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_byte_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_byte_size("64kb").unwrap(), 64_000);
    }

    #[test]
    fn malformed_sizes_are_errors_that_quote_the_text() {
        for bad in [
            "",
            "GiB",
            "2 parsecs",
            "1.2.3G",
            "0.3B",
            "99999999999999999999",
            "20000000TiB",
        ] {
            let e = parse_byte_size(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn bytes_format_with_two_decimals() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(23040), "22.50 KiB");
        assert_eq!(format_bytes(1 << 30), "1.00 GiB");
    }
}
