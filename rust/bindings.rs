// SPDX-License-Identifier: GPL-2.0

//! Bindings generated at build time by bindgen (rust/bindgen.mk) from our
//! ABI headers in `include/` and the kernel headers we use.  The generated
//! code stays in the private `generated` module; only what the crate needs
//! is re-exported, after its layout is checked against the facts.

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    unreachable_pub,
    improper_ctypes,
    unsafe_op_in_unsafe_fn,
    clippy::all
)]
mod generated {
    use kernel::ffi;
    include!("bindings_generated.rs");
}

pub(crate) use generated::{
    nvidia_p2p_dma_mapping, nvidia_p2p_page, nvidia_p2p_page_table, peer_memory_client,
    peer_memory_client_ex,
};

include!("abi_layout.rs");
