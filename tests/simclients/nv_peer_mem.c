// SPDX-License-Identifier: GPL-2.0
/*
 * nv_peer_mem.ko: a stand-in for a competing peer-memory client -- the
 * self-test client built under the module name of the old nv_peer_mem
 * (which, like nvidia-peermem, registers the client name nv_mem), so that
 * peermem_rs's detection of a competitor by module name can be tested.
 */
#define SIMCLIENT_NAME "nv_mem"
#include "simclient.c"
