/* SPDX-License-Identifier: GPL-2.0 */
/* bindings.h -- what peermem_rs's generated bindings (rust/bindings.rs) cover:
 * the two external ABIs (include/) and our C glue (rust/glue.h). */
#include "nv-p2p-abi.h"
#include "peer-mem-abi.h"
#include "glue.h"
