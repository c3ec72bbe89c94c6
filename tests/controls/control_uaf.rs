// SPDX-License-Identifier: GPL-2.0

//! Negative control: a planted use-after-free.  KASAN on the debug kernel
//! must report it, and the bench must fail the case that loaded it.

use kernel::prelude::*;

module! {
    type: ControlUaf,
    name: "control_uaf",
    description: "bench negative control: use-after-free (KASAN must report it)",
    license: "GPL",
}

struct ControlUaf;

impl kernel::Module for ControlUaf {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let b = KBox::new([0u64; 8], GFP_KERNEL)?;
        let p: *const u64 = &b[3];
        drop(b);
        // SAFETY: none -- this is the planted bug: `p` points into freed
        // memory; the read is volatile so it is not optimised away.
        let v = unsafe { core::ptr::read_volatile(p) };
        pr_info!("control_uaf: read {} from freed memory\n", v);
        Ok(ControlUaf)
    }
}
