#!/bin/bash
# tests/bench/chroot.sh -- the trixie chroot: toolchain for the kernels and
# modules, and (read-only over virtio-9p) the root filesystem of the VMs.
# Packages are installed at the exact versions of versions.env; a pin the
# archive no longer has stops the bench with the newest version on offer.
. "$(dirname "$0")/lib.sh"

stamp_ok chroot && { fresh_note chroot "chroot-$CHROOT_KEY" cached; exit 0; }
bench_lock "chroot-$CHROOT_KEY"
stamp_ok chroot && { fresh_note chroot "chroot-$CHROOT_KEY" cached; exit 0; }
T0=$SECONDS
mirror=$(debian_mirror)
if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
  log "debootstrap $SUITE into $ROOT"
  rm -rf "$ROOT.tmp"
  nice debootstrap --variant=minbase "$SUITE" "$ROOT.tmp" "$mirror" > "$CACHE/debootstrap.log" 2>&1 ||
    { tail -20 "$CACHE/debootstrap.log"; die "debootstrap of $SUITE from $mirror failed (log: $CACHE/debootstrap.log)"; }
  mv "$ROOT.tmp" "$ROOT"
fi
cat > "$ROOT/etc/apt/sources.list" <<SRC
deb $mirror $SUITE main
deb $mirror $BACKPORTS main
SRC
# The archive here is a snapshot whose Release files are past Valid-Until.
echo 'Acquire::Check-Valid-Until "false";' > "$ROOT/etc/apt/apt.conf.d/90bench"
in_root apt-get -q update > /dev/null

# Every pin must exist in the archive, at exactly that version.
kernel_pins=
for k in $DEBIAN_KERNELS; do
  v=$(debian_pkgver "$k")
  kernel_pins="$kernel_pins linux-headers-$k=$v linux-modules-$k=$v linux-source-$(kseries "$k")=$v"
done
bad=0
for p in $PINNED_PKGS $kernel_pins; do
  name=${p%%=*}; want=${p#*=}
  if ! in_root apt-cache madison "$name" | awk -F'|' '{gsub(/ /,"",$2); print $2}' | grep -qxF "$want"; then
    newest=$(in_root apt-cache madison "$name" | awk -F'|' '{gsub(/ /,"",$2); print $2}' | head -n1)
    echo "bench: pinned package $name=$want is not in the archive; newest available: ${newest:-none}." \
         "Update the pin in tests/bench/versions.env." >&2
    bad=1
  fi
done
[ $bad = 0 ] || exit 1

# The VMs boot with the bench's own initramfs (kernel-debian.sh): the chroot's
# initramfs-tools never needs to run (its trigger, run for a kernel image a
# package pulls in, once failed a fresh chroot's install here).
mkdir -p "$ROOT/etc/initramfs-tools"
echo 'update_initramfs=no' > "$ROOT/etc/initramfs-tools/update-initramfs.conf"
log "apt install (pinned toolchain, kernels' headers/modules/sources, VM tools)"
# --force-confold keeps the initramfs setting above; a failed install is
# tried once more after `dpkg --configure -a` (a first install here once
# exited non-zero with every package set up).
apt_install() {
  in_root env DEBIAN_FRONTEND=noninteractive nice apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    $PINNED_PKGS $kernel_pins $BUILD_PKGS $VM_PKGS >> "$CACHE/apt-install.log" 2>&1
}
: > "$CACHE/apt-install.log"
apt_install || { log "apt install failed: once more"; in_root env DEBIAN_FRONTEND=noninteractive dpkg --configure -a >> "$CACHE/apt-install.log" 2>&1; apt_install; } ||
  { tail -30 "$CACHE/apt-install.log"; die "apt-get install in the chroot failed (log: $CACHE/apt-install.log)"; }
in_root apt-get clean
have=$(in_root rustc --version)
[ "$have" = "$RUSTC_VERSION_TEXT" ] || die "chroot rustc is '$have', expected '$RUSTC_VERSION_TEXT'"
in_root dpkg-query -W rustc rust-src bindgen gcc-14 clang-19 'linux-source-*' 'linux-headers-*' \
  rdma-core perftest > "$ROOT/.bench-versions.txt"
stamp_set chroot
fresh_record "chroot-$CHROOT_KEY" $((SECONDS - T0)); fresh_note chroot "chroot-$CHROOT_KEY" built
log "chroot ready: $(du -sh --exclude=proc --exclude=dev "$ROOT" 2>/dev/null | cut -f1)"
