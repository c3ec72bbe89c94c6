// SPDX-License-Identifier: GPL-2.0
/* simclient_bad.ko: the test client with a `bug` parameter (see simclient.c). */
#define SIMCLIENT_NAME "simclient_bad"
#define SIMCLIENT_BAD
#include "simclient.c"
