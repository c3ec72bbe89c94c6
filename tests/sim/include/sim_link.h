/* SPDX-License-Identifier: GPL-2.0 */
/*
 * sim_link.h -- what the simulators offer each other and the persistent-API
 * companion module, beyond the two real ABIs.  Every cross-simulator call is
 * looked up at run time (__symbol_get), so each simulator loads without the
 * other; only nvidia_p2p_sim_persistent.ko links against nvidia_p2p_sim.ko.
 */
#ifndef PEERMEM_SIM_LINK_H
#define PEERMEM_SIM_LINK_H

#include <linux/types.h>

struct nvidia_p2p_page_table;

/* A DMA range the simulated HCA would access. */
struct sim_range {
	u64 addr;
	u64 len;
};

/* --- exported GPL-only by nvidia_p2p_sim.ko ------------------------------ */

/* The two persistent entry points, re-exported under their real names by
 * nvidia_p2p_sim_persistent.ko (absent: __symbol_get of the real names
 * returns NULL, as with a driver older than 535). */
int nvidia_p2p_sim_get_pages_persistent(u64 virtual_address, u64 length,
					struct nvidia_p2p_page_table **page_table, u32 flags);
int nvidia_p2p_sim_put_pages_persistent(u64 virtual_address,
					struct nvidia_p2p_page_table *page_table, u32 flags);
/* cudaFree(va) on behalf of process `tgid` (the step hooks' worker). */
int nvidia_p2p_sim_free_va(u32 tgid, u64 va);
/* 0 if every range lies in live, pinned and DMA-mapped GPU memory, else
 * -EFAULT. */
int nvidia_p2p_sim_dma_live(const struct sim_range *ranges, u32 count);
/* The DMA address of byte `va` of process `tgid`'s GPU memory, or -ENOENT. */
int nvidia_p2p_sim_translate(u32 tgid, u64 va, u64 *dma_address);
/* A peer's DMA to the GPU's BAR: `len` bytes at bus address `bus`, read into
 * `buf` or (write) written from it.  Only memory that is live, pinned and
 * DMA-mapped answers: -EFAULT elsewhere (a fault, nothing moved), -ENXIO on
 * sparse memory (no pages behind it). */
int nvidia_p2p_sim_bar_access(u64 bus, void *buf, u32 len, bool write);
/* Whether the caller runs a free callback (holding the API lock) while the
 * task at `task` (a struct task_struct address) waits for that lock. */
bool nvidia_p2p_sim_callback_waits_for(unsigned long task);
/* The calling task is (on) or is no longer (off) in a P2P call of the bench's
 * same-process neighbour, sim_neighbour.ko. */
void nvidia_p2p_sim_neighbour_call(bool on);

/* --- exported GPL-only by peer_core_sim.ko -------------------------------- */

/* Called by nvidia_p2p_sim (not holding its lock) after GPU memory was
 * freed: the core checks that no registration the HCA may still use points
 * at memory that is gone. */
void peer_core_sim_gpu_freed(void);

/* The bench's soft RDMA device (tests/rxe-peer: rxe with a patch) registers
 * user memory that get_user_pages refused through the simulated core, as
 * mlx5 on a DOCA-OFED core does (ib_umem_get's peer fallback), and moves its
 * data through the registration's SG list.  The table is looked up with
 * symbol_get for each such MR (a module reference held as long as the MR
 * lives).  Every call runs in process context and may sleep. */
struct peer_core_sim_hca {
	/* ibv_reg_mr of [va, va + len) of the calling process with IB_ACCESS_*
	 * flags `access`: 0 and *handle, -EFAULT if no peer client claims the
	 * range (the device's own error stands then), or another -errno. */
	int (*mr_get)(u64 va, u64 len, u32 access, u32 *handle);
	/* The device's DMA: `len` bytes at registration byte `va`, read into
	 * `buf` or (write) written from it, through the SG list's bus
	 * addresses.  -ESTALE once the client invalidated the registration,
	 * -EINVAL outside it, -EACCES for a write to a read-only one, -EFAULT
	 * where the GPU memory behind the list is gone (a violation the core
	 * counts). */
	int (*mr_dma)(u32 handle, u64 va, void *buf, u64 len, bool write);
	/* ibv_dereg_mr. */
	void (*mr_put)(u32 handle);
};
extern const struct peer_core_sim_hca peer_core_sim_hca;

#endif /* PEERMEM_SIM_LINK_H */
