// SPDX-License-Identifier: GPL-2.0

//! The pure logic of the module (range math, SG coalescing, version rules,
//! the registration state machine).  The same files build as the host crate
//! `rust/logic` so that `cargo test` covers them.

#[expect(unreachable_pub)]
#[path = "logic/coalesce.rs"]
pub(crate) mod coalesce;
#[expect(unreachable_pub)]
#[path = "logic/fence.rs"]
pub(crate) mod fence;
#[expect(unreachable_pub)]
#[path = "logic/histogram.rs"]
pub(crate) mod histogram;
#[expect(unreachable_pub, dead_code)]
#[path = "logic/range.rs"]
pub(crate) mod range;
#[expect(unreachable_pub)]
#[path = "logic/state.rs"]
pub(crate) mod state;
#[expect(unreachable_pub)]
#[path = "logic/version.rs"]
pub(crate) mod version;
