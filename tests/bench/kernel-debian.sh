#!/bin/bash
# tests/bench/kernel-debian.sh KVER -- make a Debian trixie-backports kernel
# ready for the bench:
#  1. Rust metadata (rust/*.rmeta, libmacros.so, target.json), which Debian's
#     headers package lacks: rebuilt from the matching linux-source with
#     Debian's .config and exactly the kernel's rustc (`make modules_prepare`),
#     checked export-for-export against Debian's Module.symvers and laid over
#     /usr/src/linux-headers-KVER.  Cached as a tarball keyed by kernel +
#     rustc, so a warm run only unpacks it.
#  2. The kernel image (linux-binary-KVER) and a small initramfs that mounts
#     the 9p root (9p is modular in Debian's kernels).
. "$(dirname "$0")/lib.sh"
KVER=$1
bench_lock "kernel-$KVER-$CHROOT_KEY"
is_debug_kernel "$KVER" && die "$KVER is the debug kernel: use kernel-debug.sh"
K=/usr/src/linux-headers-$KVER
[ -f "$ROOT$K/.config" ] || die "linux-headers-$KVER missing from the chroot"
want=$(sed -nE 's/^CONFIG_RUSTC_VERSION_TEXT="(.*)"/\1/p' "$ROOT$K/.config")
have=$(in_root rustc --version)
[ "$want" = "$have" ] || die "$KVER was built with '$want' but the chroot has '$have': fix the rustc pin"
grep -q '^CONFIG_RUST=y' "$ROOT$K/.config" || die "$KVER has CONFIG_RUST off: it cannot load Rust modules"

key=$(echo "$KVER $want $(debian_pkgver "$KVER")" | sha256sum | cut -c1-12)
tarball=$CACHE/rust-meta-$KVER-$key.tar.zst
T0=$SECONDS; built=cached
if ! stamp_ok "rust-meta-$KVER-$key" && [ ! -f "$tarball" ]; then
  built=built
  src=linux-source-$(kseries "$KVER"); B=/build/$src; O=/build/meta-$KVER
  log "$KVER: rebuilding the Rust metadata from $src (modules_prepare)"
  if [ ! -d "$ROOT$B" ]; then
    mkdir -p "$ROOT/build"; in_root nice tar -C /build -xf /usr/src/$src.tar.xz
  fi
  rm -rf "$ROOT$O"; mkdir -p "$ROOT$O"; cp "$ROOT$K/.config" "$ROOT$O/.config"
  # The flags Debian built with (its headers' .kernelvariables: gcc-14).
  MK="nice make -C $B O=$O -j$(nproc) CROSS_COMPILE=x86_64-linux-gnu- CC=x86_64-linux-gnu-gcc-14 HOSTCC=x86_64-linux-gnu-gcc-14 KERNELRELEASE=$KVER"
  in_root $MK olddefconfig > /dev/null
  cmp -s "$ROOT$K/.config" "$ROOT$O/.config" || log "note: olddefconfig changed Debian's .config"
  # Without debug info (KRUSTFLAGS comes last, so its -Cdebuginfo wins):
  # only the crates' metadata and export list are kept, and neither depends
  # on it, unless the kernel has symbol versions (gendwarfksyms reads the
  # DWARF; Debian's have none).
  nodebug=KRUSTFLAGS=-Cdebuginfo=0
  grep -q '^CONFIG_MODVERSIONS=y' "$ROOT$O/.config" && nodebug=
  in_root $MK $nodebug modules_prepare > "$CACHE/modules_prepare-$KVER.log" 2>&1 ||
    { tail -30 "$CACHE/modules_prepare-$KVER.log"; die "modules_prepare for $KVER failed"; }
  ours=$(sed -nE 's/^EXPORT_SYMBOL_RUST_GPL\((_R[A-Za-z0-9_]+)\);.*/\1/p' "$ROOT$O"/rust/exports_*_generated.h | sort -u)
  debian=$(awk '$2 ~ /^_R/ {print $2}' "$ROOT$K/Module.symvers" | sort -u)
  if [ "$ours" != "$debian" ]; then
    comm -3 <(echo "$ours") <(echo "$debian") | head -5 >&2
    die "the rebuilt Rust crates of $KVER export other symbols than Debian's kernel: toolchain mismatch"
  fi
  log "$KVER: $(echo "$ours" | wc -l) Rust exports identical to Debian's Module.symvers"
  mkdir -p "$ROOT$O/pkg/rust" "$ROOT$O/pkg/scripts"
  cp "$ROOT$O"/rust/*.rmeta "$ROOT$O"/rust/*.so "$ROOT$O/pkg/rust/"
  cp "$ROOT$O/scripts/target.json" "$ROOT$O/pkg/scripts/"
  # Members only (no "scripts/" entry): the headers' scripts/ is a symlink to
  # linux-kbuild, which extracting a directory entry would replace.
  tar -C "$ROOT$O/pkg" --zstd -cf "$tarball.tmp" rust scripts/target.json && mv "$tarball.tmp" "$tarball"
  rm -rf "$ROOT$O" "$ROOT$B"
fi
if ! stamp_ok "rust-meta-$KVER-$key"; then
  tar -C "$ROOT$K" --keep-directory-symlink --zstd -xf "$tarball"; stamp_set "rust-meta-$KVER-$key"
fi

# Kernel image + initramfs.
V=$ROOT/boot-bench/$KVER; mkdir -p "$V" "$ROOT/build/dl"
if [ ! -f "$V/vmlinuz" ]; then
  in_root sh -c "cd /build/dl && apt-get -o APT::Sandbox::User=root download -q linux-binary-$KVER=$(debian_pkgver "$KVER")" > /dev/null
  rm -rf "$V/pkg"; dpkg-deb -x "$ROOT"/build/dl/linux-binary-${KVER}_*.deb "$V/pkg"
  cp "$V/pkg/usr/lib/modules/$KVER/vmlinuz" "$V/vmlinuz"; rm -rf "$V/pkg" "$ROOT"/build/dl/linux-binary-${KVER}_*.deb
fi
I=$ROOT/build/initramfs-$KVER; rm -rf "$I"; mkdir -p "$I/bin" "$I/mods"
cp "$ROOT/usr/bin/busybox" "$I/bin/busybox"
n=0
for m in fs/netfs/netfs net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p; do
  f=$(ls "$ROOT/lib/modules/$KVER/kernel/$m.ko"* 2>/dev/null | head -1)
  [ -n "$f" ] || continue
  n=$((n+1))
  case "$f" in *.xz) xz -dc "$f";; *.zst) zstd -qdc "$f";; *) cat "$f";; esac > "$I/mods/$n-$(basename $m).ko"
done
install -m 755 "$TOP/tests/vm/init.initramfs" "$I/init"
in_root sh -c "cd /build/initramfs-$KVER && find . | cpio -o -H newc --quiet | gzip -1" > "$V/initrd.img"
rm -rf "$I"
[ $built = cached ] || fresh_record "rust-meta-$KVER-$key" $((SECONDS - T0))
fresh_note "kernel $KVER" "rust-meta-$KVER-$key" $built
log "$KVER ready"
