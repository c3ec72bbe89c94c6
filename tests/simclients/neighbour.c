// SPDX-License-Identifier: GPL-2.0
/*
 * neighbour.c -- sim_neighbour.ko: another in-kernel user of the NVIDIA P2P
 * API in the same process as the peer-memory client under test, in the
 * place GDRCopy's gdrdrv or nvidia-fs take on a real host.  Its own
 * bookkeeping is right: it never puts a pin whose free callback it has
 * seen.  What it cannot see is a cudaFree that runs while its put waits
 * for the driver's API lock: the driver frees the pin's page table after
 * the callback, kmalloc hands that address to the next table, and the put
 * then releases whichever pin of the process now has it (the driver finds
 * revocable pins by the table's address alone).  No gate of another client
 * covers this module's calls.
 *
 * /dev/sim_neighbour takes one command per write, for the writing process:
 *   pin:VA:LEN   nvidia_p2p_get_pages of [VA, VA+LEN) (one pin at a time)
 *   put          nvidia_p2p_put_pages of that pin, unless its callback ran
 *                before the put began (-ESTALE then)
 * A write returns the driver's errno, or the whole length.  Its pins and
 * puts are marked for the simulated driver (nvidia_p2p_sim_neighbour_call),
 * which counts the pins its puts release (neighbour_released_pins), and
 * the other callers' dma_maps that meet its pin at a freed table's address
 * (map_newer_neighbour_pin) or late puts that release it
 * (put_released_neighbour_pin), as the neighbour's, not as the client
 * under test's violations or hazards.
 * Used by tests/vm/cases/module-neighbour.sh and the stress campaign.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "nv-p2p-abi.h"
#include "sim_link.h"

static DEFINE_MUTEX(nb_lock);	/* serialises commands; never taken by the callback */
static struct nvidia_p2p_page_table *nb_table;
static u64 nb_va;
static bool nb_freed;		/* set by the free callback (under the driver's lock) */

static void nb_free_callback(void *data)
{
	/* The driver frees the table when this returns: forget nothing here,
	 * the command path sees the flag before its next call. */
	WRITE_ONCE(nb_freed, true);
}

static int nb_pin(u64 va, u64 len)
{
	struct nvidia_p2p_page_table *t = NULL;
	int rc;

	if (nb_table && !READ_ONCE(nb_freed))
		return -EBUSY;
	WRITE_ONCE(nb_freed, false);
	/* Marked too: a dma_map of another caller that meets this pin at a
	 * freed table's address is the neighbour's harm, not that caller's. */
	nvidia_p2p_sim_neighbour_call(true);
	rc = nvidia_p2p_get_pages(0, 0, va, len, &t, nb_free_callback, NULL);
	nvidia_p2p_sim_neighbour_call(false);
	if (rc)
		return rc;
	nb_table = t;
	nb_va = va;
	return 0;
}

static int nb_put(void)
{
	int rc;

	if (!nb_table)
		return -ENOENT;
	if (READ_ONCE(nb_freed)) {
		nb_table = NULL;
		return -ESTALE;
	}
	/* The window: a cudaFree may run the callback and free the table
	 * from here until the driver takes its lock inside this call. */
	nvidia_p2p_sim_neighbour_call(true);
	rc = nvidia_p2p_put_pages(0, 0, nb_va, nb_table);
	nvidia_p2p_sim_neighbour_call(false);
	nb_table = NULL;
	return rc;
}

static ssize_t nb_write(struct file *f, const char __user *ubuf, size_t n, loff_t *pos)
{
	char buf[64];
	u64 va, len;
	int rc;

	if (n == 0 || n >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, n))
		return -EFAULT;
	buf[n] = 0;
	strim(buf);
	mutex_lock(&nb_lock);
	if (sscanf(buf, "pin:%llx:%llx", &va, &len) == 2)
		rc = nb_pin(va, len);
	else if (!strcmp(buf, "put"))
		rc = nb_put();
	else
		rc = -EINVAL;
	mutex_unlock(&nb_lock);
	return rc ? rc : n;
}

static const struct file_operations nb_fops = {
	.owner = THIS_MODULE,
	.write = nb_write,
};

static struct miscdevice nb_dev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "sim_neighbour",
	.fops = &nb_fops,
	.mode = 0600,
};

static int __init nb_init(void)
{
	return misc_register(&nb_dev);
}

static void __exit nb_exit(void)
{
	misc_deregister(&nb_dev);
	/* A pin still held is the simulator's to report at its unload. */
}

module_init(nb_init);
module_exit(nb_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("peermem-rs bench: a same-process neighbour of the NVIDIA P2P API");
