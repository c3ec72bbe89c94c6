// SPDX-License-Identifier: GPL-2.0
/*
 * glue.c -- the C side of nvidia_p2p_sim.ko: exports, module parameters,
 * the API lock, the ABI objects' cache and other static-inline kernel
 * helpers for the Rust crate (nvidia_p2p_sim.rs), the ioctl dispatch; the
 * rest is the simulators' shared glue (common/sim_glue.c, included below).
 * No simulator logic lives here.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/gfp.h>
#include <linux/highmem.h>
#include <linux/kasan.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/poison.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "nv-p2p-abi.h"
#include "sim_link.h"
#include "glue.h"

/* The shared part (common/sim_glue.c): the character device, the work
 * queue, reports, task and time helpers.  nvidia_p2p_sim_plain.ko is the
 * same driver and keeps this name for its device and reports. */
#define SIM_NAME "nvidia_p2p_sim"
union sim_ioctl_arg {
	struct nvsim_alloc alloc;
	struct nvsim_free free;
	struct nvsim_fault fault;
	struct nvsim_delay delay;
	struct sim_text text;
	struct nvsim_hook hook;
	struct nvsim_cost cost;
	struct nvsim_share share;
	struct nvsim_memcpy copy;
};
#include "../common/sim_glue.c"

MODULE_AUTHOR("peermem-rs developers");

/* --- the exported API (implemented in Rust, entry.rs) ------------------ */
/*
 * Current drivers export it GPL-only.  nvidia_p2p_sim_plain.ko (glue_plain.c,
 * NVSIM_PLAIN_EXPORT) is the same driver exporting it plainly, as older
 * driver trees did: symbol_get() refuses such exports since Linux 6.6.  The
 * two cannot be loaded together (same symbols).
 */
#ifdef NVSIM_PLAIN_EXPORT
#define NVSIM_EXPORT EXPORT_SYMBOL
#else
#define NVSIM_EXPORT EXPORT_SYMBOL_GPL
#endif
NVSIM_EXPORT(nvidia_p2p_get_pages);
NVSIM_EXPORT(nvidia_p2p_put_pages);
NVSIM_EXPORT(nvidia_p2p_free_page_table);
NVSIM_EXPORT(nvidia_p2p_dma_map_pages);
NVSIM_EXPORT(nvidia_p2p_dma_unmap_pages);
NVSIM_EXPORT(nvidia_p2p_free_dma_mapping);
/* The persistent pair, under private names: nvidia_p2p_sim_persistent.ko
 * exports them under the real ones. */
EXPORT_SYMBOL_GPL(nvidia_p2p_sim_get_pages_persistent);
EXPORT_SYMBOL_GPL(nvidia_p2p_sim_put_pages_persistent);
/* For peer_core_sim (looked up at run time). */
EXPORT_SYMBOL_GPL(nvidia_p2p_sim_free_va);
EXPORT_SYMBOL_GPL(nvidia_p2p_sim_dma_live);
EXPORT_SYMBOL_GPL(nvidia_p2p_sim_translate);
EXPORT_SYMBOL_GPL(nvidia_p2p_sim_bar_access);
EXPORT_SYMBOL_GPL(nvidia_p2p_sim_callback_waits_for);

#ifdef NVSIM_DRIVER_REBUILD
/*
 * The bench's driver upgrade (tests/bench/hosts.sh): this module as another
 * build of the same driver -- the same code and ABI, other symbol versions.
 * A gendwarfksyms rule (a .discard section: nothing of it reaches the
 * module) has the symbol-version hash see struct nvidia_p2p_page_table as
 * a declaration only, as a driver whose headers changed that structure
 * would hash another definition: each export of this file that takes a
 * page table gets another CRC (scripts/gendwarfksyms/kabi.c, "declonly";
 * rules apply only to a build with KBUILD_GENDWARFKSYMS_STABLE=1, which
 * tests/bench/build.sh gives this variant).
 */
static const char nvsim_rebuild_rule[] __used __aligned(1)
	__section(".discard.gendwarfksyms.kabi_rules") = "1\0declonly\0nvidia_p2p_page_table\0";
#endif

/* --- module parameters ------------------------------------------------ */
static unsigned int pt_version = NVIDIA_P2P_PAGE_TABLE_VERSION_V2;
module_param(pt_version, uint, 0644);
MODULE_PARM_DESC(pt_version, "page-table version handed out: 0x00020000 (v2, 40 bytes, driver >= 580) or 0x00010002 (v1, 32 bytes); any value is used as given");
static unsigned int stale_grace_ms;
module_param(stale_grace_ms, uint, 0644);
MODULE_PARM_DESC(stale_grace_ms, "diagnosis only (0, off, by default): within this time a new page table never takes the address of one freed after its free callback");
static int client_pids[8];
static int n_client_pids;
module_param_array(client_pids, int, &n_client_pids, 0644);
MODULE_PARM_DESC(client_pids, "processes whose non-persistent put_pages the driver honours for every pin, as MPS adds its client processes to a P2P object's client list (-1: every process)");
static unsigned int map_window_ms = 100;
module_param(map_window_ms, uint, 0644);
MODULE_PARM_DESC(map_window_ms, "a dma_map_pages that starts this soon after its page table was freed by a free callback is the documented window (a client cannot hold its lock across the call), not a use after the callback");
static bool reuse_freed = true;
module_param(reuse_freed, bool, 0644);
MODULE_PARM_DESC(reuse_freed, "1 (default): a freed page table or DMA mapping's address is handed to the next allocation of its size at once (LIFO), as kmalloc does; 0: every object is freshly allocated");
static unsigned int callback_timeout_ms = 5000;
module_param(callback_timeout_ms, uint, 0644);
MODULE_PARM_DESC(callback_timeout_ms, "a call that waits this long for the API lock held across a free callback is reported as a deadlock (-EDEADLK)");

static bool driver_reads = true;
module_param(driver_reads, bool, 0644);
MODULE_PARM_DESC(driver_reads, "1 (default): the driver reads what it is given, as the real one does: after a cudaFree during dma_map_pages' prologue the freed page table, in dma_unmap_pages a mapping the driver freed, after its callback or with its pin at another client's late put (a KASAN report on a KASAN kernel; the real driver can oops there); 0: those calls fail without reading");
static bool persistent_supported = true;
module_param(persistent_supported, bool, 0644);
MODULE_PARM_DESC(persistent_supported, "0: nvidia_p2p_get_pages_persistent fails with -ENOTSUPP, as on MIG, vGPU or confidential computing");

/* The latency model (0: free, the default): what each call costs, charged
 * where the real driver does the work (pin, unpin and map under the API
 * lock; unmap outside it).  Per 64 KiB GPU page plus a fixed part per call. */
static unsigned int lat_pin_call_us;
module_param(lat_pin_call_us, uint, 0644);
MODULE_PARM_DESC(lat_pin_call_us, "latency model: fixed cost of each get_pages / get_pages_persistent call, in microseconds");
static unsigned int lat_pin_page_ns;
module_param(lat_pin_page_ns, uint, 0644);
MODULE_PARM_DESC(lat_pin_page_ns, "latency model: cost of pinning one 64 KiB page, in nanoseconds (under the API lock)");
static unsigned int lat_unpin_page_ns;
module_param(lat_unpin_page_ns, uint, 0644);
MODULE_PARM_DESC(lat_unpin_page_ns, "latency model: cost of unpinning one 64 KiB page in put_pages, in nanoseconds (under the API lock)");
static unsigned int lat_map_page_ns;
module_param(lat_map_page_ns, uint, 0644);
MODULE_PARM_DESC(lat_map_page_ns, "latency model: cost of DMA-mapping one 64 KiB page in dma_map_pages, in nanoseconds (under the API lock)");
static unsigned int lat_unmap_page_ns;
module_param(lat_unmap_page_ns, uint, 0644);
MODULE_PARM_DESC(lat_unmap_page_ns, "latency model: cost of unmapping one 64 KiB page in dma_unmap_pages, in nanoseconds (no API lock)");
static bool lat_spin;
module_param(lat_spin, bool, 0644);
MODULE_PARM_DESC(lat_spin, "latency model: busy-wait the costs on the CPU (1) instead of sleeping (0, the default)");

u32 nvsim_glue_lat_pin_call_us(void) { return READ_ONCE(lat_pin_call_us); }
u32 nvsim_glue_lat_pin_page_ns(void) { return READ_ONCE(lat_pin_page_ns); }
u32 nvsim_glue_lat_unpin_page_ns(void) { return READ_ONCE(lat_unpin_page_ns); }
u32 nvsim_glue_lat_map_page_ns(void) { return READ_ONCE(lat_map_page_ns); }
u32 nvsim_glue_lat_unmap_page_ns(void) { return READ_ONCE(lat_unmap_page_ns); }
bool nvsim_glue_lat_spin(void) { return READ_ONCE(lat_spin); }

u32 nvsim_glue_pt_version(void) { return READ_ONCE(pt_version); }
bool nvsim_glue_persistent_supported(void) { return READ_ONCE(persistent_supported); }
bool nvsim_glue_driver_reads(void) { return READ_ONCE(driver_reads); }
bool nvsim_glue_reuse_freed(void) { return READ_ONCE(reuse_freed); }
u32 nvsim_glue_map_window_ms(void) { return READ_ONCE(map_window_ms); }
bool nvsim_glue_is_client_pid(u32 tgid)
{
	int i, n = READ_ONCE(n_client_pids);

	for (i = 0; i < n && i < ARRAY_SIZE(client_pids); i++)
		if (READ_ONCE(client_pids[i]) == -1 || READ_ONCE(client_pids[i]) == tgid)
			return true;
	return false;
}
u32 nvsim_glue_stale_grace_ms(void) { return READ_ONCE(stale_grace_ms); }
u32 nvsim_glue_callback_timeout_ms(void) { return READ_ONCE(callback_timeout_ms); }

/* --- the RM API lock ------------------------------------------------------ */
static DEFINE_MUTEX(nvidia_p2p_sim_api_lock);
void nvsim_glue_api_lock(void) { mutex_lock(&nvidia_p2p_sim_api_lock); }
bool nvsim_glue_api_trylock(void) { return mutex_trylock(&nvidia_p2p_sim_api_lock); }
void nvsim_glue_api_unlock(void) { mutex_unlock(&nvidia_p2p_sim_api_lock); }
static DEFINE_MUTEX(nvidia_p2p_sim_state_lock);
void nvsim_glue_state_lock(void) { mutex_lock(&nvidia_p2p_sim_state_lock); }
void nvsim_glue_state_unlock(void) { mutex_unlock(&nvidia_p2p_sim_state_lock); }

/* --- tasks, time (the common ones: sim_glue.c) ------------------------------ */
bool nvsim_glue_current_is_kthread(void) { return current->flags & PF_KTHREAD; }
/*
 * The bench's same-process neighbour (tests/simclients/neighbour.c) marks its
 * get_pages and put: what its put does to other pins, and what another
 * caller's dma_map or late put does to its pin, are counted as the
 * neighbour's (neighbour_released_pins, map_newer_neighbour_pin,
 * put_released_neighbour_pin), not as violations or hazards of the client
 * under test.
 */
static struct task_struct *neighbour_task;
void nvidia_p2p_sim_neighbour_call(bool on) { WRITE_ONCE(neighbour_task, on ? current : NULL); }
EXPORT_SYMBOL_GPL(nvidia_p2p_sim_neighbour_call);
bool nvsim_glue_current_is_neighbour(void) { return READ_ONCE(neighbour_task) == current; }
void nvsim_glue_usleep(u64 us) { fsleep(us); }
/* The latency model's sleeps: an hrtimer sleep of exactly this long (fsleep
 * would allow up to twice as long below 20 ms, msleep a jiffy more). */
void nvsim_glue_sleep_us(u64 us) { usleep_range(us, us); }
void nvsim_glue_cpu_relax(void) { cpu_relax(); }
void nvsim_glue_cond_resched(void) { cond_resched(); }

/* --- memory ---------------------------------------------------------------- */
struct page *nvsim_glue_alloc_block(u32 order)
{
	gfp_t gfp = GFP_KERNEL | __GFP_ZERO;

	if (order > 4)
		gfp |= __GFP_NOWARN | __GFP_NORETRY;
	return alloc_pages(gfp, order);
}
u64 nvsim_glue_block_phys(struct page *page) { return page_to_phys(page); }

void nvsim_glue_block_copy(struct page *page, u64 offset, void *buf, size_t len, bool to_block)
{
	while (len) {
		struct page *p = pfn_to_page(page_to_pfn(page) + (offset >> PAGE_SHIFT));
		size_t in_page = offset & ~PAGE_MASK;
		size_t n = min_t(size_t, len, PAGE_SIZE - in_page);
		char *kaddr = kmap_local_page(p);

		if (to_block)
			memcpy(kaddr + in_page, buf, n);
		else
			memcpy(buf, kaddr + in_page, n);
		kunmap_local(kaddr);
		buf += n;
		offset += n;
		len -= n;
	}
}
void *nvsim_glue_kvzalloc(size_t size) { return kvzalloc(size, GFP_KERNEL); }
void nvsim_glue_kvfree(void *p) { kvfree(p); }

/*
 * The ABI objects' headers come from a last-in-first-out cache of freed
 * objects, one per kind and kmalloc size class.  The real driver allocates a
 * page table inside its nv_p2p_mem_info and each DMA mapping on its own,
 * both with os_alloc_mem(), that is kmalloc; SLUB's per-CPU freelist hands
 * the object freed last to the next allocation of its class: a client's
 * stale pointer then names a new, live object at once (a late put_pages
 * releases another pin).  A cached object is filled with the slab poison
 * and, on a generic-KASAN kernel, its shadow marks it as a freed slab
 * object, so a read through a stale pointer is a KASAN "slab-use-after-free"
 * report until the object is handed out again.  reuse_freed=0 frees for
 * real instead (KASAN's own quarantine then keeps addresses from coming
 * back soon).  Every object of a class has the same size (page tables: 32
 * bytes for a major-1 version, else 40; mappings: 40).
 */
struct nvsim_obj_cache {
	size_t size;		/* of the cached objects (0: none yet) */
	unsigned int n, cap;
	void **obj;		/* grows as needed: a cached header is never
				 * freed for real while the module lives, so
				 * the driver's own late reads of it cannot
				 * fault (KFENCE would protect a freed one) */
};
/* [0] page tables <= 32 bytes, [1] bigger page tables, [2] DMA mappings */
static struct nvsim_obj_cache nvsim_obj_cache[3];
static DEFINE_MUTEX(nvsim_obj_lock);

static struct nvsim_obj_cache *nvsim_obj_class(u32 kind, size_t size)
{
	if (kind == NVSIM_OBJ_MAPPING)
		return &nvsim_obj_cache[2];
	return &nvsim_obj_cache[size <= 32 ? 0 : 1];
}

/* Marks [p, p + size) inaccessible (a freed slab object) or accessible to
 * KASAN; size is rounded up to the 8-byte granule (as kmalloc's object). */
static void nvsim_obj_shadow(void *p, size_t size, bool freed)
{
#ifdef CONFIG_KASAN_GENERIC
	/* __memset: the shadow itself must not be checked (KASAN's own
	 * __asan_set_shadow_* helpers write it the same way). */
	__memset(kasan_mem_to_shadow(p), freed ? 0xFB : 0,
		 DIV_ROUND_UP(size, 1UL << KASAN_SHADOW_SCALE_SHIFT));
#endif
}

void *nvsim_glue_obj_alloc(u32 kind, size_t size)
{
	struct nvsim_obj_cache *c = nvsim_obj_class(kind, size);
	void *p = NULL;

	mutex_lock(&nvsim_obj_lock);
	if (c->n && c->size == size)
		p = c->obj[--c->n];
	mutex_unlock(&nvsim_obj_lock);
	if (!p)
		return kzalloc(size, GFP_KERNEL);
	nvsim_obj_shadow(p, size, false);
	memset(p, 0, size);
	return p;
}

void nvsim_glue_obj_free(u32 kind, void *p, size_t size)
{
	struct nvsim_obj_cache *c = nvsim_obj_class(kind, size);

	if (!p)
		return;
	if (!READ_ONCE(reuse_freed)) {
		kfree(p);
		return;
	}
	memset(p, POISON_FREE, size);
	mutex_lock(&nvsim_obj_lock);
	if (c->n == c->cap) {
		unsigned int cap = max(2 * c->cap, 64U);
		void **v = krealloc_array(c->obj, cap, sizeof(*v), GFP_KERNEL);

		if (v) {
			c->obj = v;
			c->cap = cap;
		}
	}
	/* Objects of one class have one size: when page tables change size
	 * (pt_version), the cached ones of the old size go back to the slab. */
	while (c->n && c->size != size) {
		void *old = c->obj[--c->n];

		nvsim_obj_shadow(old, c->size, false);
		kfree(old);
	}
	if (c->n < c->cap) {
		c->size = size;
		c->obj[c->n++] = p;
		nvsim_obj_shadow(p, size, true);
		p = NULL;
	}
	mutex_unlock(&nvsim_obj_lock);
	kfree(p);
}

/*
 * The real driver links a new DMA mapping into the bookkeeping of its page
 * table after the API lock (dma_map_pages' epilogue); a cudaFree meanwhile
 * freed that bookkeeping: the link is a write into freed memory, a KASAN
 * report on a KASAN kernel.  Made only on a page-table header this cache
 * holds (not handed out again, not freed for real meanwhile: the cache's
 * lock is held), with the poison already there, so the cached object stays
 * as it was.
 */
bool nvsim_glue_driver_links_freed(void *p)
{
	bool cached = false;
	unsigned int i, k;

	mutex_lock(&nvsim_obj_lock);
	for (k = 0; k < 2 && !cached; k++)
		for (i = 0; i < nvsim_obj_cache[k].n && !cached; i++)
			cached = nvsim_obj_cache[k].obj[i] == p;
	if (cached)
		WRITE_ONCE(*(u32 *)p, 0x01010101u * POISON_FREE);
	mutex_unlock(&nvsim_obj_lock);
	return cached;
}

/* Module exit, after the last object was freed: back to the slab. */
void nvsim_glue_obj_cache_drain(void)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(nvsim_obj_cache); i++) {
		struct nvsim_obj_cache *c = &nvsim_obj_cache[i];

		while (c->n) {
			void *p = c->obj[--c->n];

			nvsim_obj_shadow(p, c->size, false);
			kfree(p);
		}
		kfree(c->obj);
		c->obj = NULL;
		c->cap = 0;
	}
}

/* --- devices ----------------------------------------------------------------- */
bool nvsim_glue_is_pci(struct pci_dev *peer)
{
	/* Only &peer->dev is read: a to_pci_dev() of a non-PCI device still
	 * points at a real struct device there. */
	return dev_is_pci(&peer->dev);
}

/*
 * The real driver maps BAR pages for a peer with dma_map_resource on every
 * kernel that has dma-direct (kernel-open/nvidia/nv-dma.c, nv_dma_map_mmio
 * and nv_dma_use_map_resource): behind an IOMMU the peer gets IOVAs, without
 * one (dma-direct, x86) the bus address itself.
 */
bool nvsim_glue_dma_map_bar(struct pci_dev *peer, u64 phys, u64 len, u64 *dma)
{
	dma_addr_t a = dma_map_resource(&peer->dev, phys, len, DMA_BIDIRECTIONAL, 0);

	if (dma_mapping_error(&peer->dev, a))
		return false;
	pci_dev_get(peer);
	*dma = a;
	return true;
}

void nvsim_glue_dma_unmap_bar(struct pci_dev *peer, u64 dma, u64 len)
{
	dma_unmap_resource(&peer->dev, dma, len, DMA_BIDIRECTIONAL, 0);
	pci_dev_put(peer);
}

/* --- the character device's ioctls (sim_glue.c copies in and back) ------- */
static int sim_ioctl_call(void *ctx, unsigned int cmd, union sim_ioctl_arg *u)
{
	switch (cmd) {
	case NVSIM_IOC_ALLOC: return nvsim_rs_ioctl_alloc(ctx, &u->alloc);
	case NVSIM_IOC_FREE: return nvsim_rs_ioctl_free(ctx, &u->free);
	case NVSIM_IOC_FAULT: return nvsim_rs_ioctl_fault(ctx, &u->fault);
	case NVSIM_IOC_DELAY: return nvsim_rs_ioctl_delay(ctx, &u->delay);
	case NVSIM_IOC_STATS: return sim_rs_ioctl_stats(ctx, &u->text);
	case NVSIM_IOC_RESET: return sim_rs_ioctl_reset(ctx);
	case NVSIM_IOC_HOOK: return nvsim_rs_ioctl_hook(ctx, &u->hook);
	case NVSIM_IOC_COST: return nvsim_rs_ioctl_cost(ctx, &u->cost);
	case NVSIM_IOC_SHARE: return nvsim_rs_ioctl_share(ctx, &u->share);
	case NVSIM_IOC_MEMCPY: return nvsim_rs_ioctl_memcpy(ctx, &u->copy);
	default: return -ENOTTY;
	}
}

static void sim_ioctl_undo(void *ctx, unsigned int cmd, union sim_ioctl_arg *u)
{
	/* The caller never learns the VA: free the allocation instead of
	 * leaving it to the close of the file. */
	if (cmd == NVSIM_IOC_ALLOC) {
		struct nvsim_free f = { .va = u->alloc.va };

		nvsim_rs_ioctl_free(ctx, &f);
	}
}

/* Nothing of its own to set up besides the work queue (the free hooks')
 * and the device. */
static int sim_component_init(void) { return 0; }
static void sim_component_exit(void) { }
