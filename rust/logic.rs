// SPDX-License-Identifier: GPL-2.0

//! The pure logic of the module (range math, SG coalescing, version rules,
//! the registration state machine).  The same files build as the host crate
//! `rust/logic` so that `cargo test` covers them.

#[allow(unreachable_pub, dead_code)]
#[path = "logic/coalesce.rs"]
pub(crate) mod coalesce;
#[allow(unreachable_pub, dead_code)]
#[path = "logic/gate.rs"]
pub(crate) mod gate;
#[allow(unreachable_pub, dead_code)]
#[path = "logic/histogram.rs"]
pub(crate) mod histogram;
#[allow(unreachable_pub, dead_code)]
#[path = "logic/range.rs"]
pub(crate) mod range;
#[allow(unreachable_pub, dead_code)]
#[path = "logic/state.rs"]
pub(crate) mod state;
#[allow(unreachable_pub, dead_code)]
#[path = "logic/version.rs"]
pub(crate) mod version;
