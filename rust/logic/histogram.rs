// SPDX-License-Identifier: GPL-2.0

//! A log2 histogram of durations in microseconds (pin times).

/// Number of buckets: `< 1 µs`, `[2^(i-1), 2^i) µs` for i in 1..LAST, and
/// `>= 2^(LAST-1) µs` (about 1 s and more).
pub const BUCKETS: usize = 22;

/// The bucket a duration of `us` microseconds falls into.
pub fn bucket(us: u64) -> usize {
    let b = (u64::BITS - us.leading_zeros()) as usize;
    b.min(BUCKETS - 1)
}

/// The lower bound of a bucket, in microseconds.
pub fn bucket_floor_us(b: usize) -> u64 {
    if b == 0 {
        0
    } else {
        1 << (b - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log2() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(2), 2);
        assert_eq!(bucket(3), 2);
        assert_eq!(bucket(1350), 11);
        assert_eq!(bucket_floor_us(11), 1024);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        for us in [0u64, 1, 5, 100, 4096, 1 << 20] {
            let b = bucket(us);
            assert!(bucket_floor_us(b) <= us);
        }
    }
}
