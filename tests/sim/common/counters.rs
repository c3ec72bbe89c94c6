// SPDX-License-Identifier: GPL-2.0

//! Counters indexed by a kind (an enum whose discriminants are 0..N): both
//! simulators count their contract violations, calls and events this way,
//! and the tests read them through the stats.

use core::sync::atomic::{AtomicU64, Ordering};

/// `N` counters, all starting at zero.
pub(crate) struct Counters<const N: usize>([AtomicU64; N]);

impl<const N: usize> Counters<N> {
    /// All zero.
    pub(crate) const fn new() -> Self {
        Counters([const { AtomicU64::new(0) }; N])
    }

    /// Counts one of kind `i`.
    pub(crate) fn add(&self, i: usize) {
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n` to kind `i`.
    pub(crate) fn add_n(&self, i: usize, n: u64) {
        self.0[i].fetch_add(n, Ordering::Relaxed);
    }

    /// How many of kind `i` were counted.
    pub(crate) fn get(&self, i: usize) -> u64 {
        self.0[i].load(Ordering::Relaxed)
    }

    /// Zeroes kind `i`.
    pub(crate) fn clear(&self, i: usize) {
        self.0[i].store(0, Ordering::Relaxed);
    }

    /// The sum over all kinds.
    pub(crate) fn total(&self) -> u64 {
        self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Zeroes every kind.
    pub(crate) fn reset(&self) {
        for c in &self.0 {
            c.store(0, Ordering::Relaxed);
        }
    }
}
