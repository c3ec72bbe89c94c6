// SPDX-License-Identifier: GPL-2.0

//! The NVIDIA P2P API (nvidia.ko): pinning GPU memory ([`PageTable`]),
//! DMA-mapping it for a peer PCI device ([`DmaMapping`]), and the rules that
//! keep the driver's objects valid while we use them ([`Pins`]; the free
//! callback's reference is in rust/nvidia/callback.rs).
//!
//! Ownership: a `PageTable` is one pin.  It ends in exactly one of two ways:
//! [`NvidiaP2p::unpin`] (we release it), or the driver's free callback
//! (cudaFree; the driver releases it after the callback returned).  The same
//! holds for a `DmaMapping` with [`NvidiaP2p::dma_unmap`].  While a
//! registration keeps them in its [`Pins`], they are valid; the free
//! callback can only complete through [`Pins::revoke`], which forgets them.
//! The callback's `data` is a small [`Tombstone`], not the registration: a
//! put the driver answered with 0 but the module could not confirm
//! (rust/nvidia/probe.rs) leaves it armed until the callback.  The one
//! exception to "a kept table is valid", another user of the API in the same
//! process whose late put released our pin, is detected where it can be
//! ([`HeldTables`]: a newer pin of ours at the same table address).

use core::ffi::c_void;

mod api;
mod callback;
mod held;
mod mapping;
mod pins;
mod probe;
mod table;

pub(crate) use api::{is_enotsupp, Missing, NvidiaP2p, Unpin, Unpinned};
pub(crate) use callback::{
    Armed, CallbackRan, CallbackRef, Disarmed, Revocable, Revocation, Tombstone,
};
pub(crate) use held::HeldTables;
pub(crate) use mapping::PciDev;
use mapping::{DmaMapping, MapArgs, UnmapArgs, Unmapped};
pub(crate) use mapping::{UnmapReturned, UnmapSink};
pub(crate) use pins::{Adopt, Pins};
pub(crate) use probe::Unconfirmed;
pub(crate) use table::PageTable;

/// The callback the driver runs when pinned memory is freed under a pin.
pub(crate) type FreeCallback = unsafe extern "C" fn(data: *mut c_void);
