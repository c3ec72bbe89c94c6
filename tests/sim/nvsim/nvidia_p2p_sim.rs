// SPDX-License-Identifier: GPL-2.0

//! nvidia_p2p_sim: a simulated NVIDIA GPU driver for testing peer-memory
//! clients.  It exports the `nvidia_p2p_*` API with the real ABI and
//! enforces its contract (see docs/facts/nvidia-p2p.md): every violation
//! is counted, logged and WARNed, so a test sees exactly what a client did
//! wrong instead of a hang or memory corruption on a real cluster.

use kernel::prelude::*;

mod abi;
mod access;
mod bindings;
mod control;
#[path = "../common/counters.rs"]
mod counters;
mod entry;
mod gpu;
mod hooks;
mod latency;
mod lock;
mod mapping;
mod memory;
mod pin;
mod query;
mod retired;
#[path = "../common/slots.rs"]
mod slots;
mod sys;
#[path = "../common/text.rs"]
mod text;
mod violation;

module! {
    type: NvidiaP2pSim,
    name: "nvidia_p2p_sim",
    description: "Simulated NVIDIA P2P provider enforcing the nvidia_p2p contract (test only)",
    license: "GPL",
}

struct NvidiaP2pSim {
    glue: Option<sys::Glue>,
}

impl kernel::Module for NvidiaP2pSim {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let glue = sys::init()?;
        pr_info!(
            "simulated GPU ready: /dev/nvidia_p2p_sim, page tables v{:#010x}\n",
            sys::param::pt_version()
        );
        Ok(NvidiaP2pSim { glue: Some(glue) })
    }
}

impl Drop for NvidiaP2pSim {
    fn drop(&mut self) {
        drop(self.glue.take());
        lock::API.state().shutdown();
        sys::drain_object_cache();
        pr_info!("simulated GPU removed\n");
    }
}
