// SPDX-License-Identifier: GPL-2.0
/*
 * glue.c -- the C side of peer_core_sim.ko: exports, module parameters, the
 * memory_peers sysfs directories, SG-list accessors and other static-inline
 * kernel helpers for the Rust crate (peer_core_sim.rs), the ioctl
 * dispatch; the rest is the simulators' shared glue (common/sim_glue.c,
 * included below).  No core logic lives here.
 */
#include <linux/iommu.h>
#include <linux/kernfs.h>
#include <linux/kobject.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/dma-mapping.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/sysfs.h>

#include "peer-mem-abi.h"
#include "sim_link.h"
#include "glue.h"

/* The shared part (common/sim_glue.c): the character device, the work
 * queue (the step hooks', disassociate), reports, task and time helpers. */
#define SIM_NAME "peer_core_sim"
union sim_ioctl_arg {
	struct pcsim_reg reg;
	struct pcsim_handle handle;
	struct pcsim_query query;
	struct pcsim_dereg dereg;
	struct pcsim_dma dma;
	struct sim_text text;
};
#include "../common/sim_glue.c"

MODULE_AUTHOR("peermem-rs developers");

/* --- the exported API (implemented in Rust, entry.rs) ------------------ */
EXPORT_SYMBOL(ib_register_peer_memory_client);
EXPORT_SYMBOL(ib_unregister_peer_memory_client);
/* For nvidia_p2p_sim (looked up at run time). */
EXPORT_SYMBOL_GPL(peer_core_sim_gpu_freed);
/* For the bench's soft RDMA device (looked up at run time, per MR). */
const struct peer_core_sim_hca peer_core_sim_hca = {
	.mr_get = pcsim_rs_hca_mr_get,
	.mr_dma = pcsim_rs_hca_mr_dma,
	.mr_put = pcsim_rs_hca_mr_put,
};
EXPORT_SYMBOL_GPL(peer_core_sim_hca);

#ifdef NVSIM_DRIVER_REBUILD
/*
 * The simulators' second build (tests/bench/build.sh's <src>-upgrade tree,
 * the one that makes nvidia_p2p_sim's driver upgrade): this core as
 * another build of the same DOCA-OFED source -- Canonical's prebuilt
 * linux-modules-doca-ofed-* against a rebuild from its DKMS source, which
 * differ in their CRCs.  The same gendwarfksyms rule as nvsim/glue.c's
 * (section .discard: nothing of it reaches the module), on the client
 * structure: ib_register_peer_memory_client gets another CRC, the rest of
 * the ABI and all of the code stay as they are.
 */
static const char pcsim_rebuild_rule[] __used __aligned(1)
	__section(".discard.gendwarfksyms.kabi_rules") = "1\0declonly\0peer_memory_client\0";
#endif

/* --- module parameters ------------------------------------------------ */
static char *hca_bdf;
module_param(hca_bdf, charp, 0444);
MODULE_PARM_DESC(hca_bdf, "PCI device acting as the HCA, DDDD:BB:DD.F (default: the first PCI device)");
static bool hca_nonpci;
module_param(hca_nonpci, bool, 0644);
MODULE_PARM_DESC(hca_nonpci, "pass a non-PCI struct device as dma_device to new registrations");

bool pcsim_glue_param_nonpci(void) { return READ_ONCE(hca_nonpci); }

/*
 * Where real cores differ (docs/facts/peer-memory-core.md), one knob
 * each; `variant` presets them, a knob given explicitly wins (-1: from the
 * variant):
 *   current    DOCA-OFED / NVIDIA kernels today: honours
 *              PEER_MEM_INVALIDATE_UNMAPS, no memory_peers sysfs (duplicate
 *              names accepted), trims the first/last SG entries, dma_map's
 *              nmap is &sg_head->nents itself;
 *   mlnx-old   older MLNX_OFED: memory_peers sysfs (a duplicate name is
 *              refused: its kobject collides), the umem page shift taken
 *              from get_page_size (no trims), get_page_size asked before
 *              dma_map and nmap a separate int;
 *   no-unmaps  a core that ignores PEER_MEM_INVALIDATE_UNMAPS (calls
 *              dma_unmap/put_pages from inside invalidate);
 *   ofed-24.10 current, but with the invalidation notifier's end test of
 *              OFED <= 24.10 and NV-Kernels (`!=` "no invalidation"): a
 *              client without invalidation is deregistered without the
 *              mapping lock, which is then unlocked all the same.
 */
static char *variant = "current";
module_param(variant, charp, 0444);
MODULE_PARM_DESC(variant, "core variant: current (default), mlnx-old, no-unmaps, ofed-24.10");
static int notifier_ne = -1;
module_param(notifier_ne, int, 0644);
MODULE_PARM_DESC(notifier_ne, "1: OFED <= 24.10's notifier test: a client without invalidation is deregistered (dma_unmap, put_pages) without the mapping lock, then the lock is unlocked unheld (a lockdep 'bad unlock balance' on the real core); 0: fixed (-1: from variant)");
static int honour_unmaps = -1;
module_param(honour_unmaps, int, 0644);
MODULE_PARM_DESC(honour_unmaps,
	"1: honour PEER_MEM_INVALIDATE_UNMAPS; 0: behave as a core that ignores it and calls dma_unmap/put_pages from inside invalidate (-1: from variant)");
static int memory_peers = -1;
module_param(memory_peers, int, 0444);
MODULE_PARM_DESC(memory_peers, "1: create /sys/kernel/mm/memory_peers/<client>/ (older cores); 0: none (current cores) (-1: from variant)");
static int sg_page_shift = -1;
module_param(sg_page_shift, int, 0644);
MODULE_PARM_DESC(sg_page_shift, "SG regime: 1: umem page shift from get_page_size, every entry page-aligned, no trims (older cores); 0: trim first/last entries (-1: from variant)");
static int legacy_map = -1;
module_param(legacy_map, int, 0644);
MODULE_PARM_DESC(legacy_map, "1: get_page_size before dma_map, nmap a separate int (older cores); 0: get_page_size after dma_map, nmap aliases sg_head->nents (-1: from variant)");
static bool refuse_duplicate_names;
module_param(refuse_duplicate_names, bool, 0644);
MODULE_PARM_DESC(refuse_duplicate_names, "refuse a second client of the same name (NULL), as cores with memory_peers do (implied by memory_peers=1); default: accept it, as DOCA-OFED 25.10");
/* Takes one injected failure from a countdown parameter, if one is due. */
static bool pcsim_take_one(unsigned int *count)
{
	unsigned int v;

	do {
		v = READ_ONCE(*count);
		if (!v)
			return false;
	} while (cmpxchg(count, v, v - 1) != v);
	return true;
}
static unsigned int fail_mkey;
module_param(fail_mkey, uint, 0644);
MODULE_PARM_DESC(fail_mkey, "fail the HW driver's MR (mkey) creation after the next N registrations were MAPPED: ENOMEM, the umem released (dma_unmap, put_pages, release)");
bool pcsim_glue_take_fail_mkey(void) { return pcsim_take_one(&fail_mkey); }
static unsigned int fail_register;
module_param(fail_register, uint, 0644);
MODULE_PARM_DESC(fail_register, "fail the next N ib_register_peer_memory_client calls as the core's allocation failing: NULL");
bool pcsim_glue_take_fail_register(void) { return pcsim_take_one(&fail_register); }
static bool memlock = true;
module_param(memlock, bool, 0644);
MODULE_PARM_DESC(memlock, "charge registrations to RLIMIT_MEMLOCK before the peer path (EPERM with limit 0, ENOMEM past it, without CAP_IPC_LOCK), as ib_umem_get does");
bool pcsim_glue_param_memlock(void) { return READ_ONCE(memlock); }

void *pcsim_glue_memlock_charge(u64 npages, int *err)
{
	struct mm_struct *mm = current->mm;
	unsigned long limit;
	s64 pinned;

	if (!mm) {
		*err = -EFAULT;
		return NULL;
	}
	/* ib_umem_get: RLIMIT_MEMLOCK 0 without CAP_IPC_LOCK is EPERM. */
	if (!can_do_mlock()) {
		*err = -EPERM;
		return NULL;
	}
	limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	pinned = atomic64_add_return(npages, &mm->pinned_vm);
	if (pinned > limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(npages, &mm->pinned_vm);
		*err = -ENOMEM;
		return NULL;
	}
	mmgrab(mm);
	*err = 0;
	return mm;
}

void pcsim_glue_memlock_uncharge(void *p, u64 npages)
{
	struct mm_struct *mm = p;

	atomic64_sub(npages, &mm->pinned_vm);
	mmdrop(mm);
}

static unsigned int register_hold_ms;
module_param(register_hold_ms, uint, 0644);
MODULE_PARM_DESC(register_hold_ms, "keep ib_register_peer_memory_client from returning this long after the client is published (acquire can already be called)");
static unsigned int unregister_hold_ms;
module_param(unregister_hold_ms, uint, 0644);
MODULE_PARM_DESC(unregister_hold_ms, "keep ib_unregister_peer_memory_client from returning this long after the client is gone");

bool pcsim_glue_param_honour_unmaps(void) { return READ_ONCE(honour_unmaps) > 0; }
bool pcsim_glue_param_memory_peers(void) { return READ_ONCE(memory_peers) > 0; }
bool pcsim_glue_param_page_shift(void) { return READ_ONCE(sg_page_shift) > 0; }
bool pcsim_glue_param_legacy_map(void) { return READ_ONCE(legacy_map) > 0; }
bool pcsim_glue_param_notifier_ne(void) { return READ_ONCE(notifier_ne) > 0; }
bool pcsim_glue_param_refuse_dups(void)
{
	return READ_ONCE(refuse_duplicate_names) || READ_ONCE(memory_peers) > 0;
}
u32 pcsim_glue_param_register_hold_ms(void) { return READ_ONCE(register_hold_ms); }
u32 pcsim_glue_param_unregister_hold_ms(void) { return READ_ONCE(unregister_hold_ms); }
const char *pcsim_glue_param_variant(void) { return variant; }

static int pcsim_apply_variant(void)
{
	static const struct {
		const char *name;
		int unmaps, sysfs, page_shift, legacy_map, notifier_ne;
	} v[] = {
		{ "current", 1, 0, 0, 0, 0 },
		{ "mlnx-old", 1, 1, 1, 1, 0 },
		{ "no-unmaps", 0, 0, 0, 0, 0 },
		{ "ofed-24.10", 1, 0, 0, 0, 1 },
	};
	int i;

	for (i = 0; i < ARRAY_SIZE(v); i++) {
		if (!variant || !sysfs_streq(variant, v[i].name))
			continue;
		if (honour_unmaps < 0)
			honour_unmaps = v[i].unmaps;
		if (memory_peers < 0)
			memory_peers = v[i].sysfs;
		if (sg_page_shift < 0)
			sg_page_shift = v[i].page_shift;
		if (legacy_map < 0)
			legacy_map = v[i].legacy_map;
		if (notifier_ne < 0)
			notifier_ne = v[i].notifier_ne;
		return 0;
	}
	pr_err("peer_core_sim: unknown variant '%s' (current, mlnx-old, no-unmaps, ofed-24.10)\n",
	       variant ? variant : "");
	return -EINVAL;
}

/* --- locks ------------------------------------------------------------------ */
static DEFINE_MUTEX(peer_core_sim_peer_lock);
static DEFINE_MUTEX(peer_core_sim_table_lock);
static struct mutex *pcsim_mutex(u32 which)
{
	return which == PCSIM_LOCK_PEERS ? &peer_core_sim_peer_lock : &peer_core_sim_table_lock;
}
void pcsim_glue_lock(u32 which) { mutex_lock(pcsim_mutex(which)); }
void pcsim_glue_unlock(u32 which) { mutex_unlock(pcsim_mutex(which)); }

/* --- the HCA -------------------------------------------------------------- */

/* The HCA's DMA segment limit, as its driver sets it (mlx5: 2 GiB). */
static unsigned int hca_max_seg = 0x80000000u;
module_param(hca_max_seg, uint, 0444);
MODULE_PARM_DESC(hca_max_seg, "DMA max segment size given to the HCA device (default 2 GiB, as mlx5 sets it)");
static unsigned int hca_saved_max_seg;
static u64 hca_saved_mask, hca_saved_coherent;
static bool hca_mask_set;

struct pci_dev *pcsim_glue_hca_get(void)
{
	unsigned int domain, bus, slot, fn;
	struct pci_dev *pdev;

	if (hca_bdf && *hca_bdf) {
		if (sscanf(hca_bdf, "%x:%x:%x.%x", &domain, &bus, &slot, &fn) != 4)
			return NULL;
		pdev = pci_get_domain_bus_and_slot(domain, bus, PCI_DEVFN(slot, fn));
	} else {
		pdev = pci_get_device(PCI_ANY_ID, PCI_ANY_ID, NULL);
	}
	/* Model the HCA driver's set-up; restored at unload. */
	if (pdev && pdev->dev.dma_parms) {
		hca_saved_max_seg = dma_get_max_seg_size(&pdev->dev);
		dma_set_max_seg_size(&pdev->dev, hca_max_seg);
	}
	/* mlx5 asks for 64-bit DMA (mlx5_pci_init, set_dma_caps). */
	if (pdev && pdev->dev.dma_mask) {
		hca_saved_mask = *pdev->dev.dma_mask;
		hca_saved_coherent = pdev->dev.coherent_dma_mask;
		hca_mask_set = !dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	}
	return pdev;
}
void pcsim_glue_hca_put(struct pci_dev *pdev)
{
	if (pdev && pdev->dev.dma_parms && hca_saved_max_seg)
		dma_set_max_seg_size(&pdev->dev, hca_saved_max_seg);
	if (pdev && hca_mask_set) {
		dma_set_mask(&pdev->dev, hca_saved_mask);
		dma_set_coherent_mask(&pdev->dev, hca_saved_coherent);
		hca_mask_set = false;
	}
	pci_dev_put(pdev);
}

/* The HCA's DMA as the hardware does it: an IOMMU in a translating
 * (paging) domain resolves the address through its page table, and an
 * address it has nothing mapped at faults; with no IOMMU, or an identity
 * domain, the bus address is the physical one. */
static struct iommu_domain *pcsim_dma_domain(struct device *dev)
{
	struct iommu_domain *d = iommu_get_domain_for_dev(dev);

	return d && (d->type & __IOMMU_DOMAIN_PAGING) ? d : NULL;
}
bool pcsim_glue_dma_translated(struct device *dev) { return pcsim_dma_domain(dev); }
bool pcsim_glue_dma_to_phys(struct device *dev, u64 dma, u64 *phys)
{
	struct iommu_domain *d = pcsim_dma_domain(dev);

	*phys = d ? iommu_iova_to_phys(d, dma) : dma;
	return *phys != 0 || !d;
}
struct device *pcsim_glue_pci_device(struct pci_dev *pdev) { return &pdev->dev; }
struct device *pcsim_glue_nonpci_device(void) { return sim_misc.this_device; }
const char *pcsim_glue_dev_name(struct device *dev) { return dev_name(dev); }

/* --- SG tables ----------------------------------------------------------- */
struct sg_table *pcsim_glue_sgt_alloc(void) { return kzalloc(sizeof(struct sg_table), GFP_KERNEL); }
void pcsim_glue_sgt_free(struct sg_table *sgt) { kfree(sgt); }
void pcsim_glue_sgt_clear(struct sg_table *sgt) { memset(sgt, 0, sizeof(*sgt)); }
bool pcsim_glue_sgt_empty(struct sg_table *sgt)
{
	return !sgt->sgl && !sgt->nents && !sgt->orig_nents;
}
/* Current cores pass &sg_head->nents itself as dma_map's nmap. */
int *pcsim_glue_sgt_nents(struct sg_table *sgt) { return (int *)&sgt->nents; }
void pcsim_glue_sgt_counts(struct sg_table *sgt, u32 *nents, u32 *orig_nents)
{
	*nents = sgt->nents;
	*orig_nents = sgt->orig_nents;
}

static struct scatterlist *pcsim_sg_at(struct sg_table *sgt, u32 idx)
{
	struct scatterlist *sg = sgt->sgl;
	u32 i;

	if (idx >= sgt->orig_nents)
		return NULL;
	for (i = 0; sg && i < idx; i++)
		sg = sg_next(sg);
	return sg;
}

int pcsim_glue_sg_read(struct sg_table *sgt, u32 count, struct pcsim_sg_ent *ents)
{
	struct scatterlist *sg = sgt->sgl;
	u32 i;

	if (count > sgt->orig_nents)
		return -EINVAL;
	for (i = 0; i < count; i++, sg = sg_next(sg)) {
		if (!sg)
			return -EINVAL;
		ents[i].dma_address = sg_dma_address(sg);
		ents[i].dma_length = sg_dma_len(sg);
		ents[i].length = sg->length;
		ents[i].offset = sg->offset;
	}
	return 0;
}

int pcsim_glue_sg_set(struct sg_table *sgt, u32 idx, const struct pcsim_sg_ent *ent)
{
	struct scatterlist *sg = pcsim_sg_at(sgt, idx);

	if (!sg)
		return -EINVAL;
	sg_dma_address(sg) = ent->dma_address;
	sg_dma_len(sg) = ent->dma_length;
	sg->length = ent->length;
	sg->offset = ent->offset;
	return 0;
}

/* --- /sys/kernel/mm/memory_peers ------------------------------------------ */
static struct kobject *memory_peers_kobj;

struct pcsim_peer_dir {
	struct kobject kobj;
	const void *client;
};

struct pcsim_peer_attr {
	struct kobj_attribute attr;
	u32 id;
};

static ssize_t pcsim_attr_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	struct pcsim_peer_dir *dir = container_of(kobj, struct pcsim_peer_dir, kobj);
	u32 id = container_of(attr, struct pcsim_peer_attr, attr)->id;
	char version[IB_PEER_MEMORY_VER_MAX + 1];

	if (id == PCSIM_ATTR_VERSION) {
		pcsim_rs_client_version(dir->client, version);
		return sysfs_emit(buf, "%s\n", version);
	}
	return sysfs_emit(buf, "%llu\n", pcsim_rs_client_stat(dir->client, id));
}

#define PCSIM_ATTR(_name, _id) \
	static struct pcsim_peer_attr pcsim_attr_##_name = { \
		.attr = __ATTR(_name, 0444, pcsim_attr_show, NULL), .id = (_id) }
PCSIM_ATTR(version, PCSIM_ATTR_VERSION);
PCSIM_ATTR(num_alloc_mrs, PCSIM_ATTR_NUM_ALLOC_MRS);
PCSIM_ATTR(num_dealloc_mrs, PCSIM_ATTR_NUM_DEALLOC_MRS);
PCSIM_ATTR(num_reg_pages, PCSIM_ATTR_NUM_REG_PAGES);
PCSIM_ATTR(num_dereg_pages, PCSIM_ATTR_NUM_DEREG_PAGES);
PCSIM_ATTR(num_reg_bytes, PCSIM_ATTR_NUM_REG_BYTES);
PCSIM_ATTR(num_dereg_bytes, PCSIM_ATTR_NUM_DEREG_BYTES);
PCSIM_ATTR(num_free_callbacks, PCSIM_ATTR_NUM_FREE_CALLBACKS);

static struct attribute *pcsim_peer_attrs[] = {
	&pcsim_attr_version.attr.attr,
	&pcsim_attr_num_alloc_mrs.attr.attr,
	&pcsim_attr_num_dealloc_mrs.attr.attr,
	&pcsim_attr_num_reg_pages.attr.attr,
	&pcsim_attr_num_dereg_pages.attr.attr,
	&pcsim_attr_num_reg_bytes.attr.attr,
	&pcsim_attr_num_dereg_bytes.attr.attr,
	&pcsim_attr_num_free_callbacks.attr.attr,
	NULL,
};
ATTRIBUTE_GROUPS(pcsim_peer);

static void pcsim_peer_dir_release(struct kobject *kobj)
{
	kfree(container_of(kobj, struct pcsim_peer_dir, kobj));
}

static const struct kobj_type pcsim_peer_ktype = {
	.release = pcsim_peer_dir_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = pcsim_peer_groups,
};

void *pcsim_glue_sysfs_add(const char *name, const void *client)
{
	struct pcsim_peer_dir *dir;

	if (!memory_peers_kobj)
		return NULL;
	dir = kzalloc(sizeof(*dir), GFP_KERNEL);
	if (!dir)
		return NULL;
	dir->client = client;
	if (kobject_init_and_add(&dir->kobj, &pcsim_peer_ktype, memory_peers_kobj, "%s", name)) {
		kobject_put(&dir->kobj);
		return NULL;
	}
	return dir;
}

void pcsim_glue_sysfs_del(void *p)
{
	struct pcsim_peer_dir *dir = p;

	/* Removing the files waits for readers still inside show(). */
	kobject_del(&dir->kobj);
	kobject_put(&dir->kobj);
}

/* --- the character device's ioctls (sim_glue.c copies in and back) ------- */
static int sim_ioctl_call(void *ctx, unsigned int cmd, union sim_ioctl_arg *u)
{
	switch (cmd) {
	case PCSIM_IOC_REG: return pcsim_rs_ioctl_reg(ctx, &u->reg);
	case PCSIM_IOC_DEREG: return pcsim_rs_ioctl_dereg(ctx, &u->handle);
	case PCSIM_IOC_DMA_CHECK: return pcsim_rs_ioctl_dma_check(ctx, &u->handle);
	case PCSIM_IOC_STATS: return sim_rs_ioctl_stats(ctx, &u->text);
	case PCSIM_IOC_RESET: return sim_rs_ioctl_reset(ctx);
	case PCSIM_IOC_QUERY: return pcsim_rs_ioctl_query(ctx, &u->query);
	case PCSIM_IOC_DISASSOCIATE: return pcsim_rs_ioctl_disassociate(ctx, &u->handle);
	case PCSIM_IOC_DEREG_TIMED: return pcsim_rs_ioctl_dereg_timed(ctx, &u->dereg);
	case PCSIM_IOC_DMA: return pcsim_rs_ioctl_dma(ctx, &u->dma);
	default: return -ENOTTY;
	}
}

static void sim_ioctl_undo(void *ctx, unsigned int cmd, union sim_ioctl_arg *u)
{
	/* The caller never learns the handle: undo the registration instead
	 * of leaving it to the close of the file. */
	if (cmd == PCSIM_IOC_REG) {
		struct pcsim_handle h = { .handle = u->reg.handle };

		pcsim_rs_ioctl_dereg(ctx, &h);
	}
}

/*
 * /sys/kernel/mm's kobject: mm_kobj is not exported to modules, so it is
 * found through sysfs (a sysfs directory's kernfs node points back to its
 * kobject).  It is never freed.
 */
static struct kobject *pcsim_mm_kobj(void)
{
	struct kernfs_node *kn = kernfs_find_and_get(kernel_kobj->sd, "mm");
	struct kobject *kobj;

	if (!kn)
		return NULL;
	kobj = kobject_get(kn->priv);
	kernfs_put(kn);
	return kobj;
}

/* Before the work queue and the device: the variant's knobs and
 * /sys/kernel/mm/memory_peers. */
static int sim_component_init(void)
{
	struct kobject *mm;
	int ret;

	ret = pcsim_apply_variant();
	if (ret)
		return ret;
	if (memory_peers > 0) {
		mm = pcsim_mm_kobj();
		if (!mm) {
			pr_err("peer_core_sim: /sys/kernel/mm not found\n");
			return -ENOENT;
		}
		memory_peers_kobj = kobject_create_and_add("memory_peers", mm);
		kobject_put(mm);
		if (!memory_peers_kobj) {
			pr_err("peer_core_sim: cannot create /sys/kernel/mm/memory_peers (another peer-memory core loaded?)\n");
			return -EEXIST;
		}
	}
	return 0;
}

static void sim_component_exit(void)
{
	kobject_put(memory_peers_kobj);
	memory_peers_kobj = NULL;
}
