// SPDX-License-Identifier: GPL-2.0
/*
 * simclient.c -- a peer-memory client written to test the simulators, not
 * to be used: it backs registrations with nvidia_p2p pins of the simulated
 * GPU and registers with the simulated core.  Built twice:
 *
 *   simclient_good.ko  follows the contract; a test that drives it through
 *                      allocations, registrations, cudaFree races and
 *                      deregistrations must see zero violations;
 *   simclient_bad.ko   the same code with a `bug` parameter (writable at run
 *                      time) naming one contract violation to commit; the
 *                      simulators must report exactly that one.
 *
 * Design: one pin per registration, taken in acquire (so a VA that is no
 * GPU memory is not claimed) and kept for get_pages (or, with
 * probe_acquire, a one-page probe pin in acquire and the real pin in
 * get_pages: the design make bench compares with); a per-context mutex
 * that is never held across an nvidia_p2p_* call (the free callback takes
 * it with the driver's lock held); a kref so the free callback and release
 * can race; and, registered with PEER_MEM_INVALIDATE_UNMAPS, invalidation
 * from the free callback only for registrations whose dma_map completed.
 * The SG list is the client's: it keeps its own copy of the table and
 * frees the list in dma_unmap, or else in release (after an UNMAPS
 * invalidation the core clears its copy and calls neither dma_unmap nor
 * put_pages).  The free callback waits for a dma_unmap in flight (which
 * takes no driver API lock) before returning.
 */
#include <linux/kref.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysfs.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "nv-p2p-abi.h"
#include "peer-mem-abi.h"

#define GPU_PAGE NVIDIA_P2P_GPU_PAGE_SIZE

static char *name = SIMCLIENT_NAME;
module_param(name, charp, 0444);
MODULE_PARM_DESC(name, "peer-memory client name (memory_peers directory)");
static bool unmaps = true;
module_param(unmaps, bool, 0444);
MODULE_PARM_DESC(unmaps, "register as an _ex client with PEER_MEM_INVALIDATE_UNMAPS");
static uint ex_size = sizeof(struct peer_memory_client_ex);
module_param(ex_size, uint, 0444);
MODULE_PARM_DESC(ex_size, "ex_size of the _ex structure (< 148: the core must ignore flags)");
static bool invalidation = true;
module_param(invalidation, bool, 0444);
MODULE_PARM_DESC(invalidation, "register with an invalidate callback slot");
static bool persistent;
module_param(persistent, bool, 0444);
MODULE_PARM_DESC(persistent, "pin with nvidia_p2p_get_pages_persistent (no free callback, no invalidation)");
static bool coalesce = true;
module_param(coalesce, bool, 0644);
MODULE_PARM_DESC(coalesce, "merge physically contiguous GPU pages into one SG entry");

static bool probe_acquire;
module_param(probe_acquire, bool, 0644);
MODULE_PARM_DESC(probe_acquire, "the two-pin design: acquire pins only the first GPU page to decide ownership and releases it at once; get_pages pins the whole range (outside the core's global mutex)");

/* The violations simclient_bad can commit (see tests/vm/cases/sim-violations.sh). */
enum sc_bug {
	SCB_NONE,
	/* nvidia_p2p_sim */
	SCB_MISALIGNED, SCB_NULL_CALLBACK, SCB_FOREIGN_VA, SCB_PUT_IN_CALLBACK,
	SCB_UNMAP_IN_CALLBACK, SCB_USE_AFTER_CALLBACK, SCB_DOUBLE_PUT, SCB_UNKNOWN_OBJECT,
	SCB_PUT_BEFORE_UNMAP, SCB_NON_PCI_PEER, SCB_WRONG_PEER, SCB_BAD_ARGS,
	SCB_CALLBACK_DEADLOCK, SCB_PINS_AT_UNLOAD, SCB_API_IN_CALLBACK, SCB_USE_AFTER_PUT,
	/* peer_core_sim */
	SCB_SG_COVERAGE, SCB_SG_ADDRESS, SCB_NMAP_MISMATCH, SCB_SG_TRIM, SCB_BAD_PAGE_SIZE,
	SCB_DMA_MAP_DIRTY, SCB_UNMAP_ERROR, SCB_INVALIDATE_UNKNOWN_ID, SCB_BAD_HANDLE,
	SCB_DMA_AFTER_FREE, SCB_BAD_RETURN, SCB_BAD_CLIENT, SCB_INVALIDATE_DEADLOCK,
	SCB_COUNT
};

#ifdef SIMCLIENT_BAD
static const char *const sc_bug_names[SCB_COUNT] = {
	"none", "misaligned", "null_callback", "foreign_va", "put_in_callback",
	"unmap_in_callback", "use_after_free_callback", "double_put", "unknown_object",
	"put_before_unmap", "non_pci_peer", "wrong_peer", "bad_args",
	"callback_deadlock", "pins_at_unload", "api_in_callback", "use_after_put",
	"sg_coverage", "sg_address", "nmap_mismatch", "sg_trim", "bad_page_size",
	"dma_map_dirty", "unmap_error", "invalidate_unknown_id", "bad_handle",
	"dma_after_free", "bad_return", "bad_client", "invalidate_deadlock",
};
static int sc_bug;

static int sc_bug_set(const char *val, const struct kernel_param *kp)
{
	int i;

	for (i = 0; i < SCB_COUNT; i++) {
		if (sysfs_streq(val, sc_bug_names[i])) {
			WRITE_ONCE(sc_bug, i);
			return 0;
		}
	}
	return -EINVAL;
}

static int sc_bug_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s\n", sc_bug_names[READ_ONCE(sc_bug)]);
}

static const struct kernel_param_ops sc_bug_ops = { .set = sc_bug_set, .get = sc_bug_get };
module_param_cb(bug, &sc_bug_ops, NULL, 0644);
MODULE_PARM_DESC(bug, "the contract violation to commit (named as the simulators count it), or none");

static bool is_bug(enum sc_bug b) { return READ_ONCE(sc_bug) == b; }
#else
static bool is_bug(enum sc_bug b) { return false; }
#endif

static void *sc_handle;
static invalidate_peer_memory sc_invalidate;

/* One acquired range. */
struct sc_ctx {
	struct kref ref;		/* the core's (acquire..release) + a running free callback's */
	struct mutex lock;		/* never held across an nvidia_p2p_* call */
	u64 addr, size;			/* as the core passed them */
	u64 va, len;			/* 64 KiB-aligned */
	bool persistent;
	u64 core_context;		/* the core's id: 0 is a valid one */
	bool has_id;			/* get_pages gave core_context */
	struct nvidia_p2p_page_table *pt;	/* NULL once put, or freed by the driver */
	struct nvidia_p2p_dma_mapping *map;
	struct pci_dev *peer;
	bool mapped;			/* dma_map done, dma_unmap not yet */
	bool freed;			/* the free callback ran: pt and map are the driver's */
	struct sg_table sgt;		/* our copy of the table dma_map filled */
	bool sg_owned;			/* sgt holds a list we must free */
	bool unmapping;			/* a dma_unmap_pages is in flight */
	bool probed;			/* probe_acquire: pinned in get_pages, not acquire */
	wait_queue_head_t unmap_wq;
};

/* Frees our SG list, once (dma_unmap, else release). */
static void sc_free_sg(struct sc_ctx *c)
{
	bool owned;

	mutex_lock(&c->lock);
	owned = c->sg_owned;
	c->sg_owned = false;
	mutex_unlock(&c->lock);
	if (owned)
		sg_free_table(&c->sgt);
}

static void sc_ctx_free(struct kref *ref)
{
	struct sc_ctx *c = container_of(ref, struct sc_ctx, ref);

	mutex_destroy(&c->lock);
	kfree(c);
}

static void sc_free_callback(void *data);

/* --- pinning ----------------------------------------------------------------- */
typedef int (*sc_get_persistent_t)(u64, u64, struct nvidia_p2p_page_table **, u32);
typedef int (*sc_put_persistent_t)(u64, struct nvidia_p2p_page_table *, u32);

static int sc_pin_persistent(struct sc_ctx *c)
{
	sc_get_persistent_t f = __symbol_get("nvidia_p2p_get_pages_persistent");
	int ret;

	if (!f)
		return -EOPNOTSUPP;
	ret = f(c->va, c->len, &c->pt, 0);
	__symbol_put("nvidia_p2p_get_pages_persistent");
	return ret;
}

struct sc_work {
	struct work_struct work;
	struct sc_ctx *c;
	struct nvidia_p2p_page_table *pt;
	int ret;
};

static void sc_pin_work(struct work_struct *w)
{
	struct sc_work *sw = container_of(w, struct sc_work, work);

	sw->ret = nvidia_p2p_get_pages(0, 0, sw->c->va, sw->c->len, &sw->c->pt, sc_free_callback, sw->c);
}

static void sc_put_work(struct work_struct *w)
{
	struct sc_work *sw = container_of(w, struct sc_work, work);

	sw->ret = nvidia_p2p_put_pages(0, 0, sw->c->va, sw->pt);
}

/*
 * Runs fn in a kernel worker and waits for it.  A macro, so that each use has
 * its own lockdep class for the work (the pin worker takes the driver's lock;
 * the put worker is flushed with it held).
 */
#define sc_in_worker(fn, ctx, table) ({					\
	struct sc_work sw = { .c = (ctx), .pt = (table) };		\
									\
	INIT_WORK_ONSTACK(&sw.work, fn);				\
	schedule_work(&sw.work);					\
	flush_work(&sw.work);						\
	destroy_work_on_stack(&sw.work);				\
	sw.ret;								\
})

static int sc_pin(struct sc_ctx *c)
{
	if (c->persistent || is_bug(SCB_PINS_AT_UNLOAD)) {
		c->persistent = true;
		return sc_pin_persistent(c);
	}
	if (is_bug(SCB_MISALIGNED))
		return nvidia_p2p_get_pages(0, 0, c->addr, c->size, &c->pt, sc_free_callback, c);
	if (is_bug(SCB_NULL_CALLBACK))
		return nvidia_p2p_get_pages(0, 0, c->va, c->len, &c->pt, NULL, c);
	if (is_bug(SCB_FOREIGN_VA))
		return sc_in_worker(sc_pin_work, c, NULL);
	return nvidia_p2p_get_pages(0, 0, c->va, c->len, &c->pt, sc_free_callback, c);
}

static void sc_unpin(struct sc_ctx *c, struct nvidia_p2p_page_table *pt)
{
	static u8 sc_not_a_table[64];

	if (c->persistent) {
		sc_put_persistent_t f = __symbol_get("nvidia_p2p_put_pages_persistent");

		if (f) {
			f(c->va, pt, 0);
			__symbol_put("nvidia_p2p_put_pages_persistent");
		}
		return;
	}
	if (is_bug(SCB_UNKNOWN_OBJECT))
		nvidia_p2p_put_pages(0, 0, c->va, (struct nvidia_p2p_page_table *)sc_not_a_table);
	if (is_bug(SCB_BAD_ARGS))
		nvidia_p2p_put_pages(0, 0, c->va + GPU_PAGE, pt);
	nvidia_p2p_put_pages(0, 0, c->va, pt);
	if (is_bug(SCB_DOUBLE_PUT))
		nvidia_p2p_put_pages(0, 0, c->va, pt);
}

/* --- the driver's free callback (its lock held: no nvidia_p2p_* calls) --- */
static void sc_free_callback(void *data)
{
	struct sc_ctx *c = data;
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_dma_mapping *map;
	struct pci_dev *peer;
	bool inval;
	u64 id;

	kref_get(&c->ref);
	mutex_lock(&c->lock);
	pt = c->pt;
	map = c->map;
	peer = c->peer;
	/* invalidate_deadlock: the pin is not forgotten either, so a
	 * deregistration holding the mapping lock (a core without
	 * INVALIDATE_UNMAPS) puts it and waits for the driver's lock this
	 * callback holds, while the callback invalidates. */
	if (!is_bug(SCB_USE_AFTER_CALLBACK) && !is_bug(SCB_INVALIDATE_DEADLOCK)) {
		c->freed = true;
		c->pt = NULL;
		c->map = NULL;
	}
	/* Only a registration the HCA may use needs fencing; one still in
	 * get_pages/dma_map fails in dma_map instead (invalidating it here
	 * would wait for that dma_map, which waits for this driver's lock). */
	inval = c->mapped && sc_invalidate && c->has_id;
	id = c->core_context;
	mutex_unlock(&c->lock);

	if (is_bug(SCB_PUT_IN_CALLBACK))
		nvidia_p2p_put_pages(0, 0, c->va, pt);
	if (is_bug(SCB_UNMAP_IN_CALLBACK) && map)
		nvidia_p2p_dma_unmap_pages(peer, pt, map);
	if (is_bug(SCB_CALLBACK_DEADLOCK))
		sc_in_worker(sc_put_work, c, pt);
	if (is_bug(SCB_API_IN_CALLBACK) && peer) {
		struct nvidia_p2p_dma_mapping *m;

		nvidia_p2p_dma_map_pages(peer, pt, &m);
	}
	if (inval && !is_bug(SCB_DMA_AFTER_FREE)) {
		if (is_bug(SCB_INVALIDATE_UNKNOWN_ID))
			sc_invalidate(sc_handle, id + 1000);
		if (is_bug(SCB_BAD_HANDLE))
			sc_invalidate((char *)sc_handle + 8, id);
		sc_invalidate(sc_handle, id);
	}
	/* The driver frees the mapping once we return: a dma_unmap of it still
	 * in flight must finish first (it takes no driver API lock). */
	wait_event(c->unmap_wq, !READ_ONCE(c->unmapping));
	kref_put(&c->ref, sc_ctx_free);
}

/*
 * The two-pin design (probe_acquire): ownership is decided by pinning the
 * range's first GPU page, released at once; get_pages pins the whole range.
 * A cudaFree between the probe and its release is the driver's documented
 * benign race (its put returns 0); the range is then declined.
 */
static int sc_probe(struct sc_ctx *c, void **client_context)
{
	struct nvidia_p2p_page_table *pt;
	u64 len = c->len;
	bool freed;
	int ret;

	c->len = GPU_PAGE;
	ret = sc_pin(c);
	c->len = len;
	if (ret) {
		kref_put(&c->ref, sc_ctx_free);
		return 0;
	}
	mutex_lock(&c->lock);
	pt = c->pt;
	c->pt = NULL;
	freed = c->freed;
	mutex_unlock(&c->lock);
	if (pt)
		sc_unpin(c, pt);
	if (freed) {
		kref_put(&c->ref, sc_ctx_free);
		return 0;
	}
	c->probed = true;
	*client_context = c;
	return 1;
}

/* --- the peer_memory_client callbacks -------------------------------------- */
static int sc_acquire(unsigned long addr, size_t size, void *peer_mem_private_data,
		      char *peer_mem_name, void **client_context)
{
	struct sc_ctx *c;

	if (!size || addr + size < addr)
		return 0;
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return 0;
	kref_init(&c->ref);
	mutex_init(&c->lock);
	init_waitqueue_head(&c->unmap_wq);
	c->addr = addr;
	c->size = size;
	c->va = ALIGN_DOWN(addr, GPU_PAGE);
	c->len = ALIGN(addr + size, GPU_PAGE) - c->va;
	c->persistent = persistent;
	if (READ_ONCE(probe_acquire))
		return sc_probe(c, client_context);
	if (sc_pin(c)) {
		/* Not GPU memory of this process: not ours. */
		kref_put(&c->ref, sc_ctx_free);
		return 0;
	}
	*client_context = c;
	return 1;
}

static int sc_get_pages(unsigned long addr, size_t size, int write, int force,
			struct sg_table *sg_head, void *context, u64 core_context)
{
	struct sc_ctx *c = context;
	int ret = 0;

	/* The two-pin design: the whole range is pinned only now. */
	if (c->probed && !c->pt && !c->freed) {
		ret = sc_pin(c);
		if (ret)
			return ret;
	}
	mutex_lock(&c->lock);
	if (c->freed)
		ret = -EINVAL;
	else {
		c->core_context = core_context;
		c->has_id = true;
	}
	mutex_unlock(&c->lock);
	if (!ret && is_bug(SCB_BAD_RETURN))
		return 1;
	return ret;
}

/* Fills sgt from the mapping: one entry per run of contiguous pages. */
static int sc_build_sg(struct sg_table *sgt, struct nvidia_p2p_dma_mapping *map, int *nmap)
{
	u64 *a = map->dma_addresses;
	bool merge = coalesce && !is_bug(SCB_SG_TRIM) && !is_bug(SCB_SG_ADDRESS);
	struct scatterlist *sg;
	u32 n = map->entries, i, runs = 0, extra = is_bug(SCB_SG_TRIM) ? 1 : 0;
	u64 run_len = 0;
	int ret;

	for (i = 0; i < n; i++) {
		if (i == 0 || !merge || a[i] != a[i - 1] + GPU_PAGE || run_len >= SZ_1G) {
			runs++;
			run_len = 0;
		}
		run_len += GPU_PAGE;
	}
	ret = sg_alloc_table(sgt, runs + extra, GFP_KERNEL);
	if (ret)
		return ret;
	sg = sgt->sgl;
	if (extra) {
		/* A first entry of 4 KiB: shorter than the core's trim of an
		 * address 4 KiB or more into its GPU page. */
		sg->length = SZ_4K;
		sg->offset = 0;
		sg_dma_address(sg) = a[0];
		sg_dma_len(sg) = SZ_4K;
		sg = sg_next(sg);
	}
	for (i = 0; i < n; ) {
		u32 j = i + 1;
		u64 len;

		while (merge && j < n && a[j] == a[j - 1] + GPU_PAGE && (u64)(j - i) * GPU_PAGE < SZ_1G)
			j++;
		len = (u64)(j - i) * GPU_PAGE;
		sg_dma_address(sg) = a[i];
		if (extra && i == 0) {
			sg_dma_address(sg) += SZ_4K;
			len -= SZ_4K;
		}
		if (is_bug(SCB_SG_ADDRESS) && i == 0)
			sg_dma_address(sg) += SZ_4K;
		if (is_bug(SCB_SG_COVERAGE) && j == n)
			len -= SZ_4K;
		sg->length = len;
		sg->offset = 0;
		sg_dma_len(sg) = len;
		sg = sg_next(sg);
		i = j;
	}
	*nmap = runs + extra + (is_bug(SCB_NMAP_MISMATCH) ? 1 : 0);
	return 0;
}

static int sc_dma_map(struct sg_table *sgt, void *context, struct device *dma_device,
		      int dmasync, int *nmap)
{
	struct sc_ctx *c = context;
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_dma_mapping *map;
	struct pci_dev *peer;
	int ret;

	/* The GPU maps for a PCI peer only: refuse anything else cleanly. */
	if (!dev_is_pci(dma_device) && !is_bug(SCB_NON_PCI_PEER))
		return -EOPNOTSUPP;
	peer = to_pci_dev(dma_device);
	mutex_lock(&c->lock);
	pt = c->freed ? NULL : c->pt;
	mutex_unlock(&c->lock);
	if (!pt)
		return -EINVAL;
	ret = nvidia_p2p_dma_map_pages(peer, pt, &map);
	if (ret)
		return ret;
	mutex_lock(&c->lock);
	if (c->freed) {
		/* Freed meanwhile: the driver released the mapping too. */
		mutex_unlock(&c->lock);
		return -EINVAL;
	}
	ret = sc_build_sg(sgt, map, nmap);
	if (!ret) {
		c->sgt = *sgt;
		c->sg_owned = true;
	}
	if (!ret && is_bug(SCB_DMA_MAP_DIRTY))
		ret = -ENOMEM;	/* ... leaving the filled table behind (freed in release) */
	if (!ret) {
		c->map = map;
		c->peer = peer;
		c->mapped = true;
	}
	mutex_unlock(&c->lock);
	if (ret)
		nvidia_p2p_dma_unmap_pages(peer, pt, map);
	return ret;
}

static int sc_dma_unmap(struct sg_table *sgt, void *context, struct device *dma_device)
{
	struct sc_ctx *c = context;
	struct nvidia_p2p_dma_mapping *map;
	struct nvidia_p2p_page_table *pt;
	struct pci_dev *peer, *other;

	mutex_lock(&c->lock);
	map = c->map;
	pt = c->pt;
	peer = c->peer;
	c->map = NULL;
	c->mapped = false;
	if (map)
		WRITE_ONCE(c->unmapping, true);
	mutex_unlock(&c->lock);
	sc_free_sg(c);
	if (map && !is_bug(SCB_PUT_BEFORE_UNMAP)) {
		if (is_bug(SCB_WRONG_PEER)) {
			other = pci_get_device(PCI_ANY_ID, PCI_ANY_ID, pci_dev_get(peer));
			if (other)
				nvidia_p2p_dma_unmap_pages(other, pt, map);
			pci_dev_put(other);
		}
		nvidia_p2p_dma_unmap_pages(peer, pt, map);
	}
	if (map) {
		WRITE_ONCE(c->unmapping, false);
		wake_up_all(&c->unmap_wq);
	}
	return is_bug(SCB_UNMAP_ERROR) ? -EIO : 0;
}

static void sc_put_pages(struct sg_table *sg_head, void *context)
{
	struct sc_ctx *c = context;
	struct nvidia_p2p_page_table *pt;

	if (is_bug(SCB_PINS_AT_UNLOAD))
		return;		/* leaks the (persistent) pin */
	mutex_lock(&c->lock);
	pt = c->pt;
	c->pt = NULL;
	mutex_unlock(&c->lock);
	if (pt)
		sc_unpin(c, pt);
	if (pt && is_bug(SCB_USE_AFTER_PUT) && c->peer) {
		struct nvidia_p2p_dma_mapping *m;

		nvidia_p2p_dma_map_pages(c->peer, pt, &m);
	}
}

static unsigned long sc_get_page_size(void *context)
{
	return is_bug(SCB_BAD_PAGE_SIZE) ? GPU_PAGE + 1 : GPU_PAGE;
}

static void sc_release(void *context)
{
	struct sc_ctx *c = context;
	struct nvidia_p2p_page_table *pt;

	/* A registration that failed before put_pages still holds its pin. */
	mutex_lock(&c->lock);
	pt = c->pt;
	c->pt = NULL;
	mutex_unlock(&c->lock);
	/* The bug: the mapping the driver freed after the free callback,
	 * unmapped late (the core calls no dma_unmap after an UNMAPS
	 * invalidation, so this is where such a client would do it). */
	if (is_bug(SCB_USE_AFTER_CALLBACK) && c->map && pt)
		nvidia_p2p_dma_unmap_pages(c->peer, pt, c->map);
	if (pt && !is_bug(SCB_PINS_AT_UNLOAD))
		sc_unpin(c, pt);
	sc_free_sg(c);
	kref_put(&c->ref, sc_ctx_free);
}

static struct peer_memory_client_ex sc_client = {
	.client = {
		.version = "1.0",
		.acquire = sc_acquire,
		.get_pages = sc_get_pages,
		.dma_map = sc_dma_map,
		.dma_unmap = sc_dma_unmap,
		.put_pages = sc_put_pages,
		.get_page_size = sc_get_page_size,
		.release = sc_release,
	},
};

static int __init sc_init(void)
{
	invalidate_peer_memory *slot = (invalidation && !persistent) ? &sc_invalidate : NULL;

	strscpy(sc_client.client.name, name, IB_PEER_MEMORY_NAME_MAX);
	if (unmaps) {
		sc_client.client.version[IB_PEER_MEMORY_VER_MAX - 1] = 1;
		sc_client.ex_size = ex_size;
		sc_client.flags = PEER_MEM_INVALIDATE_UNMAPS;
	}
	sc_handle = ib_register_peer_memory_client(&sc_client.client, slot);
	if (!sc_handle)
		return -EINVAL;
	if (is_bug(SCB_BAD_CLIENT)) {
		static struct peer_memory_client malformed;
		void *h;

		malformed = sc_client.client;
		malformed.version[IB_PEER_MEMORY_VER_MAX - 1] = 0;
		strscpy(malformed.name, "simclient_malformed", IB_PEER_MEMORY_NAME_MAX);
		malformed.get_pages = NULL;
		h = ib_register_peer_memory_client(&malformed, NULL);
		if (h)
			ib_unregister_peer_memory_client(h);
	}
	pr_info("%s: registered (unmaps=%d invalidation=%d persistent=%d)\n",
		sc_client.client.name, unmaps, !!slot, persistent);
	return 0;
}

static void __exit sc_exit(void)
{
	ib_unregister_peer_memory_client(sc_handle);
}

module_init(sc_init);
module_exit(sc_exit);
MODULE_DESCRIPTION("Peer-memory test client for the simulators' self-test (" SIMCLIENT_NAME ")");
MODULE_AUTHOR("peermem-rs developers");
MODULE_LICENSE("GPL");
