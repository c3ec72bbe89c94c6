/* SPDX-License-Identifier: GPL-2.0 */
/* bindings.h -- what nvidia_p2p_sim's generated bindings (bindings.rs) cover. */
#include <linux/gfp.h>
#include <linux/delay.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/random.h>
#include <linux/slab.h>
#include "nv-p2p-abi.h"
#include "peer-mem-abi.h"
#include "sim_uapi.h"
#include "sim_link.h"
#include "glue.h"
