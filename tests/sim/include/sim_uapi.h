/* SPDX-License-Identifier: GPL-2.0 */
/*
 * sim_uapi.h -- the userspace interface of the two simulators' character
 * devices, /dev/nvidia_p2p_sim (a simulated GPU) and /dev/peer_core_sim (a
 * simulated RDMA core + HCA).  tests/simctl mirrors these structures in
 * Rust (src/uapi.rs) with the same size checks.  Every ioctl returns 0 or
 * -1 with errno; text outputs are "key=value" lines.
 */
#ifndef PEERMEM_SIM_UAPI_H
#define PEERMEM_SIM_UAPI_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/ioctl.h>
#include <linux/build_bug.h>
#else
#include <linux/types.h>
#include <linux/ioctl.h>
#endif

/* --- shared ------------------------------------------------------------ */

/* A text reply: the kernel writes up to `size` bytes at user address `buf`
 * and stores the full length of the text in `len` (> size: truncated). */
struct sim_text {
	__u64 buf;
	__u32 size;
	__u32 len;
};

/* --- nvidia_p2p_sim ------------------------------------------------------ */

#define NVSIM_LAYOUT_CONTIGUOUS	0	/* physically contiguous as far as possible */
#define NVSIM_LAYOUT_FRAGMENTED	1	/* runs of run_pages GPU pages, never adjacent */
#define NVSIM_LAYOUT_SHUFFLED	2	/* every GPU page apart, in random order */
#define NVSIM_LAYOUT_SPARSE	3	/* no backing pages: synthetic bus addresses far
					 * above RAM, contiguous (run_pages 0) or with a
					 * one-page gap after every run_pages pages; for
					 * huge allocations (up to 256 GiB) */

/* cudaMalloc: len is a multiple of 64 KiB; va 0 lets the simulator choose,
 * otherwise the allocation is placed at va (to model VA reuse). */
struct nvsim_alloc {
	__u64 len;
	__u64 va;		/* in: 0 or the wanted VA; out: the VA */
	__u32 layout;		/* NVSIM_LAYOUT_* */
	__u32 run_pages;	/* fragmented: GPU pages per run (1..64); sparse: 0 or any */
};

struct nvsim_free {
	__u64 va;		/* any VA inside the allocation's first page */
};

#define NVSIM_FAULT_GET_PAGES	0	/* nvidia_p2p_get_pages */
#define NVSIM_FAULT_DMA_MAP	1	/* nvidia_p2p_dma_map_pages */
#define NVSIM_FAULT_PERSISTENT	2	/* nvidia_p2p_get_pages_persistent */
#define NVSIM_FAULT_PUT		3	/* nvidia_p2p_put_pages (nothing released) */
#define NVSIM_FAULT_PUT_PERSISTENT 4	/* nvidia_p2p_put_pages_persistent (same) */
#define NVSIM_FAULT_UNMAP	5	/* nvidia_p2p_dma_unmap_pages (mapping kept) */
#define NVSIM_FAULT_SITES	6

/* Fail the next `count` calls at `site` with -err (err > 0). */
struct nvsim_fault {
	__u32 site;
	__u32 count;
	__s32 err;
	__u32 reserved;
};

/* Sleep this long per 64 KiB page in get_pages (models pin cost); at most
 * NVSIM_MAX_DELAY_US (a larger value is EINVAL: it would hold the API lock
 * for hours). */
#define NVSIM_MAX_DELAY_US	1000000
struct nvsim_delay {
	__u32 us_per_page;
	__u32 reserved;
};

/* Free hooks inside the driver's own calls: at `site` the driver starts a
 * cudaFree of the allocation being mapped/unmapped in a worker (as a racing
 * application thread) and waits until that free finished or wait_ms passed.
 * Armed for the next `count` calls reaching the site. */
#define NVSIM_HOOK_NONE		0
#define NVSIM_HOOK_MAP_PROLOGUE	1	/* dma_map_pages, before it takes the API lock */
#define NVSIM_HOOK_MAP_EPILOGUE	2	/* dma_map_pages, after it dropped the API lock,
					 * before linking the mapping */
#define NVSIM_HOOK_UNMAP	3	/* dma_unmap_pages, with the mapping in flight */
#define NVSIM_HOOK_PUT		4	/* put_pages, on its way to the API lock: the free
					 * runs, then the put is held until wait_ms */
#define NVSIM_HOOK_GET_PAGES	5	/* get_pages, between pinning and registering
					 * the free callback (two API-lock holds) */
#define NVSIM_HOOK_GET_PAGES_RETURN 6	/* get_pages, after registering the free
					 * callback, before it returns the table */
#define NVSIM_HOOK_SITES	7
#define NVSIM_MAX_WAIT_MS	60000	/* a longer wait_ms is EINVAL */
struct nvsim_hook {
	__u32 site;
	__u32 count;
	__u32 wait_ms;		/* 0: 200 ms; at most NVSIM_MAX_WAIT_MS */
	__u32 reserved;
};

/* REGISTER_PID, as an MPS server does for its clients: process `pid` may
 * pin and put the allocation holding `va` (it joins the P2P object's client
 * list) until its own RM client is destroyed -- in the simulator, until a
 * control file that process opened is closed, as at its exit.  Its pins
 * then stay armed and its puts find nothing (return 0).  Any process may
 * issue it (the bench stands in for the server's control call). */
struct nvsim_share {
	__u64 va;
	__u32 pid;
	__u32 reserved;
};

/* The latency model's own cost of one pin + one DMA map (and their
 * release) of `pages` 64 KiB pages, as the driver charges it (module
 * parameters lat_*): run in the caller's context, one step after the
 * other, each under the lock the real call takes; out: measured ns. */
struct nvsim_cost {
	__u64 pages;
	__u64 pin_ns;		/* out: get_pages' charge (API lock held) */
	__u64 map_ns;		/* out: dma_map_pages' charge (API lock held) */
	__u64 unmap_ns;		/* out: dma_unmap_pages' charge (no API lock) */
	__u64 unpin_ns;		/* out: put_pages' charge (API lock held) */
};

/* cuMemcpyHtoD / cuMemcpyDtoH: `len` bytes between the caller's buffer and
 * its GPU memory at `va` (its own or shared with it), through the
 * allocation's own pages: no pin, no DMA mapping, no scatterlist -- the
 * path a data check compares the HCA's DMA with.  EFAULT outside live GPU
 * memory of the caller, ENXIO on sparse memory (nothing backs it). */
#define NVSIM_MEMCPY_HTOD	0
#define NVSIM_MEMCPY_DTOH	1
struct nvsim_memcpy {
	__u64 va;
	__u64 buf;		/* user pointer */
	__u64 len;
	__u32 dir;		/* NVSIM_MEMCPY_* */
	__u32 reserved;
};

#define NVSIM_IOC_ALLOC		_IOWR('N', 1, struct nvsim_alloc)
#define NVSIM_IOC_FREE		_IOW('N', 2, struct nvsim_free)
#define NVSIM_IOC_FAULT		_IOW('N', 3, struct nvsim_fault)
#define NVSIM_IOC_DELAY		_IOW('N', 4, struct nvsim_delay)
#define NVSIM_IOC_STATS		_IOWR('N', 5, struct sim_text)
#define NVSIM_IOC_RESET		_IO('N', 6)	/* zero counters, re-arm WARN_ONCEs */
#define NVSIM_IOC_HOOK		_IOW('N', 7, struct nvsim_hook)
#define NVSIM_IOC_COST		_IOWR('N', 8, struct nvsim_cost)
#define NVSIM_IOC_SHARE		_IOW('N', 9, struct nvsim_share)
#define NVSIM_IOC_MEMCPY	_IOW('N', 10, struct nvsim_memcpy)

/* --- peer_core_sim ------------------------------------------------------- */

/* Step hooks of a registration (struct pcsim_reg.hook_step). */
#define PCSIM_MAX_HOOK_MS	60000
#define PCSIM_STEP_NONE		0
#define PCSIM_STEP_AFTER_ACQUIRE 1	/* after acquire, before get_pages */
#define PCSIM_STEP_AFTER_GET_PAGES 2	/* after get_pages (mapping lock held) */
#define PCSIM_STEP_AFTER_DMA_MAP 3	/* after dma_map (mapping lock held) */
#define PCSIM_STEP_IN_DEREG	4	/* at dereg, mapping lock held, before dma_unmap */
/* Hook actions (struct pcsim_reg.hook_action). */
#define PCSIM_ACTION_NONE	0
#define PCSIM_ACTION_FREE	1	/* cudaFree(hook_va) from another thread, then wait
					 * (up to hook_ms) until it finished or blocked on
					 * this registration's mapping lock */
#define PCSIM_ACTION_DELAY	2	/* sleep hook_ms in the registering thread */

/* IB access flags used by reg (IB_ACCESS_*): any write flag = writable. */
#define PCSIM_ACCESS_LOCAL_WRITE	1
#define PCSIM_ACCESS_REMOTE_WRITE	2
#define PCSIM_ACCESS_REMOTE_READ	4

/* One SG entry as the HCA sees it (after the core's first/last trim). */
struct pcsim_sge {
	__u64 addr;
	__u64 len;
};

#define PCSIM_NAME_MAX 64

/* Where a registration's time went, measured by the core (CLOCK_MONOTONIC). */
struct pcsim_times {
	__u64 acquire_wait_ns;	/* waiting for the core's global peer mutex */
	__u64 acquire_ns;	/* the clients' acquire calls, under that mutex */
	__u64 get_pages_ns;	/* the serving client's get_pages */
	__u64 dma_map_ns;	/* its dma_map */
	__u64 total_ns;		/* the whole registration in the core */
};

/* ibv_reg_mr(va, len, access) in the caller's process context. */
#define PCSIM_REG_QP_BUFFER	1	/* a QP/CQ buffer, not an MR: invalidation
					 * clients are not asked */
struct pcsim_reg {
	__u64 va;
	__u64 len;
	__u32 access;
	__u32 hook_step;	/* PCSIM_STEP_* */
	__u32 hook_action;	/* PCSIM_ACTION_* */
	__u32 hook_ms;		/* delay, or the longest wait after a free; at
				 * most PCSIM_MAX_HOOK_MS (else EINVAL) */
	__u64 hook_va;		/* the VA the free hook frees; 0: this va */
	__u64 sg;		/* user pointer to struct pcsim_sge[sg_max] (may be 0) */
	__u32 sg_max;
	__u32 sg_count;		/* out: nmap (entries the HCA uses) */
	__u32 handle;		/* out: the registration's handle (per open file) */
	__u32 core_context;	/* out: the id given to an invalidation client (0: none) */
	__u64 page_size;	/* out: the client's get_page_size() */
	char client[PCSIM_NAME_MAX];	/* out: the client that served it */
	__u32 flags;		/* PCSIM_REG_* */
	__u32 reserved;
	struct pcsim_times times;	/* out */
};

struct pcsim_handle {
	__u32 handle;
	__u32 reserved;
};

/* ibv_dereg_mr with the core's timing of it (out). */
struct pcsim_dereg {
	__u32 handle;
	__u32 reserved;
	__u64 dma_unmap_ns;	/* the client's dma_unmap (0: not called) */
	__u64 put_pages_ns;	/* its put_pages (0: not called) */
	__u64 release_ns;	/* its release */
	__u64 total_ns;		/* the whole deregistration in the core */
};

/* The current SG list of a registration and its state. */
#define PCSIM_STATE_MAPPED	1
#define PCSIM_STATE_INVALIDATED	2	/* fenced by the client's invalidate */
#define PCSIM_STATE_UNMAPPED	3	/* fenced, dma_unmap + put_pages run inside invalidate */
struct pcsim_query {
	__u32 handle;
	__u32 state;		/* out: PCSIM_STATE_* */
	__u64 sg;		/* user pointer to struct pcsim_sge[sg_max] */
	__u32 sg_max;
	__u32 sg_count;		/* out */
};

/* The HCA's DMA through a MAPPED registration: `len` bytes at `va` (inside
 * the registration, as an RDMA request's remote address), to (write=1, an RDMA WRITE landing) or from (write=0, an RDMA
 * READ or a send's gather) GPU memory, through the bus addresses of the SG
 * list the client built, never through the VA.  ESTALE once invalidated
 * (fenced), EACCES writing a read-only registration, EFAULT where an
 * address is not live pinned GPU memory (a DMA fault; with the memory
 * freed and no invalidation a counted `dma_after_free`), EINVAL outside
 * the registration. */
struct pcsim_dma {
	__u32 handle;
	__u32 write;
	__u64 va;
	__u64 len;
	__u64 buf;		/* user pointer */
};

#define PCSIM_IOC_REG		_IOWR('P', 1, struct pcsim_reg)
#define PCSIM_IOC_DEREG		_IOW('P', 2, struct pcsim_handle)
/* 0: the HCA may DMA; -ESTALE: invalidated (fenced); -EFAULT: the DMA
 * addresses are not live pinned GPU memory (a counted violation);
 * -ENOENT: no such handle. */
#define PCSIM_IOC_DMA_CHECK	_IOW('P', 3, struct pcsim_handle)
#define PCSIM_IOC_STATS		_IOWR('P', 4, struct sim_text)
#define PCSIM_IOC_RESET		_IO('P', 5)
#define PCSIM_IOC_QUERY		_IOWR('P', 6, struct pcsim_query)
/* uverbs disassociate (device reset): the registration is deregistered by a
 * kernel worker, not by the owning process; returns when that is done. */
#define PCSIM_IOC_DISASSOCIATE	_IOW('P', 7, struct pcsim_handle)
/* PCSIM_IOC_DEREG, timed. */
#define PCSIM_IOC_DEREG_TIMED	_IOWR('P', 8, struct pcsim_dereg)
#define PCSIM_IOC_DMA		_IOW('P', 9, struct pcsim_dma)

#ifdef __KERNEL__
static_assert(sizeof(struct sim_text) == 16);
static_assert(sizeof(struct nvsim_alloc) == 24);
static_assert(sizeof(struct nvsim_free) == 8);
static_assert(sizeof(struct nvsim_fault) == 16);
static_assert(sizeof(struct nvsim_delay) == 8);
static_assert(sizeof(struct nvsim_share) == 16);
static_assert(sizeof(struct pcsim_sge) == 16);
static_assert(sizeof(struct pcsim_times) == 40);
static_assert(sizeof(struct pcsim_reg) == 184);
static_assert(sizeof(struct pcsim_dereg) == 40);
static_assert(sizeof(struct nvsim_hook) == 16);
static_assert(sizeof(struct nvsim_cost) == 40);
static_assert(sizeof(struct pcsim_handle) == 8);
static_assert(sizeof(struct pcsim_query) == 24);
static_assert(sizeof(struct nvsim_memcpy) == 32);
static_assert(sizeof(struct pcsim_dma) == 32);
#endif

#endif /* PEERMEM_SIM_UAPI_H */
