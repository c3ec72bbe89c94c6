/* SPDX-License-Identifier: GPL-2.0 */
/*
 * glue.h -- the boundary between peer_core_sim's C glue (glue.c) and its
 * Rust crate: helpers the crate calls (pcsim_glue_*: static-inline kernel
 * functions, macros, sysfs, the work queue, module parameters) and the
 * crate's entry points the glue calls (pcsim_rs_*); what both simulators
 * share is in common/sim_glue.h.  Read by the C compiler and by bindgen.
 */
#ifndef PEERMEM_PCSIM_GLUE_H
#define PEERMEM_PCSIM_GLUE_H

#include <linux/types.h>
#include "sim_uapi.h"
#include "../common/sim_glue.h"

struct device;
struct pci_dev;
struct sg_table;

/* --- module parameters --------------------------------------------------- */
bool pcsim_glue_param_nonpci(void);
bool pcsim_glue_param_honour_unmaps(void);
bool pcsim_glue_param_memory_peers(void);	/* read at load */
bool pcsim_glue_param_page_shift(void);		/* SG regime: page shift (else trim) */
bool pcsim_glue_param_legacy_map(void);
bool pcsim_glue_param_notifier_ne(void);		/* get_page_size first, nmap apart */
bool pcsim_glue_param_refuse_dups(void);	/* refuse duplicate client names */
bool pcsim_glue_take_fail_mkey(void);		/* one injected mkey failure due */
bool pcsim_glue_take_fail_register(void);	/* one injected register failure due */
u32 pcsim_glue_param_register_hold_ms(void);
bool pcsim_glue_param_memlock(void);
u32 pcsim_glue_param_unregister_hold_ms(void);
const char *pcsim_glue_param_variant(void);

/* --- the core's two global mutexes (lockdep-visible) -------------------- */
#define PCSIM_LOCK_PEERS	0	/* the peer-client mutex held around acquire */
#define PCSIM_LOCK_TABLES	1	/* the handle and registration tables (leaf) */
void pcsim_glue_lock(u32 which);
void pcsim_glue_unlock(u32 which);

/* --- the simulated HCA's DMA device -------------------------------------- */
struct pci_dev *pcsim_glue_hca_get(void);	/* the PCI device (hca_bdf or the first) */
void pcsim_glue_hca_put(struct pci_dev *pdev);
struct device *pcsim_glue_pci_device(struct pci_dev *pdev);
struct device *pcsim_glue_nonpci_device(void);	/* the misc device: not PCI */
const char *pcsim_glue_dev_name(struct device *dev);
/* Where the device's DMA to bus address `dma` lands: through its IOMMU
 * domain when it has a translating one, else `dma` itself (dma-direct on
 * x86).  false: the IOMMU has nothing mapped there (the DMA faults). */
bool pcsim_glue_dma_to_phys(struct device *dev, u64 dma, u64 *phys);
/* Whether the device's DMA goes through a translating IOMMU domain. */
bool pcsim_glue_dma_translated(struct device *dev);

/* --- SG tables (owned by the core, filled by the client) ---------------- */
struct pcsim_sg_ent {
	u64 dma_address;
	u32 dma_length;
	u32 length;
	u32 offset;
	u32 reserved;
};
struct sg_table *pcsim_glue_sgt_alloc(void);	/* zeroed; free with pcsim_glue_sgt_free */
/* Frees the core's struct sg_table only: the list in it is the client's. */
void pcsim_glue_sgt_free(struct sg_table *sgt);
/* Clears the core's copy of the table (the list stays the client's). */
void pcsim_glue_sgt_clear(struct sg_table *sgt);
bool pcsim_glue_sgt_empty(struct sg_table *sgt);	/* never filled (or freed) */
int *pcsim_glue_sgt_nents(struct sg_table *sgt);	/* &sgt->nents, as int * */
void pcsim_glue_sgt_counts(struct sg_table *sgt, u32 *nents, u32 *orig_nents);
/* Entries 0..count-1 of the list (one walk), or -EINVAL if it is shorter. */
int pcsim_glue_sg_read(struct sg_table *sgt, u32 count, struct pcsim_sg_ent *ents);
/* Overwrites entry idx of the list, or -EINVAL past its end. */
int pcsim_glue_sg_set(struct sg_table *sgt, u32 idx, const struct pcsim_sg_ent *ent);

/* --- RLIMIT_MEMLOCK, as ib_umem_get charges it before the peer path ------ */
/* Charges npages to the calling process's pinned_vm: its mm (held), or
 * NULL with *err = -EPERM if RLIMIT_MEMLOCK is 0, -ENOMEM past it, without
 * CAP_IPC_LOCK. */
void *pcsim_glue_memlock_charge(u64 npages, int *err);
void pcsim_glue_memlock_uncharge(void *mm, u64 npages);

/* --- /sys/kernel/mm/memory_peers/<name>/ ---------------------------------- */
#define PCSIM_ATTR_VERSION		0
#define PCSIM_ATTR_NUM_ALLOC_MRS	1
#define PCSIM_ATTR_NUM_DEALLOC_MRS	2
#define PCSIM_ATTR_NUM_REG_PAGES	3
#define PCSIM_ATTR_NUM_DEREG_PAGES	4
#define PCSIM_ATTR_NUM_REG_BYTES	5
#define PCSIM_ATTR_NUM_DEREG_BYTES	6
#define PCSIM_ATTR_NUM_FREE_CALLBACKS	7
void *pcsim_glue_sysfs_add(const char *name, const void *client);
void pcsim_glue_sysfs_del(void *dir);

/* --- entry points implemented in Rust (entry.rs) ---------------------- */
u64 pcsim_rs_client_stat(const void *client, u32 attr);
/* Writes the client's version string (NUL-terminated, <= 16 bytes). */
void pcsim_rs_client_version(const void *client, char *buf);
int pcsim_rs_ioctl_reg(void *context, struct pcsim_reg *arg);
int pcsim_rs_ioctl_dereg(void *context, struct pcsim_handle *arg);
int pcsim_rs_ioctl_dma_check(void *context, struct pcsim_handle *arg);
int pcsim_rs_ioctl_query(void *context, struct pcsim_query *arg);
int pcsim_rs_ioctl_disassociate(void *context, struct pcsim_handle *arg);
int pcsim_rs_ioctl_dereg_timed(void *context, struct pcsim_dereg *arg);
int pcsim_rs_ioctl_dma(void *context, struct pcsim_dma *arg);
/* The soft RDMA device's table (sim_link.h, struct peer_core_sim_hca). */
int pcsim_rs_hca_mr_get(u64 va, u64 len, u32 access, u32 *handle);
int pcsim_rs_hca_mr_dma(u32 handle, u64 va, void *buf, u64 len, bool write);
void pcsim_rs_hca_mr_put(u32 handle);

#endif /* PEERMEM_PCSIM_GLUE_H */
