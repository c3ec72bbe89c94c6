/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nv-p2p-abi.h -- our declaration of the NVIDIA P2P kernel API that
 * nvidia.ko exports (GPL-only): pinning GPU memory and DMA-mapping it for a
 * peer PCI device.  Written from the facts in docs/facts/nvidia-p2p.md
 * (layouts checked on x86_64, LP64).  Used by peermem_rs.ko (rust/glue.c,
 * rust/glue.h, and its Rust bindings generated from rust/bindings.h) and by
 * the simulated providers nvidia_p2p_sim*.ko (tests/sim/nvsim), so both
 * agree by construction, and by peer_core_sim.ko (tests/sim/coresim) and
 * the test clients simclient_*.ko (tests/simclients/simclient.c).  The
 * layout is asserted below and again
 * on the Rust side (rust/abi_layout.rs, included by every crate that binds
 * this header: rust/bindings.rs, tests/sim/nvsim/bindings.rs,
 * tests/sim/coresim/bindings.rs).
 */
#ifndef PEERMEM_NV_P2P_ABI_H
#define PEERMEM_NV_P2P_ABI_H

#include <linux/types.h>
#include <linux/build_bug.h>
#include <linux/stddef.h>

struct pci_dev;

/* Version words: major in the high 16 bits, minor in the low 16 bits. */
#define NVIDIA_P2P_VERSION_MAJOR(v)		((u32)(v) >> 16)
#define NVIDIA_P2P_VERSION_MINOR(v)		((u32)(v) & 0xffffu)
/* Page tables of drivers 515..575; 580 and later add `flags`. */
#define NVIDIA_P2P_PAGE_TABLE_VERSION_V1	0x00010002u
#define NVIDIA_P2P_PAGE_TABLE_VERSION_V2	0x00020000u
#define NVIDIA_P2P_DMA_MAPPING_VERSION		0x00020003u

/* enum nvidia_p2p_page_size_type, as stored in the u32 fields below. */
#define NVIDIA_P2P_PAGE_SIZE_4KB		0u
#define NVIDIA_P2P_PAGE_SIZE_64KB		1u
#define NVIDIA_P2P_PAGE_SIZE_128KB		2u
#define NVIDIA_P2P_PAGE_SIZE_COUNT		3u

/* Flags of the persistent calls. */
#define NVIDIA_P2P_FLAGS_DEFAULT		0u
#define NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING	1u
/* page_table->flags (v2 tables only). */
#define NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE 1u

/* The GPU page size every current driver hands out. */
#define NVIDIA_P2P_GPU_PAGE_SHIFT		16
#define NVIDIA_P2P_GPU_PAGE_SIZE		(1ull << NVIDIA_P2P_GPU_PAGE_SHIFT)

struct nvidia_p2p_page {
	u64 physical_address;
	/* Per-page request registers of old GPUs; unused by clients. */
	u32 request_registers[6];
};

struct nvidia_p2p_page_table {
	u32 version;
	u32 page_size;			/* NVIDIA_P2P_PAGE_SIZE_* */
	struct nvidia_p2p_page **pages;
	u32 entries;
	u8 *gpu_uuid;			/* 16 bytes */
	u32 flags;			/* v2 (major 2) only: v1 tables end before it */
};

struct nvidia_p2p_dma_mapping {
	u32 version;
	u32 page_size_type;		/* NVIDIA_P2P_PAGE_SIZE_* */
	u32 entries;
	u64 *dma_addresses;
	void *private;
	struct pci_dev *pci_dev;
};

/* Size of a v1 page table (everything before `flags`). */
#define NVIDIA_P2P_PAGE_TABLE_V1_SIZE		32u

static_assert(sizeof(struct nvidia_p2p_page) == 32);
static_assert(sizeof(struct nvidia_p2p_page_table) == 40);
static_assert(offsetof(struct nvidia_p2p_page_table, page_size) == 4);
static_assert(offsetof(struct nvidia_p2p_page_table, pages) == 8);
static_assert(offsetof(struct nvidia_p2p_page_table, entries) == 16);
static_assert(offsetof(struct nvidia_p2p_page_table, gpu_uuid) == 24);
static_assert(offsetof(struct nvidia_p2p_page_table, flags) == NVIDIA_P2P_PAGE_TABLE_V1_SIZE);
static_assert(sizeof(struct nvidia_p2p_dma_mapping) == 40);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, page_size_type) == 4);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, entries) == 8);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, dma_addresses) == 16);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, private) == 24);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, pci_dev) == 32);

/* The eight entry points (all return 0 or -errno, all may sleep). */
typedef void (*nvidia_p2p_free_callback_t)(void *data);

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address, u64 length,
			 struct nvidia_p2p_page_table **page_table,
			 nvidia_p2p_free_callback_t free_callback, void *data);
int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table, u32 flags);
int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table, u32 flags);
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_dma_map_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping);
int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping);
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping);

/* Pointer types of the entry points, for clients that resolve them by name
 * at load time (weak references, symbol_get) instead of linking against
 * nvidia.ko's symbol versions. */
typedef typeof(&nvidia_p2p_get_pages) nvidia_p2p_get_pages_t;
typedef typeof(&nvidia_p2p_put_pages) nvidia_p2p_put_pages_t;
typedef typeof(&nvidia_p2p_get_pages_persistent) nvidia_p2p_get_pages_persistent_t;
typedef typeof(&nvidia_p2p_put_pages_persistent) nvidia_p2p_put_pages_persistent_t;
typedef typeof(&nvidia_p2p_dma_map_pages) nvidia_p2p_dma_map_pages_t;
typedef typeof(&nvidia_p2p_dma_unmap_pages) nvidia_p2p_dma_unmap_pages_t;

#endif /* PEERMEM_NV_P2P_ABI_H */
