/* SPDX-License-Identifier: GPL-2.0 */
/*
 * glue.h -- the boundary between nvidia_p2p_sim's C glue (glue.c) and its
 * Rust crate: helpers the crate calls (nvsim_glue_*: static-inline kernel
 * functions, macros, module parameters) and the crate's entry points the
 * glue calls (nvsim_rs_*); what both simulators share is in
 * common/sim_glue.h.  Read by the C compiler and by bindgen.
 */
#ifndef PEERMEM_NVSIM_GLUE_H
#define PEERMEM_NVSIM_GLUE_H

#include <linux/types.h>
#include "sim_uapi.h"
#include "../common/sim_glue.h"

struct page;
struct pci_dev;

/* --- module parameters --------------------------------------------------- */
u32 nvsim_glue_pt_version(void);
bool nvsim_glue_persistent_supported(void);
bool nvsim_glue_driver_reads(void);
bool nvsim_glue_reuse_freed(void);
u32 nvsim_glue_map_window_ms(void);
bool nvsim_glue_is_client_pid(u32 tgid);
u32 nvsim_glue_stale_grace_ms(void);
u32 nvsim_glue_callback_timeout_ms(void);
/* The latency model (lat_*, see glue.c). */
u32 nvsim_glue_lat_pin_call_us(void);
u32 nvsim_glue_lat_pin_page_ns(void);
u32 nvsim_glue_lat_unpin_page_ns(void);
u32 nvsim_glue_lat_map_page_ns(void);
u32 nvsim_glue_lat_unmap_page_ns(void);
bool nvsim_glue_lat_spin(void);

/* --- the driver's global API lock (a real, lockdep-visible mutex) ------- */
void nvsim_glue_api_lock(void);
bool nvsim_glue_api_trylock(void);
void nvsim_glue_api_unlock(void);
/* The simulator's bookkeeping lock (a leaf: never held while calling out). */
void nvsim_glue_state_lock(void);
void nvsim_glue_state_unlock(void);

/* --- tasks, time (and sim_glue.h's) ------------------------------------- */
bool nvsim_glue_current_is_kthread(void);
bool nvsim_glue_current_is_neighbour(void);
void nvsim_glue_usleep(u64 us);
void nvsim_glue_sleep_us(u64 us);	/* hrtimer, no slack */
void nvsim_glue_cpu_relax(void);
void nvsim_glue_cond_resched(void);

/* --- memory ---------------------------------------------------------------- */
struct page *nvsim_glue_alloc_block(u32 order);	/* free with __free_pages */
u64 nvsim_glue_block_phys(struct page *page);
/* Copies `len` bytes at `offset` into the block starting at `page` from
 * `buf` (to_block) or from it into `buf`; the caller keeps it in the block. */
void nvsim_glue_block_copy(struct page *page, u64 offset, void *buf, size_t len, bool to_block);
void *nvsim_glue_kvzalloc(size_t size);		/* free with nvsim_glue_kvfree */
void nvsim_glue_kvfree(void *p);
/* Page-table and mapping headers: a LIFO cache of freed objects per kind and
 * kmalloc size class (reuse_freed), KASAN-poisoned while cached. */
enum { NVSIM_OBJ_PAGE_TABLE = 0, NVSIM_OBJ_MAPPING = 1 };
void *nvsim_glue_obj_alloc(u32 kind, size_t size);	/* zeroed; free with nvsim_glue_obj_free */
void nvsim_glue_obj_free(u32 kind, void *p, size_t size);
void nvsim_glue_obj_cache_drain(void);
bool nvsim_glue_driver_links_freed(void *p);	/* false: p is not a cached (freed) page table */

/* --- devices -------------------------------------------------------------- */
bool nvsim_glue_is_pci(struct pci_dev *peer);	/* &peer->dev is on the PCI bus */
/* DMA-maps `len` bytes of the BAR at bus address `phys` for `peer`, as the
 * real driver does (dma_map_resource; the peer referenced until the unmap);
 * false if the DMA API refused.  Unmap with nvsim_glue_dma_unmap_bar. */
bool nvsim_glue_dma_map_bar(struct pci_dev *peer, u64 phys, u64 len, u64 *dma);
void nvsim_glue_dma_unmap_bar(struct pci_dev *peer, u64 dma, u64 len);

/* --- entry points implemented in Rust (entry.rs) ---------------------- */
int nvsim_rs_ioctl_alloc(void *context, struct nvsim_alloc *arg);
int nvsim_rs_ioctl_free(void *context, struct nvsim_free *arg);
int nvsim_rs_ioctl_fault(void *context, struct nvsim_fault *arg);
int nvsim_rs_ioctl_delay(void *context, struct nvsim_delay *arg);
int nvsim_rs_ioctl_share(void *context, struct nvsim_share *arg);
int nvsim_rs_ioctl_hook(void *context, struct nvsim_hook *arg);
int nvsim_rs_ioctl_cost(void *context, struct nvsim_cost *arg);
int nvsim_rs_ioctl_memcpy(void *context, struct nvsim_memcpy *arg);

#endif /* PEERMEM_NVSIM_GLUE_H */
