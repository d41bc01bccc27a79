//! Numbers in request tokens, parsed exactly as memcached 1.6.18 parses them (`util.c`:
//! `safe_strtoull`, `safe_strtoul`, `safe_strtol` over C's `strtoull`/`strtol`).
//!
//! C's rules: leading white space is skipped, one `+` or `-` sign is allowed, at least one digit
//! must follow, and the number must end the token or be followed by white space. A value that
//! overflows 64 bits is refused (`ERANGE`). Then memcached's own rules: an unsigned value whose
//! top bit is set is refused if the token has a `-` (so `-1` is refused, `-0` is 0); the 32-bit
//! variants keep the low 32 bits of the 64-bit result (no range check).

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Sign, magnitude (None on 64-bit overflow) and whether the token is well formed.
fn scan(t: &[u8]) -> Option<(bool, Option<u64>)> {
    let mut i = t.iter().take_while(|&&c| is_space(c)).count();
    let neg = match t.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = t[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let end = i + digits;
    if end < t.len() && !is_space(t[end]) {
        return None;
    }
    let mut v: Option<u64> = Some(0);
    for &d in &t[i..end] {
        v = v
            .and_then(|v| v.checked_mul(10))
            .and_then(|v| v.checked_add(u64::from(d - b'0')));
    }
    Some((neg, v))
}

/// `safe_strtoull`.
pub fn strtoull(t: &[u8]) -> Option<u64> {
    let (neg, v) = scan(t)?;
    let v = v?;
    let v = if neg { v.wrapping_neg() } else { v };
    if (v as i64) < 0 && t.contains(&b'-') {
        return None;
    }
    Some(v)
}

/// `safe_strtoul` into a `uint32_t`: the low 32 bits of an accepted 64-bit value.
pub fn strtoul32(t: &[u8]) -> Option<u32> {
    strtoull(t).map(|v| v as u32)
}

/// `safe_strtol` into an `int32_t`: `strtol` (64-bit `long`, refused beyond its range), then
/// the low 32 bits.
pub fn strtol32(t: &[u8]) -> Option<i32> {
    let (neg, v) = scan(t)?;
    let v = v?;
    let l: i64 = if neg {
        if v > 1 << 63 {
            return None;
        }
        (v as i64).wrapping_neg()
    } else {
        i64::try_from(v).ok()?
    };
    Some(l as i32)
}

/// `safe_strtod` (for the few commands that take a ratio or factor).
pub fn strtod(t: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(t).ok()?;
    let s = s.trim_start_matches(|c: char| c.is_ascii() && is_space(c as u8));
    let end = s
        .find(|c: char| c.is_ascii() && is_space(c as u8))
        .unwrap_or(s.len());
    s[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_memcached() {
        assert_eq!(strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(strtoull(b"18446744073709551616"), None);
        assert_eq!(strtoull(b"+5"), Some(5));
        assert_eq!(strtoull(b"-1"), None);
        assert_eq!(strtoull(b"-0"), Some(0));
        assert_eq!(strtoull(b"5x"), None);
        assert_eq!(strtoull(b"5\r"), Some(5));
        assert_eq!(strtoull(b""), None);
        assert_eq!(strtoull(b"+"), None);
        assert_eq!(strtoul32(b"4294967296"), Some(0));
        assert_eq!(strtoul32(b"4294967295"), Some(u32::MAX));
        assert_eq!(strtol32(b"-1"), Some(-1));
        assert_eq!(strtol32(b"2147483647"), Some(i32::MAX));
        assert_eq!(strtol32(b"2147483648"), Some(i32::MIN));
        assert_eq!(strtol32(b"4294967299"), Some(3));
        assert_eq!(strtol32(b"9223372036854775808"), None);
        assert_eq!(strtol32(b"-9223372036854775808"), Some(0));
        assert_eq!(strtol32(b"x"), None);
        assert_eq!(strtod(b"0.5"), Some(0.5));
    }
}
