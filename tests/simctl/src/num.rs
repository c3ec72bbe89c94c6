//! Numbers as tests write them: decimal, 0x hex, K/M/G binary suffixes.

/// Parses `s` ("65536", "0x10000", "64K", "2M", "1G").
pub fn parse(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    let (digits, shift) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 10),
        b'M' | b'm' => (&s[..s.len() - 1], 20),
        b'G' | b'g' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn forms() {
        assert_eq!(parse("65536"), Some(65536));
        assert_eq!(parse("0x10000"), Some(65536));
        assert_eq!(parse("64K"), Some(65536));
        assert_eq!(parse("2M"), Some(2 << 20));
        assert_eq!(parse("1G"), Some(1 << 30));
        assert_eq!(parse(""), None);
        assert_eq!(parse("x"), None);
        assert_eq!(parse("0xg"), None);
    }
}
