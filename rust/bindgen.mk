# SPDX-License-Identifier: GPL-2.0
# rust/bindgen.mk -- Kbuild fragment shared by peermem_rs and the test
# modules: Rust bindings generated at build time by the kernel's bindgen from
# a header of ours (which includes our ABI headers and the kernel headers we
# need), with the kernel's own C flags, so the layouts are those of the
# kernel being built against.
#
#   include $(src)/<rel>/rust/bindgen.mk
#   bindgen-args-foo_generated.rs := --allowlist-function '...' ...
#   $(obj)/foo_generated.rs: $(src)/foo.h FORCE
#   	$(call if_changed,bindgen)
#   targets += foo_generated.rs
#   $(obj)/crate_root.o: $(obj)/foo_generated.rs

peermem_abi_include := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/../include)
ccflags-y += -I$(peermem_abi_include)

# The kernel's C flags go to libclang, minus the GCC-only ones it rejects.
# Which flags those are is the kernel's knowledge: its rust/Makefile keeps
# the list (bindgen_skip_c_flags) for its own bindings, and a kernel that
# adds such a flag adds it there.  So the list is read from the rust/Makefile
# of the kernel we build against ($(srctree)), with awk: the assignments of
# that variable (`:=`, `=`, `+=`) and their continuation lines.  That file is
# not included: it is written for the kernel's own rust/ directory (rules,
# variables of its own) and is not meant to be read from elsewhere.
#
# Headers packages do not ship it, though: Debian's linux-headers-<kver>-common
# and -<arch> have no rust/Makefile (checked: 6.12, 7.2, 7.3), nor have
# the headers the kernel's own deb-pkg/rpm-pkg targets package
# (scripts/package/install-extmod-build).  It is found when building against
# a full kernel tree (a source tree, or an O= build tree of one).  Without it
# our own copy of the list below is used (the list of 7.2; 7.3 adds only
# powerpc flags).  With it, the kernel's list is used, and if the two treat a
# flag of this build differently, a one-line note
# ("peermem-rs: rust/bindgen.mk: ...") says which when the bindings are
# generated: our copy needs that change for headers-only builds of such a
# kernel.  Flags the build does not pass do not matter, so they are not
# compared (7.3's powerpc flags on x86).
peermem_bindgen_skip_own := -mno-fp-ret-in-387 -mpreferred-stack-boundary=% \
	-mskip-rax-setup -mgeneral-regs-only -msign-return-address=% \
	-mindirect-branch=thunk-extern -mindirect-branch-register \
	-mfunction-return=thunk-extern -mrecord-mcount -mabi=lp64 \
	-mindirect-branch-cs-prefix -mstack-protector-guard% -mtraceback=no \
	-mno-pointers-to-nested-functions -mno-string \
	-mno-strict-align -mstrict-align -mdirect-extern-access \
	-mexplicit-relocs -mno-check-zero-division \
	-fconserve-stack -falign-jumps=% -falign-loops=% \
	-femit-struct-debug-baseonly -fno-ipa-cp-clone -fno-ipa-sra \
	-fno-partial-inlining -fplugin-arg-arm_ssp_per_task_plugin-% \
	-fno-reorder-blocks -fno-allow-store-data-races -fasan-shadow-offset=% \
	-fzero-call-used-regs=% -fno-stack-clash-protection \
	-fno-inline-functions-called-once -fsanitize=bounds-strict \
	-fstrict-flex-arrays=% -fmin-function-alignment=% \
	-fzero-init-padding-bits=% -mno-fdpic \
	-fdiagnostics-show-context -fdiagnostics-show-context=% \
	--param=% --param asan-% -fno-isolate-erroneous-paths-dereference

peermem_kernel_rust_mk := $(wildcard $(srctree)/rust/Makefile)
peermem_bindgen_skip_kernel := $(if $(peermem_kernel_rust_mk),$(shell awk '\
	/^bindgen_skip_c_flags[ \t]*[:+]?=/ { on = 1; sub(/^[^=]*=/, "") } \
	on { on = sub(/\\$$/, ""); print }' $(peermem_kernel_rust_mk)))
peermem_bindgen_skip := $(or $(peermem_bindgen_skip_kernel),$(peermem_bindgen_skip_own))

# What matters is this build's flags (c_flags, known at recipe time): those
# that one list skips and the other passes on to libclang.
peermem_skipped_by = $(filter $(1),$(c_flags))
peermem_only_kernel_skips = $(filter-out $(call peermem_skipped_by,$(peermem_bindgen_skip_own)),\
	$(call peermem_skipped_by,$(peermem_bindgen_skip)))
peermem_only_we_skip = $(filter-out $(call peermem_skipped_by,$(peermem_bindgen_skip)),\
	$(call peermem_skipped_by,$(peermem_bindgen_skip_own)))
peermem_bindgen_drift = $(strip $(peermem_only_kernel_skips) $(peermem_only_we_skip))
ifneq ($(peermem_kernel_rust_mk),)
ifeq ($(peermem_bindgen_skip_kernel),)
peermem_bindgen_note = peermem-rs: rust/bindgen.mk: no bindgen_skip_c_flags \
	in $(peermem_kernel_rust_mk) (using our list)
else
peermem_bindgen_note = $(if $(peermem_bindgen_drift),$(strip peermem-rs: rust/bindgen.mk: \
	using bindgen_skip_c_flags of $(peermem_kernel_rust_mk) but our own list differs: \
	$(if $(peermem_only_kernel_skips),only the kernel skips $(peermem_only_kernel_skips);) \
	$(if $(peermem_only_we_skip),only we skip $(peermem_only_we_skip);) update ours))
endif
endif

# libclang's target: the kernel's architecture (as the kernel's rust/Makefile
# picks it), so the bindings are right on arm64 (GH200/GB200) as on x86.
peermem_bindgen_target_x86 := x86_64-linux-gnu
peermem_bindgen_target_arm64 := aarch64-linux-gnu
peermem_bindgen_target_riscv := riscv64-linux-gnu
peermem_bindgen_target_loongarch := loongarch64-linux-gnusf
peermem_bindgen_target_um := $(peermem_bindgen_target_$(SUBARCH))
peermem_bindgen_target := $(or $(peermem_bindgen_target_$(SRCARCH)),$(error rust/bindgen.mk: no bindgen target for SRCARCH=$(SRCARCH)))

quiet_cmd_bindgen = BINDGEN $@
      cmd_bindgen = $(if $(peermem_bindgen_note),echo '$(peermem_bindgen_note)' >&2;) \
	$(BINDGEN) $< --use-core --with-derive-default \
	--ctypes-prefix ffi --no-layout-tests --no-debug '.*' \
	--no-doc-comments --rust-target 1.68 $(bindgen-args-$(@F)) -o $@ -- \
	$(filter-out $(peermem_bindgen_skip),$(c_flags)) -w \
	--target=$(peermem_bindgen_target) -fno-builtin -D__BINDGEN__ -DMODULE
