/* SPDX-License-Identifier: GPL-2.0 */
/* bindings.h -- what peer_core_sim's generated bindings (bindings.rs) cover. */
#include <linux/delay.h>
#include <linux/module.h>
#include <linux/slab.h>
#include "nv-p2p-abi.h"
#include "peer-mem-abi.h"
#include "sim_uapi.h"
#include "sim_link.h"
#include "glue.h"
