// SPDX-License-Identifier: GPL-2.0
/*
 * sim_glue.c -- the C glue both simulators share: the character device
 * (open, release, the ioctl's copy-in, dispatch and copy-back), the work
 * queue, the warn-once reports and the static-inline task/time helpers.
 *
 * Not compiled on its own: each simulator's glue.c includes it, so each
 * module (nvidia_p2p_sim_plain.ko too, through glue_plain.c) gets its own
 * copy with its own device, work queue and warn-once bits.  The includer
 * defines first:
 *
 *   SIM_NAME             the name of the misc device (/dev/SIM_NAME) and of
 *                        the work queue, and the WARN's prefix
 *   union sim_ioctl_arg  every ioctl argument structure of the simulator
 *
 * and defines, anywhere in the file, the static functions declared below:
 * the dispatch of one ioctl to the crate, the undo of an ioctl whose result
 * cannot be copied back, and the component's own init/exit (run before the
 * work queue and the device are set up, and after they are gone).
 */
#include <linux/bitops.h>
#include <linux/bug.h>
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/timekeeping.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>

#include "sim_glue.h"

#ifndef SIM_NAME
#error "sim_glue.c: the including glue.c defines SIM_NAME"
#endif

/* Calls the crate for ioctl cmd with the kernel copy of its argument;
 * -ENOTTY for a command the simulator does not know. */
static int sim_ioctl_call(void *ctx, unsigned int cmd, union sim_ioctl_arg *u);
/* cmd succeeded but its result cannot be copied back: the caller never
 * learns it, so undo what it made instead of leaving it to the close. */
static void sim_ioctl_undo(void *ctx, unsigned int cmd, union sim_ioctl_arg *u);
static int sim_component_init(void);
static void sim_component_exit(void);

/* --- tasks, time ------------------------------------------------------------ */
unsigned long sim_glue_current(void) { return (unsigned long)current; }
u32 sim_glue_current_tgid(void) { return task_tgid_nr(current); }
u64 sim_glue_jiffies(void) { return get_jiffies_64(); }
u64 sim_glue_msecs_since(u64 since) { return jiffies_to_msecs(get_jiffies_64() - since); }
u64 sim_glue_ktime_ns(void) { return ktime_get_ns(); }

/* --- reports, user copies ----------------------------------------------------- */
static unsigned long sim_warned[2];
void sim_glue_warn(u32 kind, const char *name)
{
	if (kind < 2 * BITS_PER_LONG && test_and_set_bit(kind, sim_warned))
		return;
	WARN(1, SIM_NAME ": contract violation: %s\n", name);
}
void sim_glue_rearm_warnings(void) { memset(sim_warned, 0, sizeof(sim_warned)); }

int sim_glue_copy_to_user(u64 user_addr, const void *src, size_t len)
{
	return copy_to_user(u64_to_user_ptr(user_addr), src, len) ? -EFAULT : 0;
}

int sim_glue_copy_from_user(void *dst, u64 user_addr, size_t len)
{
	return copy_from_user(dst, u64_to_user_ptr(user_addr), len) ? -EFAULT : 0;
}

/* --- the character device ---------------------------------------------- */
static int sim_open(struct inode *inode, struct file *file)
{
	return sim_rs_open(&file->private_data);
}

static int sim_release(struct inode *inode, struct file *file)
{
	sim_rs_release(file->private_data);
	return 0;
}

static long sim_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;
	void *ctx = file->private_data;
	union sim_ioctl_arg u;
	int ret;

	if (_IOC_SIZE(cmd) > sizeof(u))
		return -ENOTTY;
	memset(&u, 0, sizeof(u));
	if ((_IOC_DIR(cmd) & _IOC_WRITE) && copy_from_user(&u, uarg, _IOC_SIZE(cmd)))
		return -EFAULT;
	ret = sim_ioctl_call(ctx, cmd, &u);
	if (!ret && (_IOC_DIR(cmd) & _IOC_READ) && copy_to_user(uarg, &u, _IOC_SIZE(cmd))) {
		sim_ioctl_undo(ctx, cmd, &u);
		return -EFAULT;
	}
	return ret;
}

static const struct file_operations sim_fops = {
	.owner = THIS_MODULE,
	.open = sim_open,
	.release = sim_release,
	.unlocked_ioctl = sim_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice sim_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = SIM_NAME,
	.fops = &sim_fops,
	.mode = 0666,
};

/* --- the work queue ---------------------------------------------------------- */
static struct workqueue_struct *sim_wq;

struct sim_job {
	struct work_struct work;
	void (*fn)(void *arg);
	void *arg;
};

static void sim_job_run(struct work_struct *work)
{
	struct sim_job *job = container_of(work, struct sim_job, work);

	job->fn(job->arg);
	kfree(job);
}

int sim_glue_run_async(void (*fn)(void *arg), void *arg)
{
	struct sim_job *job = kzalloc(sizeof(*job), GFP_KERNEL);

	if (!job)
		return -ENOMEM;
	INIT_WORK(&job->work, sim_job_run);
	job->fn = fn;
	job->arg = arg;
	queue_work(sim_wq, &job->work);
	return 0;
}

/* --- module init/exit ----------------------------------------------------- */
int sim_glue_init(void)
{
	int ret;

	ret = sim_component_init();
	if (ret)
		return ret;
	sim_wq = alloc_workqueue(SIM_NAME, WQ_UNBOUND, 0);
	if (!sim_wq) {
		ret = -ENOMEM;
		goto component_exit;
	}
	ret = misc_register(&sim_misc);
	if (ret)
		goto destroy_wq;
	return 0;
destroy_wq:
	destroy_workqueue(sim_wq);
component_exit:
	sim_component_exit();
	return ret;
}

/* Removes the device, then waits for the jobs still queued. */
void sim_glue_exit(void)
{
	misc_deregister(&sim_misc);
	destroy_workqueue(sim_wq);
	sim_component_exit();
}
