// SPDX-License-Identifier: GPL-2.0

//! Simulated device memory: an allocation's 64 KiB GPU pages, backed by real
//! pages so that physical (and, here, DMA) addresses are real, placed
//! according to a layout so SG coalescing in a client is testable -- or,
//! for huge allocations, not backed at all (`sparse`): synthetic bus
//! addresses far above any RAM, computed, never stored per page.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

use crate::sys::{self, PageBlock};

/// The GPU page size every current driver hands out.
pub(crate) const GPU_PAGE: u64 = 1 << 16;
/// `alloc_pages` order of one GPU page (4 KiB base pages).
const GPU_PAGE_ORDER: u32 = 4;
/// The largest block tried at once: order 10, 4 MiB = 64 GPU pages.
const MAX_RUN: usize = 64;

/// Physical placement of an allocation's GPU pages.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Physically contiguous as far as the page allocator allows.
    Contiguous,
    /// Runs of this many contiguous GPU pages, no run adjacent to the next.
    Fragmented(usize),
    /// Every GPU page apart and in random order.
    Shuffled,
    /// No backing pages; synthetic bus addresses, contiguous (0) or with a
    /// one-page gap after every this many pages.
    Sparse(usize),
}

impl Layout {
    /// The layout of a `struct nvsim_alloc`.
    pub(crate) fn from_uapi(layout: u32, run_pages: u32) -> Result<Self> {
        match layout {
            crate::bindings::NVSIM_LAYOUT_CONTIGUOUS => Ok(Layout::Contiguous),
            crate::bindings::NVSIM_LAYOUT_FRAGMENTED => match run_pages as usize {
                n @ 1..=MAX_RUN => Ok(Layout::Fragmented(n)),
                _ => Err(EINVAL),
            },
            crate::bindings::NVSIM_LAYOUT_SHUFFLED => Ok(Layout::Shuffled),
            crate::bindings::NVSIM_LAYOUT_SPARSE => Ok(Layout::Sparse(run_pages as usize)),
            _ => Err(EINVAL),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::Contiguous => f.write_str("contiguous"),
            Layout::Fragmented(n) => write!(f, "fragmented:{n}"),
            Layout::Shuffled => f.write_str("shuffled"),
            Layout::Sparse(0) => f.write_str("sparse"),
            Layout::Sparse(n) => write!(f, "sparse:{n}"),
        }
    }
}

/// Where sparse allocations' synthetic bus addresses start (far above the
/// VM's RAM), and how far apart two sparse allocations are.
const SPARSE_BASE: u64 = 1 << 52;
const SPARSE_STRIDE: u64 = 1 << 41;
static SPARSE_NEXT: AtomicU64 = AtomicU64::new(0);

/// One GPU page backed by real memory.
#[derive(Clone, Copy)]
struct Backing {
    /// Its physical (here also bus) address.
    phys: u64,
    /// The index of the block holding it in `Memory::blocks`.
    block: usize,
}

/// The GPU pages of one allocation.
pub(crate) struct Memory {
    /// The blocks backing the pages (freed on drop; none when sparse).
    blocks: KVec<PageBlock>,
    /// Each GPU page, in VA order (none when sparse).
    pages: KVVec<Backing>,
    /// `(physical address, page index)` of every page, sorted: the BAR's
    /// decoder (a bus address to the page it hits).
    by_phys: KVVec<(u64, usize)>,
    /// Sparse: (first bus address, pages per run or 0, number of pages).
    sparse: Option<(u64, usize, usize)>,
}

/// The order of a block holding `n` GPU pages (n a power of two or not).
fn order_for(n: usize) -> u32 {
    GPU_PAGE_ORDER + n.next_power_of_two().trailing_zeros()
}

impl Memory {
    /// Allocates `npages` GPU pages placed as `layout` says.
    pub(crate) fn new(npages: usize, layout: Layout) -> Result<Self> {
        if let Layout::Sparse(run) = layout {
            let n = SPARSE_NEXT.fetch_add(1, Ordering::Relaxed) % 1024;
            return Ok(Memory {
                blocks: KVec::new(),
                pages: KVVec::new(),
                by_phys: KVVec::new(),
                sparse: Some((SPARSE_BASE + n * SPARSE_STRIDE, run, npages)),
            });
        }
        let mut m = Memory {
            blocks: KVec::new(),
            pages: KVVec::with_capacity(npages, GFP_KERNEL)?,
            by_phys: KVVec::with_capacity(npages, GFP_KERNEL)?,
            sparse: None,
        };
        match layout {
            Layout::Sparse(_) => {}
            Layout::Contiguous => m.fill_contiguous(npages)?,
            Layout::Fragmented(run) => m.fill_runs(npages, run)?,
            Layout::Shuffled => {
                m.fill_runs(npages, 1)?;
                m.shuffle();
            }
        }
        for (i, p) in m.pages.iter().enumerate() {
            m.by_phys.push((p.phys, i), GFP_KERNEL)?;
        }
        crate::query::heap_sort(&mut m.by_phys);
        Ok(m)
    }

    /// Greedy: the largest power-of-two block that fits, halving on failure.
    fn fill_contiguous(&mut self, npages: usize) -> Result {
        while self.pages.len() < npages {
            let left = npages - self.pages.len();
            let mut n = MAX_RUN.min(left);
            if !n.is_power_of_two() {
                n = n.next_power_of_two() / 2;
            }
            let block = loop {
                match PageBlock::new(order_for(n)) {
                    Ok(b) => break b,
                    Err(e) if n == 1 => return Err(e),
                    Err(_) => n /= 2,
                }
            };
            self.add_block(block, n)?;
        }
        Ok(())
    }

    /// Runs of `run` pages; a block that lands right after the previous run
    /// is set aside (and freed at the end) so runs never touch.
    fn fill_runs(&mut self, npages: usize, run: usize) -> Result {
        let mut spare = KVec::new();
        while self.pages.len() < npages {
            let take = run.min(npages - self.pages.len());
            let mut block = PageBlock::new(order_for(run))?;
            let mut tries = 0;
            while self
                .pages
                .last()
                .is_some_and(|last| last.phys + GPU_PAGE == block.phys())
                && tries < 8
            {
                let next = PageBlock::new(order_for(run))?;
                spare.push(core::mem::replace(&mut block, next), GFP_KERNEL)?;
                tries += 1;
            }
            self.add_block(block, take)?;
        }
        drop(spare);
        Ok(())
    }

    fn add_block(&mut self, block: PageBlock, use_pages: usize) -> Result {
        let base = block.phys();
        let usable = (block.size() / GPU_PAGE) as usize;
        let index = self.blocks.len();
        self.blocks.push(block, GFP_KERNEL)?;
        for i in 0..use_pages.min(usable) {
            self.pages.push(
                Backing {
                    phys: base + i as u64 * GPU_PAGE,
                    block: index,
                },
                GFP_KERNEL,
            )?;
        }
        Ok(())
    }

    /// Random order (Fisher-Yates), then no page directly after its
    /// predecessor, so nothing coalesces.
    fn shuffle(&mut self) {
        let p = &mut self.pages[..];
        for i in (1..p.len()).rev() {
            let j = sys::random_u32() as usize % (i + 1);
            p.swap(i, j);
        }
        for _pass in 0..4 {
            let mut clean = true;
            for i in 1..p.len() {
                if p[i].phys == p[i - 1].phys + GPU_PAGE {
                    clean = false;
                    let j = (i + 1 + sys::random_u32() as usize % p.len()) % p.len();
                    p.swap(i, j);
                }
            }
            if clean {
                break;
            }
        }
    }

    /// The number of GPU pages.
    pub(crate) fn npages(&self) -> usize {
        match self.sparse {
            Some((_, _, n)) => n,
            None => self.pages.len(),
        }
    }

    /// The bus address of GPU page `i`.
    pub(crate) fn page(&self, i: usize) -> Option<u64> {
        match self.sparse {
            Some((base, run, n)) if i < n => {
                let gaps = if run == 0 { 0 } else { i / run };
                Some(base + (i + gaps) as u64 * GPU_PAGE)
            }
            Some(_) => None,
            None => self.pages.get(i).map(|p| p.phys),
        }
    }

    /// The index of the GPU page holding bus address `bus`, if it is one of
    /// this memory's (never for sparse memory: nothing backs it).
    pub(crate) fn page_at(&self, bus: u64) -> Option<usize> {
        let base = bus & !(GPU_PAGE - 1);
        let i = self.by_phys.binary_search_by(|&(p, _)| p.cmp(&base)).ok()?;
        self.by_phys.get(i).map(|&(_, page)| page)
    }

    /// Reads (or, with `write`, writes) `buf.len()` bytes at byte `off` of
    /// the memory, page by page: the CPU's view through its own pages.
    /// ENXIO on sparse memory, EFAULT past the end.
    pub(crate) fn access(&self, off: u64, buf: &mut [u8], write: bool) -> Result {
        if self.sparse.is_some() {
            return Err(ENXIO);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let at = off + done as u64;
            let page = self.pages.get((at / GPU_PAGE) as usize).ok_or(EFAULT)?;
            let block = self.blocks.get(page.block).ok_or(EFAULT)?;
            let in_page = at % GPU_PAGE;
            let n = ((GPU_PAGE - in_page) as usize).min(buf.len() - done);
            let at_block = page.phys - block.phys() + in_page;
            let part = &mut buf[done..done + n];
            if write {
                block.write(at_block, part)?;
            } else {
                block.read(at_block, part)?;
            }
            done += n;
        }
        Ok(())
    }

    /// The contiguous runs `(start, end)` of pages `first..first + n`.
    pub(crate) fn runs_of(&self, first: usize, n: usize) -> Result<KVVec<(u64, u64)>> {
        let mut v: KVVec<(u64, u64)> = KVVec::new();
        for i in first..first + n {
            let a = self.page(i).ok_or(EINVAL)?;
            match v.last_mut() {
                Some(last) if last.1 == a => last.1 = a + GPU_PAGE,
                _ => v.push((a, a + GPU_PAGE), GFP_KERNEL)?,
            }
        }
        Ok(v)
    }

    /// How many physically contiguous runs the pages form.
    pub(crate) fn runs(&self) -> usize {
        if let Some((_, run, n)) = self.sparse {
            return if run == 0 {
                usize::from(n > 0)
            } else {
                n.div_ceil(run)
            };
        }
        let n = self.npages();
        let mut runs = 0;
        let mut prev = None;
        for i in 0..n {
            let a = self.page(i);
            if i == 0 || a != prev.map(|p| p + GPU_PAGE) {
                runs += 1;
            }
            prev = a;
        }
        runs
    }
}
