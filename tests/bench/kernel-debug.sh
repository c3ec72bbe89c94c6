#!/bin/bash
# tests/bench/kernel-debug.sh -- our debug kernel: Debian's patched source
# ($DEBUG_KERNEL_SRC, so Debian's module-loader patches are in it) +
# allnoconfig with debug-kernel.config (a kernel for the bench's VM, not
# for a distribution), built in the
# chroot with the pinned rustc and clang/lld 19 (LLVM=1: RUST with KASAN
# requires a clang-built kernel; with gcc olddefconfig drops RUST silently,
# so every option is verified).  Symbol versions are on (MODVERSIONS, with
# gendwarfksyms and therefore full DWARF).  9p and virtio are built in: the
# VM boots it without an initramfs.  The build directory (minus objects) and
# its installed modules are cached as a tarball keyed by source, config and
# toolchain: a warm run unpacks the source and that tarball (~30 s) instead
# of building.
. "$(dirname "$0")/lib.sh"
KREL=$DEBUG_KERNEL
bench_lock "kernel-$KREL-$CHROOT_KEY"
# Bump when this script changes what it builds.
KERNEL_REV=2
key=$(debug_kernel_key "$BENCH/debug-kernel.config" "$KERNEL_REV")
# Each configuration builds in a directory of its own; /build/kernel-$KREL
# (what the other scripts use) is switched to it once it is complete.
# The source has a directory of its own: kernel-debian.sh unpacks and removes
# the same linux-source package in /build for the Debian kernels' metadata.
SRCDIR=/build/debug-src; S=$SRCDIR/$DEBUG_KERNEL_SRC; O=/build/kernel-$KREL-$key; CURRENT=/build/kernel-$KREL
if stamp_ok "kernel-$KREL-$key" && [ "$(readlink "$ROOT$CURRENT")" = "${O##*/}" ]; then
  fresh_note "kernel $KREL" "kernel-$KREL-$key" cached; exit 0
fi
T0=$SECONDS
tarball=$CACHE/kernel-$KREL-$key.tar.zst
# niced, except in make test's background lane (BENCH_LANE=1), where this
# build starts the longest path: there it must not yield to the foreground's
# work (the Debian kernels' metadata builds stay niced).
NICE=nice; [ "${BENCH_LANE:-}" = 1 ] && NICE=
MK="$NICE make -C $S O=$O -j$(nproc) LLVM=1 LOCALVERSION=$DEBUG_KERNEL_LOCALVERSION"
if [ ! -d "$ROOT$S" ]; then
  log "unpack $DEBUG_KERNEL_SRC"
  mkdir -p "$ROOT$SRCDIR"; in_root $NICE tar -C $SRCDIR -xf /usr/src/$DEBUG_KERNEL_SRC.tar.xz
fi
if [ -f "$tarball" ]; then
  log "restoring the debug kernel from $tarball"
  rm -rf "$ROOT$O" "$ROOT/lib/modules/$KREL"
  tar -C "$ROOT" --zstd -xf "$tarball"
  fresh_note "kernel $KREL" "kernel-$KREL-$key" cached
else
  rm -rf "$ROOT$O"; mkdir -p "$ROOT$O"
  # allnoconfig with the fragment as KCONFIG_ALLCONFIG: what it names is
  # set, everything else is off where Kconfig allows.
  cp "$BENCH/debug-kernel.config" "$ROOT$O/bench.config"
  in_root $MK KCONFIG_ALLCONFIG=$O/bench.config allnoconfig > "$CACHE/kernel-$KREL-config.log" 2>&1
  miss=0
  while read -r line; do
    case "$line" in
      CONFIG_*=*) grep -qxF "$line" "$ROOT$O/.config" || { echo "  wanted $line, got: $(grep -E "^(# )?${line%%=*}[= ]" "$ROOT$O/.config" || echo unset)"; miss=1; } ;;
      "# CONFIG_"*" is not set") o=${line#\# }; o=${o%% *}
        grep -q "^$o=" "$ROOT$O/.config" && { echo "  wanted $o off, got it on"; miss=1; } ;;
    esac
  done < "$BENCH/debug-kernel.config"
  [ $miss = 0 ] || die "allnoconfig did not keep debug-kernel.config (see above)"
  log "building $KREL (bzImage + modules, LLVM=1, full DWARF for gendwarfksyms)"
  in_root $MK bzImage modules > "$CACHE/kernel-$KREL.log" 2>&1 ||
    { tail -40 "$CACHE/kernel-$KREL.log"; die "the debug kernel build failed (log: $CACHE/kernel-$KREL.log)"; }
  rm -rf "$ROOT/lib/modules/$KREL"
  in_root $MK INSTALL_MOD_PATH=/ modules_install > /dev/null
  # modules_install links build/ to the build directory: keep it stable.
  ln -sfn "$CURRENT" "$ROOT/lib/modules/$KREL/build"
  [ "$(cat "$ROOT$O/include/config/kernel.release")" = "$KREL" ] || die "kernel release is not $KREL"
  log "caching the debug kernel build as $tarball"
  # Out-of-tree modules need the configured tree, Module.symvers and the Rust
  # metadata, not the objects.
  tar -C "$ROOT" -I "zstd -T0 -3" -cf "$tarball.tmp" --exclude='*.o' --exclude='*.a' --exclude="${O#/}/*.ko" --exclude='.*.cmd' \
      --exclude=vmlinux --exclude='.tmp_vmlinux*' --exclude='vmlinux.bin*' "${O#/}" "lib/modules/$KREL" \
    && mv "$tarball.tmp" "$tarball"
  ls -la "$tarball"
  fresh_record "kernel-$KREL-$key" $((SECONDS - T0)); fresh_note "kernel $KREL" "kernel-$KREL-$key" built
fi
rm -rf "$ROOT$CURRENT"
ln -sfn "${O##*/}" "$ROOT$CURRENT"
stamp_set "kernel-$KREL-$key"
