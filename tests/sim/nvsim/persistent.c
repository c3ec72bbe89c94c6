// SPDX-License-Identifier: GPL-2.0
/*
 * persistent.c -- nvidia_p2p_sim_persistent.ko: the two persistent entry
 * points of the NVIDIA P2P API under their real names, forwarding to
 * nvidia_p2p_sim.ko.  Loaded: the API of a driver >= 535.  Not loaded:
 * __symbol_get("nvidia_p2p_get_pages_persistent") returns NULL, as with an
 * older driver.  EXPORT_SYMBOL is static, so presence is chosen by loading
 * this module rather than by a parameter.
 */
#include <linux/module.h>

#include "nv-p2p-abi.h"
#include "sim_link.h"

int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table, u32 flags)
{
	return nvidia_p2p_sim_get_pages_persistent(virtual_address, length, page_table, flags);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages_persistent);

int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table, u32 flags)
{
	return nvidia_p2p_sim_put_pages_persistent(virtual_address, page_table, flags);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages_persistent);

MODULE_DESCRIPTION("Persistent-pin API of the simulated NVIDIA P2P provider (test only)");
MODULE_AUTHOR("peermem-rs developers");
MODULE_LICENSE("GPL");
