// SPDX-License-Identifier: GPL-2.0
/*
 * peer_path.c -- the peer-memory path of the bench's soft RDMA device.
 *
 * rxe (soft-RoCE), built from the kernel's own source with rxe.patch, calls
 * these where a user MR's memory could not be pinned and where it moves an
 * MR's bytes.  An MR on memory that get_user_pages refused (GPU memory of
 * the simulated NVIDIA driver: cuMemAlloc of the libcuda stand-in) goes to
 * the simulated peer-memory core, as mlx5's does on a DOCA-OFED core: the
 * core asks its clients (peermem-rs, or NVIDIA's nvidia-peermem), the
 * serving client pins the memory and returns a DMA-mapped scatterlist, and
 * every byte the device reads from or writes to the MR then goes through
 * that list's bus addresses into the GPU's BAR (peer_core_sim's HCA DMA),
 * never through a struct page or the process's mapping.  Once the client
 * invalidates the MR (cudaFree in invalidate mode) every access fails, as
 * an mlx5 mkey does once the core's invalidation zapped it: an RDMA WRITE or
 * READ on it completes with a remote access error.
 *
 * A test plant of the bench (tests/bench/build.sh builds it for the kernel
 * whose source the chroot has); never installed.
 */
#include <linux/module.h>
#include <linux/mutex.h>

#include "rxe/rxe.h"
#include "rxe/rxe_loc.h"
#include "sim_link.h"

int rxe_peer_mr_init(struct rxe_mr *mr, u64 start, u64 length, int access,
		     int umem_err)
{
	const struct peer_core_sim_hca *hca = symbol_get(peer_core_sim_hca);
	u32 handle;
	int err;

	if (!hca)
		return umem_err;
	err = hca->mr_get(start, length, access, &handle);
	if (err) {
		symbol_put(peer_core_sim_hca);
		rxe_dbg_mr(mr, "peer memory: %d\n", err);
		return err == -EFAULT ? umem_err : err;
	}
	mr->peer = hca;
	mr->peer_handle = handle;
	mr->peer_start = start;
	mr->ibmr.type = IB_MR_TYPE_USER;
	mr->state = RXE_MR_STATE_VALID;
	return 0;
}

/* Registration byte of MR byte `iova`: the MR's iova is the VA it was
 * registered at only by convention (ibv_reg_mr sets them equal), so it is
 * translated. */
static u64 peer_va(struct rxe_mr *mr, u64 iova)
{
	return mr->peer_start + (iova - mr->ibmr.iova);
}

int rxe_peer_mr_copy(struct rxe_mr *mr, u64 iova, void *addr,
		     unsigned int length, enum rxe_mr_copy_dir dir)
{
	int err = mr->peer->mr_dma(mr->peer_handle, peer_va(mr, iova), addr,
				   length, dir == RXE_TO_MR_OBJ);

	if (err)
		rxe_dbg_mr(mr, "peer memory DMA of %u bytes at %#llx: %d\n",
			   length, iova, err);
	return err;
}

/* Atomics on peer memory: a read and a write through the BAR under one
 * mutex (the device's atomics are atomic with each other, as rxe's own are
 * under its atomic_ops_lock, which cannot be held across a DMA that may
 * sleep). */
static DEFINE_MUTEX(peer_atomic_lock);

enum resp_states rxe_peer_mr_atomic_op(struct rxe_mr *mr, u64 iova, int opcode,
				       u64 compare, u64 swap_add, u64 *orig_val)
{
	enum resp_states rc = RESPST_NONE;
	u64 value;

	if (mr_check_range(mr, iova, sizeof(value)))
		return RESPST_ERR_RKEY_VIOLATION;
	if (iova & 7)
		return RESPST_ERR_MISALIGNED_ATOMIC;
	mutex_lock(&peer_atomic_lock);
	if (rxe_peer_mr_copy(mr, iova, &value, sizeof(value), RXE_FROM_MR_OBJ)) {
		rc = RESPST_ERR_RKEY_VIOLATION;
		goto out;
	}
	*orig_val = value;
	if (opcode == IB_OPCODE_RC_COMPARE_SWAP) {
		if (value != compare)
			goto out;
		value = swap_add;
	} else {
		value += swap_add;
	}
	if (rxe_peer_mr_copy(mr, iova, &value, sizeof(value), RXE_TO_MR_OBJ))
		rc = RESPST_ERR_RKEY_VIOLATION;
out:
	mutex_unlock(&peer_atomic_lock);
	return rc;
}

enum resp_states rxe_peer_mr_atomic_write(struct rxe_mr *mr, u64 iova, u64 value)
{
	if (mr_check_range(mr, iova, sizeof(value)))
		return RESPST_ERR_RKEY_VIOLATION;
	if (iova & 7)
		return RESPST_ERR_MISALIGNED_ATOMIC;
	if (rxe_peer_mr_copy(mr, iova, &value, sizeof(value), RXE_TO_MR_OBJ))
		return RESPST_ERR_RKEY_VIOLATION;
	return RESPST_NONE;
}

void rxe_peer_mr_release(struct rxe_mr *mr)
{
	mr->peer->mr_put(mr->peer_handle);
	mr->peer = NULL;
	symbol_put(peer_core_sim_hca);
}
