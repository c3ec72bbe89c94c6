// SPDX-License-Identifier: GPL-2.0
/*
 * glue.c -- the C side of peermem_rs.ko: module parameters and tags, and
 * thin wrappers of static-inline kernel helpers and macros for the Rust
 * crate.  No logic lives here.
 */
#include <linux/dma-mapping.h>
#include <linux/kernfs.h>
#include <linux/kobject.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/ratelimit.h>
#include <linux/sched.h>
#include <linux/scatterlist.h>
#include <linux/workqueue.h>

#include "nv-p2p-abi.h"
#include "peer-mem-abi.h"
#include "glue.h"

MODULE_VERSION(PEERMEM_VERSION);
MODULE_AUTHOR("peermem-rs developers");
/* The peer-memory core lives in ib_uverbs (ib_core on old MOFED); the P2P
 * API in nvidia.ko.  Both are looked up by name at load time. */
MODULE_SOFTDEP("pre: ib_uverbs nvidia");

static char *peer_client_name = "nv_mem";
module_param(peer_client_name, charp, 0444);
MODULE_PARM_DESC(peer_client_name,
	"Name registered with the RDMA core (default nv_mem, the name NCCL, UCX and NVSHMEM look for)");

static char *peer_mode = "auto";
module_param_named(mode, peer_mode, charp, 0444);
MODULE_PARM_DESC(mode,
	"auto (default): persistent if the driver has the persistent API, else invalidate; "
	"persistent: pin with nvidia_p2p_get_pages_persistent, memory outlives cudaFree until deregistration; "
	"invalidate: pin with a free callback, cudaFree revokes the MR; it cannot fence the puts "
	"of another user of the NVIDIA P2P API in the same process (gdrdrv, nvidia-fs), and the "
	"core never offers it what it registers without invalidation support (QP/CQ/SRQ buffers, "
	"devx umems: GPU-initiated networking), which then fails or goes to another client");

/*
 * The two providers' entry points, resolved by name by the module loader
 * when we are loaded (which then holds a reference on the exporting module
 * until we are unloaded).  symbol_get() would refuse plain EXPORT_SYMBOLs
 * since Linux 6.6: the peer-memory core exports that way, and so did older
 * NVIDIA drivers.
 *
 * How they are bound depends on the build (Kbuild, README "Binding"): with
 * a provider's Module.symvers, modpost records the CRC of each of its
 * symbols, and the loader refuses a provider whose symbol versions differ.
 * Then the NVIDIA driver's four mandatory functions are strong references
 * (a hard dependency on nvidia.ko: modprobe loads it first), while the
 * optional persistent pair (driver 535 and later) stays weak, versioned
 * when the driver exports it.  The core stays weak in every build: when no
 * loaded module exports it (a stock ib_uverbs, an OFED that was not rebuilt
 * for this kernel), the module still loads and says so in one line ("no
 * peer-memory support ..."), which an unresolved strong reference would
 * replace by the loader's "Unknown symbol".  Without a provider's symvers,
 * its references are all weak and unversioned: the fallback, which
 * `modinfo -F binding` names.
 */
#ifdef PEERMEM_NVIDIA_SYMVERS
#define PEERMEM_NVIDIA_REF
#else
#define PEERMEM_NVIDIA_REF __weak
#endif
extern typeof(ib_register_peer_memory_client) ib_register_peer_memory_client __weak;
extern typeof(ib_unregister_peer_memory_client) ib_unregister_peer_memory_client __weak;
extern typeof(nvidia_p2p_get_pages) nvidia_p2p_get_pages PEERMEM_NVIDIA_REF;
extern typeof(nvidia_p2p_put_pages) nvidia_p2p_put_pages PEERMEM_NVIDIA_REF;
extern typeof(nvidia_p2p_get_pages_persistent) nvidia_p2p_get_pages_persistent __weak;
extern typeof(nvidia_p2p_put_pages_persistent) nvidia_p2p_put_pages_persistent __weak;
extern typeof(nvidia_p2p_dma_map_pages) nvidia_p2p_dma_map_pages PEERMEM_NVIDIA_REF;
extern typeof(nvidia_p2p_dma_unmap_pages) nvidia_p2p_dma_unmap_pages PEERMEM_NVIDIA_REF;

#ifndef PEERMEM_BINDING
#define PEERMEM_BINDING "weak: no provider Module.symvers found"
#endif
/* crc: FILES | symvers (no CRCs: ...): FILES | weak: ... (Kbuild) */
MODULE_INFO(binding, PEERMEM_BINDING);

const char *peermem_binding(void)
{
	return PEERMEM_BINDING;
}

/*
 * A kernel with CONFIG_MODVERSIONS checks the CRC of every symbol a module
 * imports, but not of a symbol the module carries no version for: with
 * extended modversions, which every Rust kernel with MODVERSIONS has, the
 * loader only warns once ("no extended symbol version for ..."), Debian's
 * kernels included, whose "module: Disable matching missing version CRC"
 * covers only the basic table (kernel/module/version.c, check_version(),
 * Debian 7.3.4-1~bpo13+1).  A build without a provider's Module.symvers
 * would call into that provider unchecked on the very kernels that check
 * everything else: refused, unless the admin accepts it.
 */
static bool allow_unversioned;
module_param(allow_unversioned, bool, 0444);
MODULE_PARM_DESC(allow_unversioned,
	"On a kernel with symbol versions (CONFIG_MODVERSIONS): load a build whose provider "
	"references carry none (built without their Module.symvers). Default N: refused");

/*
 * Which providers this build calls through a weak reference without a
 * symbol version that the loader resolved (a provider that is not loaded
 * is not called: the load is refused for that reason first), when the
 * kernel checks symbol versions and allow_unversioned is off.
 */
const char *peermem_unversioned_refused(void)
{
	bool core = false, nvidia = false;

	if (!IS_ENABLED(CONFIG_MODVERSIONS) || allow_unversioned)
		return NULL;
#ifndef PEERMEM_CORE_SYMVERS
	core = ib_register_peer_memory_client != NULL;
#endif
#ifndef PEERMEM_NVIDIA_SYMVERS
	nvidia = nvidia_p2p_get_pages != NULL;
#endif
	if (core && nvidia)
		return "peer-memory core and NVIDIA driver";
	if (core)
		return "peer-memory core";
	return nvidia ? "NVIDIA driver" : NULL;
}

void peermem_core_api_get(struct peermem_core_api *api)
{
	api->register_client = ib_register_peer_memory_client;
	api->unregister_client = ib_unregister_peer_memory_client;
}

void peermem_nvidia_api_get(struct peermem_nvidia_api *api)
{
	api->get_pages = nvidia_p2p_get_pages;
	api->put_pages = nvidia_p2p_put_pages;
	api->get_pages_persistent = nvidia_p2p_get_pages_persistent;
	api->put_pages_persistent = nvidia_p2p_put_pages_persistent;
	api->dma_map_pages = nvidia_p2p_dma_map_pages;
	api->dma_unmap_pages = nvidia_p2p_dma_unmap_pages;
}

u64 peermem_current_process(void)
{
	return (current->flags & PF_KTHREAD) ? 0 : (u64)task_tgid_nr(current);
}

bool peermem_current_exiting(void)
{
	return current->flags & PF_EXITING;
}

const char *peermem_module_name(void)
{
	return KBUILD_MODNAME;
}

const char *peermem_version(void)
{
	return PEERMEM_VERSION;
}

const char *peermem_param_client_name(void)
{
	return peer_client_name;
}

const char *peermem_param_mode(void)
{
	return peer_mode;
}

/*
 * Whether /sys/kernel/mm/memory_peers/<peer_client_name> exists: on the
 * cores that create that directory, a client of the name is registered,
 * and the core refuses a second one (its kobject would collide).
 */
bool peermem_core_lists_client_name(void)
{
	struct kernfs_node *mm, *peers, *kn;

	mm = kernfs_find_and_get(kernel_kobj->sd, "mm");
	if (!mm)
		return false;
	peers = kernfs_find_and_get(mm, "memory_peers");
	kernfs_put(mm);
	if (!peers)
		return false;
	kn = kernfs_find_and_get(peers, peer_client_name);
	kernfs_put(peers);
	kernfs_put(kn);
	return kn != NULL;
}

void peermem_warn_spurious_callback(void)
{
	WARN_ONCE(1, "%s: the NVIDIA driver called the free callback of a pin already released\n",
		  KBUILD_MODNAME);
}

/*
 * One rate limit (the kernel's default: 10 lines per 5 s, then a count of
 * the suppressed ones) for every log line a caller of ibv_reg_mr,
 * ibv_dereg_mr or cudaFree can trigger: the kernel crate has no
 * ratelimited print (only _once, rust/kernel/print.rs of 7.2 and 7.3).
 */
static DEFINE_RATELIMIT_STATE(peermem_user_log_rs, DEFAULT_RATELIMIT_INTERVAL,
			      DEFAULT_RATELIMIT_BURST);

bool peermem_user_log_allowed(void)
{
	return __ratelimit(&peermem_user_log_rs);
}

bool peermem_module_get(void)
{
	return try_module_get(THIS_MODULE);
}

void peermem_module_put(void)
{
	module_put(THIS_MODULE);
}

struct pci_dev *peermem_dev_to_pci(struct device *dev)
{
	return dev && dev_is_pci(dev) ? to_pci_dev(dev) : NULL;
}

u64 peermem_dma_max_seg_size(struct device *dev)
{
	return dma_get_max_seg_size(dev);
}

int peermem_sg_alloc(struct sg_table *sgt, unsigned int nents)
{
	return sg_alloc_table(sgt, nents, GFP_KERNEL);
}

struct scatterlist *peermem_sg_first(struct sg_table *sgt)
{
	return sgt->sgl;
}

struct scatterlist *peermem_sg_next(struct scatterlist *sg)
{
	return sg_next(sg);
}

void peermem_sg_set_dma(struct scatterlist *sg, u64 dma_addr, unsigned int len)
{
	/* Peer memory has no struct page: only the DMA side is meaningful. */
	sg->offset = 0;
	sg->length = len;
	sg_dma_address(sg) = dma_addr;
	sg_dma_len(sg) = len;
}

void peermem_sg_lend(struct sg_table *dst, const struct sg_table *src)
{
	*dst = *src;
}

void peermem_sg_free(struct sg_table *sgt)
{
	sg_free_table(sgt);
}

/*
 * The module's own work queue, where a free callback lets go of the
 * registry's reference on its registration (it may be the last reference
 * on the module): module exit destroys the queue, which waits for a work
 * function still returning through our code.  The kernel crate queues
 * work items (kernel::workqueue, rust/glue.rs) but has no queue a module
 * can allocate and destroy (only the system queues, which a module cannot
 * flush at exit): that part stays here.
 */
struct workqueue_struct *peermem_wq_alloc(void)
{
	return alloc_workqueue("%s", WQ_UNBOUND, 0, KBUILD_MODNAME);
}

void peermem_wq_destroy(struct workqueue_struct *wq)
{
	destroy_workqueue(wq);
}

u64 peermem_now_ns(void)
{
	return ktime_get_ns();
}
