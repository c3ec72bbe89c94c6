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

/// `EOPNOTSUPP`: only the 7.3 kernel crate has a constant for it (6.12 and
/// 7.2 do not), so it is made from the errno number on every kernel.
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-(kernel::bindings::EOPNOTSUPP as i32))
}
