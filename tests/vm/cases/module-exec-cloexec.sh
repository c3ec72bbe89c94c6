#!/bin/bash
# module-exec-cloexec (issue 32, item 7): a process registers GPU memory it
# was given (REGISTER_PID, as an MPS server does), then execve()s with its
# nvidia descriptors close-on-exec (libcuda's may be: not documented) and
# its verbs descriptor inherited.  The exec closes the nvidia files: the RM
# client goes, and with it the process from the P2P object's client list,
# while its pin stays armed.  The new image, the same live process,
# deregisters: the put finds no pin and answers 0, and the owner's later
# cudaFree calls the pin's free callback.  It must find nothing to touch
# (rust/nvidia/registry.rs).  Before the registry that put was trusted, the
# callback's tombstone freed, and the callback ran on freed memory (KASAN
# on the debug kernel).  simctl's `exec` is an execve of simctl in the same
# process, the core file kept open across it and the gpu file closed by it
# (tests/simctl/src/proc.rs).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

rm_client_first 0x530000000000 "exec core dereg \$H + echo DONE + until 1200000 read $SHARED_END" \
  "the exec (close-on-exec nvidia file)"
check "the new image deregistered the MR" grep -q '^DONE' /tmp/shared.client.out
finish
