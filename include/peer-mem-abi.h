/* SPDX-License-Identifier: GPL-2.0 */
/*
 * peer-mem-abi.h -- our declaration of the RDMA core's peer-memory client
 * interface (MLNX_OFED / DOCA-OFED, NVIDIA and Ubuntu kernels; not in
 * mainline), written from docs/facts/peer-memory-core.md.  Used by
 * peermem_rs.ko (the client: rust/glue.c, and its Rust bindings generated
 * from rust/bindings.h), by the simulated core peer_core_sim.ko
 * (tests/sim/coresim) and by the test clients simclient_*.ko
 * (tests/simclients/simclient.c).  Layout asserted here and on the Rust side
 * (rust/abi_layout.rs, included by every crate that binds this header:
 * rust/bindings.rs, tests/sim/nvsim/bindings.rs,
 * tests/sim/coresim/bindings.rs).
 */
#ifndef PEERMEM_PEER_MEM_ABI_H
#define PEERMEM_PEER_MEM_ABI_H

#include <linux/types.h>
#include <linux/build_bug.h>
#include <linux/stddef.h>

struct sg_table;
struct device;

#define IB_PEER_MEMORY_NAME_MAX		64
#define IB_PEER_MEMORY_VER_MAX		16
/* peer_memory_client_ex.flags: the client unmaps/unpins on invalidation
 * itself; the core must not call dma_unmap/put_pages from invalidate. */
#define PEER_MEM_INVALIDATE_UNMAPS	(1u << 0)

struct peer_memory_client {
	char name[IB_PEER_MEMORY_NAME_MAX];
	char version[IB_PEER_MEMORY_VER_MAX];	/* version[15] != 0: an _ex client */
	/* 1: the range is the client's; 0 or -errno: it is not. */
	int (*acquire)(unsigned long addr, size_t size, void *peer_mem_private_data,
		       char *peer_mem_name, void **client_context);
	int (*get_pages)(unsigned long addr, size_t size, int write, int force,
			 struct sg_table *sg_head, void *client_context, u64 core_context);
	int (*dma_map)(struct sg_table *sg_head, void *client_context,
		       struct device *dma_device, int dmasync, int *nmap);
	int (*dma_unmap)(struct sg_table *sg_head, void *client_context,
			 struct device *dma_device);
	void (*put_pages)(struct sg_table *sg_head, void *client_context);
	unsigned long (*get_page_size)(void *client_context);
	void (*release)(void *client_context);
};

struct peer_memory_client_ex {
	struct peer_memory_client client;
	size_t ex_size;			/* sizeof(struct peer_memory_client_ex) */
	u32 flags;			/* PEER_MEM_*; read only if ex_size >= 148 */
};

/* The smallest ex_size for which the core reads `flags`. */
#define PEER_MEM_EX_FLAGS_MIN_SIZE	148u

static_assert(sizeof(struct peer_memory_client) == 136);
static_assert(offsetof(struct peer_memory_client, version) == 64);
static_assert(offsetof(struct peer_memory_client, acquire) == 80);
static_assert(offsetof(struct peer_memory_client, get_pages) == 88);
static_assert(offsetof(struct peer_memory_client, dma_map) == 96);
static_assert(offsetof(struct peer_memory_client, dma_unmap) == 104);
static_assert(offsetof(struct peer_memory_client, put_pages) == 112);
static_assert(offsetof(struct peer_memory_client, get_page_size) == 120);
static_assert(offsetof(struct peer_memory_client, release) == 128);
static_assert(sizeof(struct peer_memory_client_ex) == 152);
static_assert(offsetof(struct peer_memory_client_ex, ex_size) == 136);
static_assert(offsetof(struct peer_memory_client_ex, flags) == 144);

/* Given to a client that registers with an invalidate_callback slot. */
typedef int (*invalidate_peer_memory)(void *reg_handle, u64 core_context);

void *ib_register_peer_memory_client(const struct peer_memory_client *client,
				     invalidate_peer_memory *invalidate_callback);
void ib_unregister_peer_memory_client(void *reg_handle);

typedef typeof(&ib_register_peer_memory_client) ib_register_peer_memory_client_t;
typedef typeof(&ib_unregister_peer_memory_client) ib_unregister_peer_memory_client_t;

#endif /* PEERMEM_PEER_MEM_ABI_H */
