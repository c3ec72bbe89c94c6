// SPDX-License-Identifier: GPL-2.0

//! Bindings generated at build time by bindgen (rust/bindgen.mk) from our
//! ABI headers, the simulators' own headers and the kernel headers we use.
//! The generated code stays private; only what the crate needs is
//! re-exported, after the ABI layout is checked against the facts.

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    unreachable_pub,
    improper_ctypes,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::pedantic,
    clippy::nursery,
    clippy::restriction
)]
mod generated {
    use kernel::ffi;
    include!("nvsim_generated.rs");
}

pub(crate) use generated::*;

include!("../../../rust/abi_layout.rs");
