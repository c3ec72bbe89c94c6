// SPDX-License-Identifier: GPL-2.0

//! The NVIDIA P2P API (nvidia.ko): pinning GPU memory ([`PageTable`]),
//! DMA-mapping it for a peer PCI device ([`DmaMapping`]), the rules that
//! keep the driver's objects valid while we use them ([`Pins`]), and the
//! registry of revocable pins their free callback looks up by id
//! ([`Registry`]).
//!
//! Ownership: a `PageTable` is one pin.  It ends in exactly one of two ways:
//! [`NvidiaP2p::unpin`] (we release it), or the driver's free callback
//! (cudaFree; the driver releases it after the callback returned).  The same
//! holds for a `DmaMapping` with [`NvidiaP2p::dma_unmap`].  While a
//! registration keeps them in its [`Pins`], they are valid; the free
//! callback revokes them through [`Pins::revoke`], which forgets them.  The
//! one exception, another user of the API in the same process whose late
//! put releases our pin, no client can see (README, "What no client can
//! close").

use core::ffi::c_void;

mod api;
mod mapping;
mod pins;
mod probe;
mod registry;
mod table;

pub(crate) use api::{is_enotsupp, Missing, NvidiaP2p, Unpin};
pub(crate) use mapping::PciDev;
use mapping::{DmaMapping, MapArgs, UnmapArgs};
pub(crate) use pins::{Adopt, Pins};
pub(crate) use probe::Reach;
pub(crate) use registry::{Armed, PinId, Registry, Revocable};
pub(crate) use table::PageTable;

/// The callback the driver runs when pinned memory is freed under a pin.
pub(crate) type FreeCallback = unsafe extern "C" fn(data: *mut c_void);
