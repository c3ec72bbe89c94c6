// SPDX-License-Identifier: GPL-2.0

//! The pure logic of peermem_rs: no kernel calls, no allocation, no unsafe.
//!
//! Each file is compiled twice: into the kernel module (rust/logic.rs
//! includes them with `#[path]`) and into this host crate, so `cargo test`
//! covers range math, SG coalescing, version rules, the registration
//! state machine and the fence of late driver calls.

#![no_std]

pub mod coalesce;
pub mod fence;
pub mod histogram;
pub mod range;
pub mod state;
pub mod version;
