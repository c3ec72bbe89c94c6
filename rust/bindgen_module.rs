// SPDX-License-Identifier: GPL-2.0

// bindgen_module.rs -- the private module around bindgen's output
// (rust/bindgen.mk), written once for every crate that has generated
// bindings: the product (rust/bindings.rs) and both simulators
// (tests/sim/*/bindings.rs).  Included (`include!`) by a crate's bindings
// module, then invoked with the generated file's name; the name is
// resolved next to the invoking file, where Kbuild writes it:
//
//   bindgen_module!("foo_generated.rs");
//
// The generated code follows C's naming and is not ours to lint or
// document; only what the crate re-exports from `generated` is used.

macro_rules! bindgen_module {
    ($file:literal) => {
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
            include!($file);
        }
    };
}
