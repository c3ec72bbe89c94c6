# SPDX-License-Identifier: GPL-2.0
# peermem-rs -- top-level Makefile.
#
#   make                 build peermem_rs.ko for the running kernel (KDIR=...);
#                        PEERMEM_NAME=nvidia_peermem builds it under the name
#                        NCCL, UCX and NVSHMEM detect (see Kbuild)
#   make demo            the bench's main job: boot a VM, load the module, show it working
#   make test            the whole suite: host tests + every kernel of the matrix in QEMU
#                        (ends with a per-phase table and the critical path)
#   make quick           the contributors' loop: every module-* case in one boot of one
#                        Debian kernel (KVER=, default the newest); no host tests, no
#                        packaging, no controls
#   make cross           the module cross-built for Debian's arm64 kernel (GH200/GB200
#                        hosts), with the build's checks (tests/bench/cross-arm64.sh)
#   make bench           registration cost of peer-memory clients on the simulators'
#                        latency model (BENCH_CLIENTS="KO|LABEL|PARAMS;..."): a table,
#                        bench.json and bench.svg (tests/vm/cases/bench.sh)
#   make stress SEED= OPS=  the seeded stress and fault campaign (tests/vm/cases/stress-campaign.sh; MPS=0 leaves out the MPS-like lives, NEIGHBOUR=0 the same-process neighbour)
#                        on one kernel (KVER=, default the newest Debian one), OPS operations
#                        in all, shared by one run per peermem_rs mode (MODES=invalidate,persistent)
#                        and core variant (VARIANTS=current,mlnx-old,no-unmaps); FAILSLAB=1 on a kernel with
#                        failslab (the debug one); a failure prints the seed and the
#                        command that repeats it
#   make vm-shell KVER=  an interactive VM of the bench (KVER from tests/bench/versions.env)
#   make route-test      README's Debian trixie route pasted into a fresh trixie chroot, up to
#                        the module built by DKMS, then purged (tests/bench/route-debian.sh;
#                        long, not part of make test)
#   make check           host-side tests only, as any user, with the host's cargo
#                        (>= 1.85): cargo test, rustfmt, tests/hw/selftest.sh; no chroot
#   make clean
#   make install         DKMS route without packages: sources to /usr/src, dkms add +
#                        install (KVER=, default: every kernel DKMS builds for), the
#                        modprobe.d/depmod.d files, peermem-rust-metadata, peermem-probe
#   make uninstall       the reverse (dkms remove --all, files)
#   make deb             peermem-rs-dkms_<ver>_all.deb + peermem-probe_<ver>_<arch>.deb (in build/deb/)
#   make deb-modules KVER= SIGN_KEY= SIGN_CERT=  a binary peermem-rs-modules-<kernel> .deb, signed,
#                        for nodes without a Rust toolchain (README "For a fleet")
#   make rust-metadata   KDIR=/usr/src/linux-headers-<kver>: Debian's missing Rust metadata
#   make hwtest          tests/hw/validate.sh on a real GPU + ConnectX host (ARGS=--dry-run)

KDIR ?= /lib/modules/$(shell uname -r)/build
# A clang-built kernel (our debug kernel) needs its modules built with LLVM=1.
KBUILD_LLVM := $(if $(shell grep -s '^CONFIG_CC_IS_CLANG=y' $(KDIR)/.config),LLVM=1)

.PHONY: all modules modules_install clean demo test quick cross bench stress perftest-big vm-shell check route-test

all: modules

# The providers' Module.symvers (README "Binding"): PEERMEM_SYMVERS="FILE..."
# names them, PEERMEM_SYMVERS=none builds the weak, unversioned fallback;
# unset, scripts/provider-symvers.sh finds them for the kernel PEERMEM_KVER
# (DKMS passes its $$kernelver; by default the release of KDIR): the CRCs of
# the provider modules modprobe loads for it, generated into
# build/provider-symvers/<kver>/ where a provider ships no Module.symvers.
PEERMEM_KVER ?= $(shell cat $(KDIR)/include/config/kernel.release 2>/dev/null)
PEERMEM_SYMVERS_ARG = $(if $(filter undefined,$(origin PEERMEM_SYMVERS)),$$(PEERMEM_KDIR=$(KDIR) PEERMEM_SYMVERS_OUT=$(CURDIR)/build/provider-symvers/$(PEERMEM_KVER) $(CURDIR)/scripts/provider-symvers.sh find "$(PEERMEM_KVER)"),$(if $(filter none,$(PEERMEM_SYMVERS)),none,$(abspath $(PEERMEM_SYMVERS))))

# scripts/check-kernel.sh stops with one line (what is missing, what to
# install) before the compiler runs, and names the matching rustc/bindgen.
modules:
	@vars=$$($(CURDIR)/scripts/check-kernel.sh --make-vars "$(KDIR)") && \
	symvers="$(PEERMEM_SYMVERS_ARG)" && \
	$(MAKE) -C $(KDIR) M=$(CURDIR) $(KBUILD_LLVM) $$vars PEERMEM_SYMVERS="$${symvers:-none}" modules

modules_install:
	$(MAKE) -C $(KDIR) M=$(CURDIR) $(KBUILD_LLVM) modules_install

clean:
	$(MAKE) -C $(KDIR) M=$(CURDIR) clean 2>/dev/null || true
	rm -rf build

demo:
	bash tests/bench/run.sh --demo

test:
	bash tests/bench/run.sh

quick:
	bash tests/bench/run.sh --quick

cross:
	bash tests/bench/run.sh --cross

bench:
	bash tests/bench/run.sh --bench

stress:
	SEED="$(SEED)" OPS="$(OPS)" VARIANTS="$(VARIANTS)" MODES="$(MODES)" FAILSLAB="$(FAILSLAB)" KVER="$(KVER)" \
	  VM_APPEND="$(VM_APPEND) stress_mps=$(if $(MPS),$(MPS),1) stress_neighbour=$(if $(NEIGHBOUR),$(NEIGHBOUR),1)" bash tests/bench/run.sh --stress

# perftest --use_cuda with 1 GiB messages (tests/vm/cases/perftest-big.sh),
# behind its own target: too long for make test under TCG.  On the newest
# Debian kernel unless KVER names one; a 6 GiB VM.
perftest-big:
	KERNELS="$(if $(KVER),$(KVER),$$(. tests/bench/versions.env && echo "$${DEBIAN_KERNELS##* }"))" \
	  CASES=perftest-big VM_MEM=6G VM_TIMEOUT=7200 VM_APPEND="$(VM_APPEND) CASE_TIMEOUT=6000" bash tests/bench/run.sh

vm-shell:
	bash tests/bench/run.sh --shell $(KVER)

route-test:
	bash tests/bench/route-debian.sh

check:
	bash tests/bench/host-check.sh

include scripts/install.mk
