// SPDX-License-Identifier: GPL-2.0

//! Negative control: a module whose load fails (as a broken peermem_rs
//! would).  A case that insmods it must fail.

use kernel::prelude::*;

module! {
    type: ControlLoadFails,
    name: "control_load_fails",
    description: "bench negative control: init returns an error",
    license: "GPL",
}

struct ControlLoadFails;

impl kernel::Module for ControlLoadFails {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        pr_err!("control_load_fails: failing the load on purpose\n");
        Err(EIO)
    }
}
