// SPDX-License-Identifier: GPL-2.0

//! How both simulators report a contract violation: each kind has a counter
//! that tests read (`violation.<name>=N` in the stats, then
//! `violations=N`), a log line naming it (`contract violation <name>:
//! <details>`), and a `WARN` the first time it fires (re-armed by a counter
//! reset).  Each simulator's `violation` module includes this one (with
//! `#[macro_use]`) and declares only its kinds ([`violation_kinds!`]) and
//! its event counters ([`counted_events!`]).

use core::ffi::CStr;
use core::fmt;
use core::marker::PhantomData;
use kernel::prelude::*;

use crate::counters::Counters;
use crate::sys;

/// A simulator's violation kinds: a fieldless enum whose discriminants are
/// its counter indices `0..ALL.len()`.
pub(crate) trait ViolationKind: Copy + 'static {
    /// Every kind, in counter order.
    const ALL: &'static [Self];

    /// The counter index (the discriminant).
    fn index(self) -> usize;

    /// The name tests see.
    fn name(self) -> &'static CStr;

    /// The name as `&str`.
    fn str(self) -> &'static str {
        self.name().to_str().unwrap_or("?")
    }
}

/// The `N` violation counters of kinds `K`.
pub(crate) struct Violations<K, const N: usize> {
    counts: Counters<N>,
    kinds: PhantomData<K>,
}

impl<K: ViolationKind, const N: usize> Violations<K, N> {
    /// All zero (`N` must be `K::ALL.len()`).
    pub(crate) const fn new() -> Self {
        assert!(K::ALL.len() == N);
        Self {
            counts: Counters::new(),
            kinds: PhantomData,
        }
    }

    /// Records one violation: counter, log line, WARN (once per kind).
    pub(crate) fn report(&self, kind: K, what: fmt::Arguments<'_>) {
        self.counts.add(kind.index());
        pr_err!("contract violation {}: {}\n", kind.str(), what);
        sys::warn_once(kind.index() as u32, kind.name());
    }

    /// The count of `kind`.
    pub(crate) fn count(&self, kind: K) -> u64 {
        self.counts.get(kind.index())
    }

    /// The sum over all kinds.
    pub(crate) fn total(&self) -> u64 {
        self.counts.total()
    }

    /// The stats lines: `violation.<name>=N` per kind, then `violations=N`.
    pub(crate) fn write_stats(&self, t: &mut impl fmt::Write) -> fmt::Result {
        for &k in K::ALL {
            writeln!(t, "violation.{}={}", k.str(), self.count(k))?;
        }
        writeln!(t, "violations={}", self.total())
    }

    /// Zeroes every counter and re-arms the WARNs.
    pub(crate) fn reset(&self) {
        self.counts.reset();
        sys::rearm_warnings();
    }
}

/// Declares a simulator's violation kinds from one list of documented
/// variants and their names: the enum `Kind` (discriminants are the counter
/// indices), `KINDS`, its [`ViolationKind`] impl, the counters
/// `VIOLATIONS` and `report`.
macro_rules! violation_kinds {
    ($(#[$doc:meta])* pub(crate) enum Kind {
        $($(#[$vdoc:meta])* $kind:ident => $name:literal,)*
    }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq)]
        #[repr(u32)]
        pub(crate) enum Kind {
            $($(#[$vdoc])* $kind,)*
        }

        /// Every kind, in counter order.
        pub(crate) const KINDS: &[Kind] = &[$(Kind::$kind),*];

        impl ViolationKind for Kind {
            const ALL: &'static [Self] = KINDS;

            fn index(self) -> usize {
                self as usize
            }

            fn name(self) -> &'static core::ffi::CStr {
                match self {
                    $(Kind::$kind => $name,)*
                }
            }
        }

        /// The violation counters.
        pub(crate) static VIOLATIONS: Violations<Kind, { KINDS.len() }> = Violations::new();

        /// Records one violation: counter, log line, WARN (once per kind).
        pub(crate) fn report(kind: Kind, what: core::fmt::Arguments<'_>) {
            VIOLATIONS.report(kind, what);
        }
    };
}

/// Declares a simulator's counted events (not violations) from one list of
/// documented variants and their stats names: the enum, the list `$list`
/// of `(event, name)` in counter order, the counters `$counts`, and
/// `count`, `get` and `reset` on each event.
macro_rules! counted_events {
    ($(#[$doc:meta])* pub(crate) enum $ty:ident in $list:ident, $counts:ident {
        $($(#[$vdoc:meta])* $ev:ident => $name:literal,)*
    }) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        #[repr(usize)]
        pub(crate) enum $ty {
            $($(#[$vdoc])* $ev,)*
        }

        /// Every event with its name, in counter order.
        pub(crate) const $list: &[($ty, &str)] = &[$(($ty::$ev, $name)),*];

        static $counts: Counters<{ $list.len() }> = Counters::new();

        impl $ty {
            /// Counts one event.
            pub(crate) fn count(self) {
                $counts.add(self as usize);
            }

            /// The events counted so far.
            pub(crate) fn get(self) -> u64 {
                $counts.get(self as usize)
            }

            /// Zeroes the counter.
            #[allow(dead_code)]
            pub(crate) fn reset(self) {
                $counts.clear(self as usize);
            }
        }
    };
}
