#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# tests/cuda-standin/build.sh OUTDIR -- builds the libcuda stand-in
# (cuda-standin.c) as OUTDIR/libcuda.so.1 (+ libcuda.so): the functions
# peermem-probe calls, and for every other name in symbols.txt a stub that
# returns CUDA_ERROR_NOT_SUPPORTED (cudarc resolves them all when it loads
# the library).  Run a program with LD_LIBRARY_PATH=OUTDIR to give it this
# "GPU".  Needs a C compiler, the kernel's UAPI headers (linux/udmabuf.h) and
# the simulators' (tests/sim/include/sim_uapi.h: PEERMEM_CUDA_STANDIN_MEMORY=nvsim).
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: build.sh OUTDIR}
mkdir -p "$OUT"
# The stubs are weak: the real functions of cuda-standin.c override them.
grep -vE '^(#|$)' "$D/symbols.txt" |
  sed 's/.*/__attribute__((weak)) int &(void) { return 801; \/* CUDA_ERROR_NOT_SUPPORTED *\/ }/' > "$OUT/stubs.c"
${CC:-cc} -shared -fPIC -O2 -Wall -Wextra -Werror -Wl,-soname,libcuda.so.1 \
  -I"$D/../sim/include" -pthread -o "$OUT/libcuda.so.1" "$D/cuda-standin.c" "$D/nvsim-memory.c" "$OUT/stubs.c"
ln -sf libcuda.so.1 "$OUT/libcuda.so"
