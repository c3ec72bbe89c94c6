// SPDX-License-Identifier: GPL-2.0

//! Version rules of the NVIDIA P2P structures: the first `u32` of a page
//! table or DMA mapping is `major << 16 | minor`; a structure is usable when
//! its major equals the one we know and its minor is at least ours.

/// Page tables of drivers 515..575 (no `flags` field).
pub const PAGE_TABLE_V1: u32 = 0x0001_0002;
/// Page tables of drivers 580 and later (adds `flags`).
pub const PAGE_TABLE_V2: u32 = 0x0002_0000;
/// DMA mappings.
pub const DMA_MAPPING: u32 = 0x0002_0003;

/// Major part of a version word.
pub fn major(v: u32) -> u32 {
    v >> 16
}

/// Minor part of a version word.
pub fn minor(v: u32) -> u32 {
    v & 0xffff
}

/// Whether a structure of version `have` can be read as version `want`.
pub fn compatible(have: u32, want: u32) -> bool {
    major(have) == major(want) && minor(have) >= minor(want)
}

/// The page-table layouts we can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageTableLayout {
    /// 32 bytes: no `flags` field (reading it would be out of bounds).
    V1,
    /// 40 bytes: with `flags`.
    V2,
}

/// Classifies a page-table version word, or `None` for a layout we do not
/// know (an unknown major, or a minor older than the one we need).
pub fn page_table_layout(v: u32) -> Option<PageTableLayout> {
    if compatible(v, PAGE_TABLE_V2) {
        Some(PageTableLayout::V2)
    } else if compatible(v, PAGE_TABLE_V1) {
        Some(PageTableLayout::V1)
    } else {
        None
    }
}

/// Whether a DMA mapping of version `v` can be read.
pub fn dma_mapping_ok(v: u32) -> bool {
    compatible(v, DMA_MAPPING)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_table_versions() {
        assert_eq!(page_table_layout(0x0001_0002), Some(PageTableLayout::V1));
        assert_eq!(page_table_layout(0x0001_0007), Some(PageTableLayout::V1));
        assert_eq!(page_table_layout(0x0001_0001), None);
        assert_eq!(page_table_layout(0x0002_0000), Some(PageTableLayout::V2));
        assert_eq!(page_table_layout(0x0002_0005), Some(PageTableLayout::V2));
        assert_eq!(page_table_layout(0x0003_0000), None);
        assert_eq!(page_table_layout(0), None);
    }

    #[test]
    fn dma_mapping_versions() {
        assert!(dma_mapping_ok(0x0002_0003));
        assert!(dma_mapping_ok(0x0002_0004));
        assert!(!dma_mapping_ok(0x0002_0002));
        assert!(!dma_mapping_ok(0x0001_0003));
    }
}
