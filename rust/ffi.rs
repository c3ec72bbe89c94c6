// SPDX-License-Identifier: GPL-2.0

//! The C side of the module (rust/glue.c), seen from Rust.

use kernel::prelude::*;
use kernel::str::CStr;

extern "C" {
    fn peermem_version() -> *const kernel::ffi::c_char;
}

/// The module version (the repository's VERSION file).
pub(crate) fn version() -> &'static str {
    // SAFETY: `peermem_version` returns a pointer to a NUL-terminated string
    // literal in glue.c, valid for the lifetime of the module.
    let version = unsafe { CStr::from_char_ptr(peermem_version()) };
    version.to_str().unwrap_or("(invalid)")
}
