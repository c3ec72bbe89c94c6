// SPDX-License-Identifier: GPL-2.0

//! peer_core_sim: a simulated RDMA core + HCA for testing peer-memory
//! clients.  It exports `ib_register_peer_memory_client` /
//! `ib_unregister_peer_memory_client` with the real ABI (including the
//! `_ex` extension and `PEER_MEM_INVALIDATE_UNMAPS`), drives clients as the
//! real core does (docs/facts/peer-memory-core.md), and checks what they
//! return: every violation is counted, logged and WARNed.

use kernel::prelude::*;

mod bindings;
mod client;
mod control;
#[allow(dead_code)] // `clear`: only the GPU resets single counters
#[path = "../common/counters.rs"]
mod counters;
mod device;
mod entry;
mod hca;
mod hooks;
mod mr;
mod peer;
mod reg;
mod sgcheck;
#[path = "../common/slots.rs"]
mod slots;
mod sys;
mod tables;
#[path = "../common/text.rs"]
mod text;
mod violation;

module! {
    type: PeerCoreSim,
    name: "peer_core_sim",
    description: "Simulated RDMA peer-memory core and HCA enforcing the peer-memory contract (test only)",
    license: "GPL",
}

struct PeerCoreSim {
    glue: Option<sys::Glue>,
}

impl kernel::Module for PeerCoreSim {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let glue = sys::init()?;
        let mut t = tables::TABLES.lock();
        t.set_hca(Some(sys::Hca::get()));
        let hca = t.dma_device().map(|d| d.name()).unwrap_or("none");
        drop(t);
        pr_info!(
            "simulated RDMA core ready: /dev/peer_core_sim, HCA {}, variant {} (honour_unmaps={} memory_peers={} sg_regime={})\n",
            hca,
            sys::param_variant(),
            u8::from(sys::param_honour_unmaps()),
            u8::from(sys::param_memory_peers()),
            if sys::param_page_shift() { "page_shift" } else { "trim" }
        );
        Ok(PeerCoreSim { glue: Some(glue) })
    }
}

impl Drop for PeerCoreSim {
    fn drop(&mut self) {
        let hca = tables::TABLES.lock().set_hca(None);
        drop(hca);
        tables::TABLES.lock().clear();
        client::PEERS.lock().clear();
        drop(self.glue.take());
        pr_info!("simulated RDMA core removed\n");
    }
}
