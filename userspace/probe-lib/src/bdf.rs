//! PCI addresses (bus/device/function) as text: the sysfs form and the
//! form CUDA reports, for the layers that meet both.

/// `dddd:bb:dd.f`
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, ch)| matches!(i, 4 | 7 | 10) || ch.is_ascii_hexdigit())
}

/// CUDA writes bus ids as `00000000:3B:00.0`; sysfs as `0000:3b:00.0`.
pub fn normalize_bdf(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 && dom[..dom.len() - 4].chars().all(|c| c == '0') => {
            format!("{}:{rest}", &dom[dom.len() - 4..])
        }
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_syntax() {
        assert!(is_bdf("0000:3b:00.0"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("0000:3b:00"));
        assert!(!is_bdf("0000:zz:00.0"));
        assert_eq!(normalize_bdf("00000000:3B:00.0"), "0000:3b:00.0");
        assert_eq!(normalize_bdf("0001:01:00.0"), "0001:01:00.0");
    }
}
