// SPDX-License-Identifier: GPL-2.0

//! Scatter-gather coalescing: consecutive GPU pages whose bus addresses are
//! contiguous become one SG entry, up to the DMA device's maximum segment
//! size and the SG length type (`unsigned int`).  The core's first/last trim
//! works on any entry longer than the trim, which every entry here is (each
//! is at least one GPU page).

/// One SG entry: a bus address and a length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// DMA (bus) address of the first byte.
    pub addr: u64,
    /// Length in bytes: a multiple of the page size, at most the cap.
    pub len: u32,
}

/// The longest SG entry allowed: the device's maximum segment size and the
/// `u32` SG length, rounded down to whole pages (never less than one page).
pub fn segment_cap(max_seg_size: u64, page_size: u64) -> u64 {
    let cap = max_seg_size.min(u64::from(u32::MAX));
    let cap = cap - cap % page_size;
    cap.max(page_size)
}

/// Iterator over the coalesced segments of per-page bus addresses.
#[derive(Debug, Clone)]
pub struct Coalesce<'a> {
    pages: &'a [u64],
    page_size: u64,
    cap: u64,
}

/// Coalesces `pages` (one bus address per page of `page_size` bytes) into
/// segments of at most `segment_cap(max_seg_size, page_size)` bytes.
/// `page_size` must be a power of two no larger than 2 GiB.
pub fn coalesce(pages: &[u64], page_size: u64, max_seg_size: u64) -> Coalesce<'_> {
    Coalesce {
        pages,
        page_size,
        cap: segment_cap(max_seg_size, page_size),
    }
}

impl Iterator for Coalesce<'_> {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        let (&first, rest) = self.pages.split_first()?;
        let mut len = self.page_size;
        let mut taken = 1;
        for &next in rest {
            let contiguous = first.checked_add(len) == Some(next);
            if !contiguous || len + self.page_size > self.cap {
                break;
            }
            len += self.page_size;
            taken += 1;
        }
        self.pages = &self.pages[taken..];
        // `len <= cap <= u32::MAX`.
        Some(Segment {
            addr: first,
            len: len as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1 << 16;

    fn segs(pages: &[u64], max: u64) -> ([Segment; 16], usize) {
        let mut out = [Segment { addr: 0, len: 0 }; 16];
        let mut n = 0;
        for s in coalesce(pages, P, max) {
            out[n] = s;
            n += 1;
        }
        (out, n)
    }

    #[test]
    fn contiguous_pages_make_one_entry() {
        let pages = [0x1_0000_0000, 0x1_0001_0000, 0x1_0002_0000, 0x1_0003_0000];
        let (s, n) = segs(&pages, u64::MAX);
        assert_eq!(n, 1);
        assert_eq!(
            s[0],
            Segment {
                addr: 0x1_0000_0000,
                len: 4 * P as u32
            }
        );
    }

    #[test]
    fn gaps_split_entries() {
        // Runs of 2, 1, 3 pages.
        let pages = [
            0x10_0000, 0x11_0000, 0x40_0000, 0x80_0000, 0x81_0000, 0x82_0000,
        ];
        let (s, n) = segs(&pages, u64::MAX);
        assert_eq!(n, 3);
        assert_eq!((s[0].addr, s[0].len), (0x10_0000, 2 * P as u32));
        assert_eq!((s[1].addr, s[1].len), (0x40_0000, P as u32));
        assert_eq!((s[2].addr, s[2].len), (0x80_0000, 3 * P as u32));
        let total: u64 = s[..n].iter().map(|s| u64::from(s.len)).sum();
        assert_eq!(total, pages.len() as u64 * P);
    }

    #[test]
    fn descending_pages_are_not_merged() {
        let (_, n) = segs(&[0x30_0000, 0x20_0000, 0x10_0000], u64::MAX);
        assert_eq!(n, 3);
    }

    #[test]
    fn device_max_segment_size_caps_entries() {
        let pages: [u64; 5] = core::array::from_fn(|i| 0x100_0000 + i as u64 * P);
        // 64 KiB is the kernel's default max segment size.
        let (s, n) = segs(&pages, 65536);
        assert_eq!(n, 5);
        assert!(s[..n].iter().all(|s| u64::from(s.len) == P));
        // A cap that is not a page multiple rounds down: 2 pages per entry.
        let (s, n) = segs(&pages, 3 * P - 1);
        assert_eq!(n, 3);
        assert_eq!(s[2].len, P as u32);
    }

    #[test]
    fn sg_length_type_caps_entries() {
        assert_eq!(
            segment_cap(u64::MAX, P),
            u64::from(u32::MAX) - (u64::from(u32::MAX) % P)
        );
        assert_eq!(segment_cap(100, P), P);
    }

    #[test]
    fn address_wraparound_is_not_contiguous() {
        let (_, n) = segs(&[u64::MAX - P + 1, 0], u64::MAX);
        assert_eq!(n, 2);
    }

    #[test]
    fn no_pages_no_segments() {
        assert_eq!(coalesce(&[], P, u64::MAX).count(), 0);
    }
}
