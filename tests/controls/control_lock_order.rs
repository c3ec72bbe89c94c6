// SPDX-License-Identifier: GPL-2.0

//! Negative control: two locks taken in both orders (an ABBA inversion that
//! does not deadlock here because one thread does both).  Lockdep on the
//! debug kernel must report a possible circular locking dependency.

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

module! {
    type: ControlLockOrder,
    name: "control_lock_order",
    description: "bench negative control: lock inversion (lockdep must report it)",
    license: "GPL",
}

#[pin_data]
struct Pair {
    #[pin]
    a: Mutex<u32>,
    #[pin]
    b: Mutex<u32>,
}

struct ControlLockOrder;

impl kernel::Module for ControlLockOrder {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let pair = Arc::pin_init(
            pin_init!(Pair {
                a <- new_mutex!(0, "control_lock_order::a"),
                b <- new_mutex!(0, "control_lock_order::b"),
            }),
            GFP_KERNEL,
        )?;
        {
            let mut a = pair.a.lock();
            let mut b = pair.b.lock();
            *a += 1;
            *b += 1;
        }
        {
            let mut b = pair.b.lock();
            let mut a = pair.a.lock();
            *a += 1;
            *b += 1;
        }
        pr_info!("control_lock_order: took a->b and b->a\n");
        Ok(ControlLockOrder)
    }
}
