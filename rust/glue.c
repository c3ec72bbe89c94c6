// SPDX-License-Identifier: GPL-2.0
/*
 * glue.c -- the C side of peermem_rs.ko: module tags that the Rust module!
 * macro does not cover on every kernel of the matrix, and small helpers the
 * Rust crate calls.  No logic lives here.
 */
#include <linux/module.h>

MODULE_VERSION(PEERMEM_VERSION);
MODULE_AUTHOR("peermem-rs developers");

const char *peermem_version(void);
const char *peermem_version(void)
{
	return PEERMEM_VERSION;
}
