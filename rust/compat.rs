// SPDX-License-Identifier: GPL-2.0

//! Differences between the kernel crates of the bench matrix (6.12 LTS and
//! 7.x), selected by `cfg(peermem_kernel_6)` which Kbuild derives from the
//! kernel being built against.  Nothing else in the crate looks at the
//! kernel version.

use kernel::error::Error;

/// The kernel series this module was built for, for log lines.
#[cfg(peermem_kernel_6)]
pub(crate) const KERNEL_SERIES: &str = "6.x";
/// The kernel series this module was built for, for log lines.
#[cfg(not(peermem_kernel_6))]
pub(crate) const KERNEL_SERIES: &str = "7.x";

/// `EOPNOTSUPP`: 6.12's kernel crate has no constant for it.
#[cfg(peermem_kernel_6)]
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-(kernel::bindings::EOPNOTSUPP as i32))
}

/// `EOPNOTSUPP`.
#[cfg(not(peermem_kernel_6))]
pub(crate) fn eopnotsupp() -> Error {
    kernel::error::code::EOPNOTSUPP
}
