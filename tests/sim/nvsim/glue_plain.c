// SPDX-License-Identifier: GPL-2.0
/*
 * glue_plain.c -- the C glue of nvidia_p2p_sim_plain.ko: glue.c with the
 * nvidia_p2p_* API exported by plain EXPORT_SYMBOL, as older NVIDIA driver
 * trees exported it.  symbol_get() refuses such exports since Linux 6.6,
 * so a client that looks the API up that way finds "nothing" although the
 * driver is loaded.
 */
#define NVSIM_PLAIN_EXPORT 1
#include "glue.c"
