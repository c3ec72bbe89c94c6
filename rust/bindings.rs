// SPDX-License-Identifier: GPL-2.0

//! Bindings generated at build time by bindgen (rust/bindgen.mk) from our
//! ABI headers in `include/` and our C glue (`rust/glue.h`).  The generated
//! code stays in the private `generated` module; only what the crate needs
//! is re-exported, after its layout is checked against the facts.

include!("bindgen_module.rs");
bindgen_module!("bindings_generated.rs");

pub(crate) use generated::{
    device, invalidate_peer_memory, nvidia_p2p_dma_mapping, nvidia_p2p_page, nvidia_p2p_page_table,
    pci_dev, peer_memory_client, peer_memory_client_ex, sg_table, IB_PEER_MEMORY_NAME_MAX,
    IB_PEER_MEMORY_VER_MAX, NVIDIA_P2P_FLAGS_DEFAULT, NVIDIA_P2P_PAGE_SIZE_64KB,
    PEERMEM_SG_TABLE_SIZE, PEER_MEM_INVALIDATE_UNMAPS,
};

/// The C glue of the module (rust/glue.c).
pub(crate) mod glue {
    pub(crate) use super::generated::{
        peermem_binding, peermem_core_api, peermem_core_api_get, peermem_core_lists_client_name,
        peermem_current_exiting, peermem_current_process, peermem_dev_to_pci,
        peermem_dma_max_seg_size, peermem_module_get, peermem_module_name, peermem_module_put,
        peermem_now_ns, peermem_nvidia_api, peermem_nvidia_api_get, peermem_param_client_name,
        peermem_param_mode, peermem_sg_alloc, peermem_sg_first, peermem_sg_free, peermem_sg_lend,
        peermem_sg_next, peermem_sg_set_dma, peermem_unversioned_refused, peermem_user_log_allowed,
        peermem_version, peermem_warn_spurious_callback, peermem_wq_alloc, peermem_wq_destroy,
        workqueue_struct,
    };
}

include!("abi_layout.rs");

// The SG table we keep by value must be the kernel's, byte for byte.
const _: () = assert!(core::mem::size_of::<sg_table>() == PEERMEM_SG_TABLE_SIZE as usize);
