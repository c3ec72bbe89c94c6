/* SPDX-License-Identifier: GPL-2.0 */
/*
 * sim_glue.h -- what both simulators' C glue does alike (sim_glue.c): the
 * helpers their Rust crates call (sim_glue_*) and the crate entry points
 * the shared file operations call (sim_rs_*).  Included by each
 * simulator's glue.h, so read by the C compiler and by bindgen.
 *
 * Each module has its own copy of these functions (glue.c includes
 * sim_glue.c): nothing here is exported, so the same names in two loaded
 * modules do not clash (the module loader links a module's references to
 * its own definitions, and to other modules' only through EXPORT_SYMBOL).
 */
#ifndef PEERMEM_SIM_GLUE_H
#define PEERMEM_SIM_GLUE_H

#include <linux/types.h>
#include "sim_uapi.h"

/* --- tasks, time ------------------------------------------------------------ */
unsigned long sim_glue_current(void);	/* the current task, as an id */
u32 sim_glue_current_tgid(void);
u64 sim_glue_jiffies(void);
u64 sim_glue_msecs_since(u64 since);
u64 sim_glue_ktime_ns(void);		/* CLOCK_MONOTONIC, ns */

/* --- reports, user copies ----------------------------------------------------- */
/* One contract violation: WARN once per kind (re-armed by reset). */
void sim_glue_warn(u32 kind, const char *name);
void sim_glue_rearm_warnings(void);
int sim_glue_copy_to_user(u64 user_addr, const void *src, size_t len);
int sim_glue_copy_from_user(void *dst, u64 user_addr, size_t len);

/* --- the simulator's work queue (free hooks, step hooks, disassociate) ----- */
int sim_glue_run_async(void (*fn)(void *arg), void *arg);

/* --- module init/exit: the component's own set-up (glue.c), the work queue
 * and the character device ------------------------------------------------- */
int sim_glue_init(void);
void sim_glue_exit(void);

/* --- entry points implemented in Rust (common/entry.rs) ------------------ */
int sim_rs_open(void **context);
void sim_rs_release(void *context);
/* The ioctls every simulator has (glue.c's dispatch calls them). */
int sim_rs_ioctl_stats(void *context, struct sim_text *arg);
int sim_rs_ioctl_reset(void *context);

#endif /* PEERMEM_SIM_GLUE_H */
