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

# GCC-only flags that libclang rejects (the kernel's rust/Makefile filters the
# same kind of list for its own bindings).
bindgen_c_flags_skip := -mno-fp-ret-in-387 -mpreferred-stack-boundary=% \
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

# libclang's target: the kernel's architecture (as the kernel's rust/Makefile
# picks it), so the bindings are right on arm64 (GH200/GB200) as on x86.
peermem_bindgen_target_x86 := x86_64-linux-gnu
peermem_bindgen_target_arm64 := aarch64-linux-gnu
peermem_bindgen_target_riscv := riscv64-linux-gnu
peermem_bindgen_target_loongarch := loongarch64-linux-gnusf
peermem_bindgen_target_um := $(peermem_bindgen_target_$(SUBARCH))
peermem_bindgen_target := $(or $(peermem_bindgen_target_$(SRCARCH)),$(error rust/bindgen.mk: no bindgen target for SRCARCH=$(SRCARCH)))

quiet_cmd_bindgen = BINDGEN $@
      cmd_bindgen = $(BINDGEN) $< --use-core --with-derive-default \
	--ctypes-prefix ffi --no-layout-tests --no-debug '.*' \
	--no-doc-comments --rust-target 1.68 $(bindgen-args-$(@F)) -o $@ -- \
	$(filter-out $(bindgen_c_flags_skip),$(c_flags)) -w \
	--target=$(peermem_bindgen_target) -fno-builtin -D__BINDGEN__ -DMODULE
