// SPDX-License-Identifier: GPL-2.0
/*
 * sim_widen.ko -- a bench tool for module-contenders, not a client: it
 * holds a module between its entry in the module loader's list and its
 * init, by a busy wait of `delay_ms` at the entry of the loader's
 * do_init_module (a kprobe), for the modules named peermem_rs and
 * nvidia_peermem.  Two of them loading at the same moment are then both in
 * flight: a second of one name waits for the first and is refused
 * (EEXIST), and two of different names run their inits side by side into
 * the core's register; under TCG the natural window is too short to be hit
 * in a few rounds.  The module under test is unchanged.
 */
#include <linux/delay.h>
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/string.h>

static unsigned int delay_ms = 100;
module_param(delay_ms, uint, 0644);
MODULE_PARM_DESC(delay_ms, "busy wait at do_init_module of peermem_rs / nvidia_peermem (ms)");

static int widen_pre(struct kprobe *p, struct pt_regs *regs)
{
	const struct module *mod = (const struct module *)regs_get_kernel_argument(regs, 0);

	if (!strcmp(mod->name, "peermem_rs") || !strcmp(mod->name, "nvidia_peermem"))
		mdelay(delay_ms);
	return 0;
}

static struct kprobe widen_kp = {
	.symbol_name = "do_init_module",
	.pre_handler = widen_pre,
};

static int __init widen_init(void)
{
	return register_kprobe(&widen_kp);
}

static void __exit widen_exit(void)
{
	unregister_kprobe(&widen_kp);
}

module_init(widen_init);
module_exit(widen_exit);
MODULE_DESCRIPTION("module-contenders: holds a module before its init (bench tool)");
MODULE_LICENSE("GPL");
