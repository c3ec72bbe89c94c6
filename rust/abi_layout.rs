// SPDX-License-Identifier: GPL-2.0

// abi_layout.rs -- compile-time checks of the two external ABIs on the Rust
// side (the C side checks the same in include/*.h).  Included by every crate
// that binds those headers, after it has the generated types in scope.

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<nvidia_p2p_page>() == 32);
    assert!(size_of::<nvidia_p2p_page_table>() == 40);
    assert!(offset_of!(nvidia_p2p_page_table, pages) == 8);
    assert!(offset_of!(nvidia_p2p_page_table, entries) == 16);
    assert!(offset_of!(nvidia_p2p_page_table, gpu_uuid) == 24);
    assert!(offset_of!(nvidia_p2p_page_table, flags) == 32);
    assert!(size_of::<nvidia_p2p_dma_mapping>() == 40);
    assert!(offset_of!(nvidia_p2p_dma_mapping, entries) == 8);
    assert!(offset_of!(nvidia_p2p_dma_mapping, dma_addresses) == 16);
    assert!(offset_of!(nvidia_p2p_dma_mapping, pci_dev) == 32);
    assert!(size_of::<peer_memory_client>() == 136);
    assert!(offset_of!(peer_memory_client, acquire) == 80);
    assert!(offset_of!(peer_memory_client, release) == 128);
    assert!(size_of::<peer_memory_client_ex>() == 152);
    assert!(offset_of!(peer_memory_client_ex, ex_size) == 136);
    assert!(offset_of!(peer_memory_client_ex, flags) == 144);
};
