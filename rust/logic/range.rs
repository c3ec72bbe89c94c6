// SPDX-License-Identifier: GPL-2.0

//! GPU virtual-address ranges: what the RDMA core asks for (any byte range)
//! turned into what the NVIDIA driver accepts (64 KiB aligned, non-empty,
//! no wrap-around).  Nothing unrounded or overflowing reaches the driver.

/// The GPU page size of every current NVIDIA driver.
pub const GPU_PAGE_SHIFT: u32 = 16;
/// 64 KiB.
pub const GPU_PAGE_SIZE: u64 = 1 << GPU_PAGE_SHIFT;

/// Why a byte range cannot be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// `size` is zero.
    Empty,
    /// `addr + size`, or its rounding up to a GPU page, wraps around.
    Overflow,
}

/// A non-empty, GPU-page aligned range of GPU virtual addresses.
///
/// # Invariants
///
/// `start` and `len` are multiples of [`GPU_PAGE_SIZE`], `len > 0`, and
/// `start + len` does not overflow a `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuRange {
    start: u64,
    len: u64,
}

impl GpuRange {
    /// The smallest GPU-page aligned range that covers `[addr, addr + size)`.
    pub fn covering(addr: u64, size: u64) -> Result<Self, RangeError> {
        if size == 0 {
            return Err(RangeError::Empty);
        }
        let end = addr.checked_add(size).ok_or(RangeError::Overflow)?;
        let start = addr & !(GPU_PAGE_SIZE - 1);
        let end = end
            .checked_add(GPU_PAGE_SIZE - 1)
            .ok_or(RangeError::Overflow)?
            & !(GPU_PAGE_SIZE - 1);
        // INVARIANT: both ends are aligned, end > start since size > 0, and
        // neither computation wrapped.
        Ok(Self {
            start,
            len: end - start,
        })
    }

    /// First GPU virtual address (aligned).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Length in bytes (a multiple of 64 KiB, never zero).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: the type cannot hold an empty range.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Number of GPU pages.
    pub fn pages(&self) -> u64 {
        self.len >> GPU_PAGE_SHIFT
    }

    /// Whether the byte range `[addr, addr + size)` lies inside this range.
    pub fn contains(&self, addr: u64, size: u64) -> bool {
        match addr.checked_add(size) {
            Some(end) => addr >= self.start && end <= self.start + self.len,
            None => false,
        }
    }
}

/// The trims the RDMA core applies to the first and last SG entries when the
/// peer page size differs from the CPU page size (`cpu_page`), so that the
/// registered byte range starts and ends where the user asked (at CPU-page
/// granularity).  Returns `(first, last)` in bytes.
pub fn core_trims(addr: u64, size: u64, cpu_page: u64, peer_page: u64) -> Option<(u64, u64)> {
    let end = addr.checked_add(size)?;
    let down = |x: u64, a: u64| x & !(a - 1);
    let up = |x: u64, a: u64| x.checked_add(a - 1).map(|v| v & !(a - 1));
    let first = down(addr, cpu_page) - down(addr, peer_page);
    let last = up(end, peer_page)? - up(end, cpu_page)?;
    Some((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K64: u64 = GPU_PAGE_SIZE;

    #[test]
    fn aligned_range_is_kept() {
        let r = GpuRange::covering(0x7f00_0000_0000, 2 << 20).unwrap();
        assert_eq!(r.start(), 0x7f00_0000_0000);
        assert_eq!(r.len(), 2 << 20);
        assert_eq!(r.pages(), 32);
    }

    #[test]
    fn unaligned_range_is_rounded_outwards() {
        let r = GpuRange::covering(K64 + 100, 10).unwrap();
        assert_eq!((r.start(), r.len()), (K64, K64));
        let r = GpuRange::covering(K64 - 1, 2).unwrap();
        assert_eq!((r.start(), r.len()), (0, 2 * K64));
        assert!(r.contains(K64 - 1, 2));
        assert!(!r.contains(K64 - 1, 2 * K64));
    }

    #[test]
    fn empty_and_overflowing_ranges_are_refused() {
        assert_eq!(GpuRange::covering(K64, 0), Err(RangeError::Empty));
        assert_eq!(GpuRange::covering(u64::MAX, 1), Err(RangeError::Overflow));
        assert_eq!(
            GpuRange::covering(u64::MAX - 10, 5),
            Err(RangeError::Overflow)
        );
        assert_eq!(GpuRange::covering(1, u64::MAX), Err(RangeError::Overflow));
        // The topmost page cannot be described (its end is 2^64)...
        assert_eq!(
            GpuRange::covering(u64::MAX - K64 + 1, 1),
            Err(RangeError::Overflow)
        );
        // ...the one below it can.
        let r = GpuRange::covering(u64::MAX - 2 * K64 + 1, K64).unwrap();
        assert_eq!((r.start(), r.len()), (u64::MAX - 2 * K64 + 1, K64));
        assert!(!r.contains(u64::MAX, 2));
    }

    #[test]
    fn trims_match_the_core_formula() {
        // 4 KiB CPU pages, 64 KiB peer pages, a buffer 8 KiB into a GPU page.
        let (first, last) = core_trims(K64 + 8192, 3 * K64, 4096, K64).unwrap();
        assert_eq!(first, 8192);
        assert_eq!(last, K64 - 8192);
        // Aligned buffers are not trimmed.
        assert_eq!(core_trims(K64, K64, 4096, K64), Some((0, 0)));
        assert_eq!(core_trims(u64::MAX, 2, 4096, K64), None);
    }
}
