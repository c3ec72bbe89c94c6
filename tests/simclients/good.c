// SPDX-License-Identifier: GPL-2.0
/* simclient_good.ko: the well-behaved test client (see simclient.c). */
#define SIMCLIENT_NAME "simclient_good"
#include "simclient.c"
