/* SPDX-License-Identifier: GPL-2.0 */
/*
 * glue.h -- the C helpers of peermem_rs.ko (rust/glue.c): module parameters,
 * static-inline kernel helpers and macro-built kernel objects that Rust
 * cannot reach directly.  Bound into Rust by bindgen (rust/bindings.rs), so
 * both sides see one declaration.
 */
#ifndef PEERMEM_GLUE_H
#define PEERMEM_GLUE_H

#include <linux/scatterlist.h>
#include <linux/types.h>

#include "nv-p2p-abi.h"

struct device;
struct pci_dev;

/* The registration keeps its SG table by value (rust/sg.rs): the Rust side
 * checks its size of the (opaque) type against this one. */
enum { PEERMEM_SG_TABLE_SIZE = sizeof(struct sg_table) };

/* Module name (KBUILD_MODNAME), version and parameters. */
const char *peermem_module_name(void);
const char *peermem_version(void);
const char *peermem_param_client_name(void);
const char *peermem_param_mode(void);
/* Whether /sys/kernel/mm/memory_peers/<peer_client_name> exists (a core
 * that creates that directory has a client of that name). */
bool peermem_core_lists_client_name(void);

/* The peer-memory core's entry points, resolved by name when this module
 * is loaded (NULL when no loaded module exports them). */
struct peermem_core_api {
	ib_register_peer_memory_client_t register_client;
	ib_unregister_peer_memory_client_t unregister_client;
};
void peermem_core_api_get(struct peermem_core_api *api);

/* The NVIDIA driver's P2P entry points, resolved by name when this module
 * is loaded (NULL when no loaded module exports one). */
struct peermem_nvidia_api {
	nvidia_p2p_get_pages_t get_pages;
	nvidia_p2p_put_pages_t put_pages;
	nvidia_p2p_get_pages_persistent_t get_pages_persistent;
	nvidia_p2p_put_pages_persistent_t put_pages_persistent;
	nvidia_p2p_dma_map_pages_t dma_map_pages;
	nvidia_p2p_dma_unmap_pages_t dma_unmap_pages;
};
void peermem_nvidia_api_get(struct peermem_nvidia_api *api);

/* How the providers' symbols are bound (modinfo's `binding`): "crc: FILES",
 * "weak: ...", see rust/glue.c; for the load log. */
const char *peermem_binding(void);
/* The loaded providers whose references carry no symbol version (weak
 * references the loader resolved), when the kernel checks symbol versions
 * (CONFIG_MODVERSIONS) and allow_unversioned is not set: the load must be
 * refused (rust/glue.c).  NULL otherwise. */
const char *peermem_unversioned_refused(void);

/* The process the current call runs for, as the NVIDIA driver's
 * per-process pin lookup sees it: its thread-group id, 0 for a kernel
 * thread. */
u64 peermem_current_process(void);
/* Whether the current task is exiting (PF_EXITING): its files are being
 * released, the nvidia ones possibly before the verbs one. */
bool peermem_current_exiting(void);

/* A free callback for a pin we no longer hold: the NVIDIA driver broke its
 * contract.  WARNs once. */
void peermem_warn_spurious_callback(void);

/* The module's work queue (allocated at load, destroyed at unload, which
 * waits for its work): NULL when out of memory.  Work items are the
 * kernel crate's (kernel::workqueue). */
struct workqueue_struct;
struct workqueue_struct *peermem_wq_alloc(void);
void peermem_wq_destroy(struct workqueue_struct *wq);

/* Whether a log line a user can trigger may be printed now (a rate limit
 * shared by all of them). */
bool peermem_user_log_allowed(void);

/* A reference on this module, held by every live registration. */
bool peermem_module_get(void);
void peermem_module_put(void);

/* The PCI device behind a DMA device, or NULL if it is not a PCI device. */
struct pci_dev *peermem_dev_to_pci(struct device *dev);
u64 peermem_dma_max_seg_size(struct device *dev);

/* Scatterlists: allocate, walk, fill the DMA address/length, copy a
 * table's header into another (lend), free. */
int peermem_sg_alloc(struct sg_table *sgt, unsigned int nents);
struct scatterlist *peermem_sg_first(struct sg_table *sgt);
struct scatterlist *peermem_sg_next(struct scatterlist *sg);
void peermem_sg_set_dma(struct scatterlist *sg, u64 dma_addr, unsigned int len);
void peermem_sg_lend(struct sg_table *dst, const struct sg_table *src);
void peermem_sg_free(struct sg_table *sgt);

u64 peermem_now_ns(void);

#endif /* PEERMEM_GLUE_H */
