// SPDX-License-Identifier: GPL-2.0

//! Bindings generated at build time by bindgen (rust/bindgen.mk) from our
//! ABI headers, the simulators' own headers and the kernel headers we use.
//! The generated code stays private; only what the crate needs is
//! re-exported, after the ABI layout is checked against the facts.

include!("../../../rust/bindgen_module.rs");
bindgen_module!("nvsim_generated.rs");

pub(crate) use generated::*;

include!("../../../rust/abi_layout.rs");
