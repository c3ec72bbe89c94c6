#!/bin/bash
# module-rm-client-first (issue 32, item 7): a live process destroys its RM
# client, then deregisters.  An MPS client does, as does any process that
# closes its nvidia descriptors before its verbs one: it leaves the client
# list of the P2P object it was added to (third_party_p2p.c
# CliUnregisterFromThirdPartyP2P) while the pins it made on the owner's
# memory stay armed; its put then finds no pin and answers 0 (nv-p2p.c
# nv_p2p_put_pages), and the owner's later cudaFree calls the pin's free
# callback, the MR long gone.  That callback must touch nothing of the
# registration: its id is no longer in the registry, and it does nothing
# (rust/nvidia/registry.rs).  Before the registry the put of a live process
# was trusted, the callback's tombstone freed with the registration, and the
# owner's free called the callback on it: KASAN's slab-use-after-free in
# free_callback on the debug kernel.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

rm_client_first 0x520000000000 "close gpu; core dereg \$H; echo DONE; until 1200000 read $SHARED_END" \
  "the client's close of its nvidia file"
finish
