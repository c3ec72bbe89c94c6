// SPDX-License-Identifier: GPL-2.0

//! Differences between the kernel crates this module is built against,
//! selected by cfgs that Kbuild derives from the kernel's VERSION and
//! PATCHLEVEL.  Nothing else in the crate looks at the kernel version.
//!
//! Every kernel-crate item the module uses has the same path and signature
//! from Linux 7.0 through 7.3 (docs/facts/kernel-crate-versions.md: 7.2 and
//! 7.3 read and built, 7.0 read), except `EOPNOTSUPP`, below.  Before 6.19
//! the crate's `CStr` is its own type, which the module does not support.

use kernel::error::Error;

// `cfg(peermem_kernel_own_cstr)`: a kernel crate older than 6.19, whose
// prelude `CStr` is `kernel::str::CStr` rather than `core::ffi::CStr`, so
// that the C-string literals (`c"..."`) of this crate do not type-check.
// Say so once instead of a page of type errors.
#[cfg(peermem_kernel_own_cstr)]
compile_error!(
    "peermem-rs needs the kernel crate of Linux 6.19 or later (its CStr is \
     core::ffi::CStr from 6.19 on); this kernel's crate has a CStr of its own"
);

/// The kernel series this module was built for, for log lines.
#[cfg(peermem_kernel_6)]
pub(crate) const KERNEL_SERIES: &str = "6.x";
/// The kernel series this module was built for, for log lines.
#[cfg(not(peermem_kernel_6))]
pub(crate) const KERNEL_SERIES: &str = "7.x";

/// `EOPNOTSUPP`: only the 7.3 kernel crate has a constant for it (7.0 and
/// 7.2 do not), so it is made from the errno number on every kernel.
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-(kernel::bindings::EOPNOTSUPP as i32))
}
