//! The buffers a test writes between: page-aligned host memory or GPU
//! memory, each with a way to fill it with a pattern and read it back.

use crate::cuda::{CudaError, GpuBuf};
use std::alloc::{alloc_zeroed, dealloc, Layout};

/// Host memory aligned to 64 KiB (like the GPU's pages).
pub struct HostBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl HostBuf {
    pub fn new(size: usize) -> HostBuf {
        let size = size.max(1).div_ceil(4096) * 4096;
        let layout = Layout::from_size_align(size, 64 << 10).expect("buffer size fits a Layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        HostBuf { ptr, layout }
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr owns layout.size() initialised bytes; the NIC writes them
        // only while a test waits for completions, never while a slice is read.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// Where a buffer lives.
pub enum Buffer {
    Host(HostBuf),
    Gpu(GpuBuf),
}

impl Buffer {
    pub fn addr(&self) -> u64 {
        match self {
            Buffer::Host(h) => h.ptr as u64,
            Buffer::Gpu(g) => g.addr(),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Buffer::Host(h) => h.layout.size(),
            Buffer::Gpu(g) => g.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn is_gpu(&self) -> bool {
        matches!(self, Buffer::Gpu(_))
    }
    /// Copies `data` to the start of the buffer.
    pub fn store(&mut self, data: &[u8]) -> Result<(), CudaError> {
        match self {
            Buffer::Host(h) => {
                let n = data.len().min(h.layout.size());
                h.as_mut_slice()[..n].copy_from_slice(&data[..n]);
                Ok(())
            }
            Buffer::Gpu(g) => g.upload(data),
        }
    }
    /// The first `n` bytes.
    pub fn load(&self, n: usize) -> Result<Vec<u8>, CudaError> {
        match self {
            Buffer::Host(h) => Ok(h.as_slice()[..n.min(h.layout.size())].to_vec()),
            Buffer::Gpu(g) => {
                let mut v = vec![0u8; n.min(g.len())];
                g.download(&mut v)?;
                Ok(v)
            }
        }
    }
}

/// A deterministic byte pattern: xorshift64* from `seed`, so that every
/// offset of every run and path holds a different, checkable value.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The first offset where `got` differs from `want`, and how many differ.
pub fn compare(want: &[u8], got: &[u8]) -> Option<(usize, usize)> {
    if want.len() != got.len() {
        return Some((want.len().min(got.len()), want.len().abs_diff(got.len())));
    }
    let first = want.iter().zip(got).position(|(a, b)| a != b)?;
    let count = want[first..]
        .iter()
        .zip(&got[first..])
        .filter(|(a, b)| a != b)
        .count();
    Some((first, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_seed_and_offset() {
        let a = pattern(1, 4096);
        let b = pattern(2, 4096);
        assert_eq!(a.len(), 4096);
        assert_ne!(a, b);
        assert_eq!(a, pattern(1, 4096));
        // Not a short repeating sequence.
        assert_ne!(a[..64], a[64..128]);
    }

    #[test]
    fn compare_finds_first_and_count() {
        let a = pattern(7, 1000);
        let mut b = a.clone();
        assert_eq!(compare(&a, &b), None);
        b[10] ^= 1;
        b[900] ^= 0x80;
        assert_eq!(compare(&a, &b), Some((10, 2)));
        assert_eq!(compare(&a, &a[..500]), Some((500, 500)));
    }

    #[test]
    fn host_buffers_are_aligned_and_round_trip() {
        let mut h = Buffer::Host(HostBuf::new(10_000));
        assert_eq!(h.addr() % (64 << 10), 0);
        assert_eq!(h.len(), 12288);
        let p = pattern(3, 12288);
        h.store(&p).unwrap();
        assert_eq!(h.load(12288).unwrap(), p);
    }
}
