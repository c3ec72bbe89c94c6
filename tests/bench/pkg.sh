#!/bin/bash
# tests/bench/pkg.sh -- the packaging cases, in the chroot (host side of the
# bench; the VM half is tests/vm/cases/pkg-modprobe.sh).
#
#   pkg.sh install KVER   `make install-dkms KVER=` (dkms add/build/install)
#                         before the VM boots: the chroot is the VM's root, so
#                         the VM's modprobe finds /lib/modules/KVER/updates/dkms;
#                         plus a decoy nvidia-peermem.ko in the kernel's tree
#   pkg.sh remove KVER    after the VM: `make uninstall`, and nothing is left
#   pkg.sh host KVER      once per run, KVER a prepared Debian kernel:
#                         static checks (shellcheck, versions, check-kernel.sh
#                         on fake trees, validate.sh --dry-run), DKMS declining
#                         trixie's 6.12 (Rust off), a tree without metadata and
#                         a mismatched rustc, then `make deb`, the .deb's
#                         install (DKMS builds), purge (nothing left) (the
#                         arm64 cross-build is make cross's)
# Prints "ok - ..." / "FAIL - ..." lines; the counts go to
# $RESULTS/pkg-<what>.counts ("passed failed skipped"), which run.sh adds up.
# Everything it installs into the shared chroot it removes again.
. "$(dirname "$0")/lib.sh"
what=${1:?usage: pkg.sh install|remove|host KVER}; KVER=${2:?usage: pkg.sh install|remove|host KVER}
VERSION=$(cat "$TOP/VERSION")
SRC=$STAGE/pkgsrc
mkdir -p "$RESULTS"
npass=0; nfail=0
ok()  { echo "ok   - $*"; npass=$((npass+1)); }
bad() { echo "FAIL - $*"; nfail=$((nfail+1)); }
# check DESC CMD... -- ok/FAIL; never stops the script; CHECK_RC is CMD's status.
CHECK_RC=0
check() { local d=$1; shift; CHECK_RC=0; "$@" || CHECK_RC=$?; if [ $CHECK_RC = 0 ]; then ok "$d"; else bad "$d"; fi; }
failed_last() { [ "$CHECK_RC" != 0 ]; }
# is_dkms_path KVER PATH -- PATH is the DKMS build of nvidia_peermem for KVER.
is_dkms_path() { case $2 in /lib/modules/"$1"/updates/dkms/nvidia_peermem.ko|/lib/modules/"$1"/updates/dkms/nvidia_peermem.ko.[gxz]*) return 0;; esac; return 1; }
# A script that stops early (set -e) counts as a failure even if no check failed.
counts() { # counts [STATUS] -- STATUS: the script's (default: $?)
  local st=${1:-$?}
  if [ "$st" != 0 ] && [ $nfail = 0 ]; then echo "FAIL - pkg.sh $what $KVER stopped (exit $st)"; nfail=1; fi
  echo "$npass $nfail 0" > "$RESULTS/pkg-$what-$KVER.counts"
}
trap counts EXIT
root() { in_root "$@"; }
kdir_of() { if is_debug_kernel "$1"; then echo "/build/kernel-$1"; else echo "/usr/src/linux-headers-$1"; fi; }

# The tree as a person would have it (with userspace/, for `make deb`).
stage_src() {
  mkdir -p "$ROOT$SRC"
  rsync -a --delete --exclude=.git --exclude=/build --exclude=target --exclude='*.o' --exclude='*.ko' \
    --exclude='.*.cmd' "$TOP/" "$ROOT$SRC/"
}
# Nothing of ours is left in the chroot.
nothing_left() { # nothing_left LABEL
  local left
  left=$(root sh -c 'ls -d /var/lib/dkms/peermem-rs /usr/src/peermem-rs-* /etc/modprobe.d/peermem-rs.conf \
      /etc/depmod.d/peermem-rs.conf /usr/local/sbin/peermem-rust-metadata /usr/sbin/peermem-rust-metadata \
      /usr/local/sbin/peermem-rs-refresh /usr/sbin/peermem-rs-refresh \
      /var/lib/peermem-rs /usr/src/linux-headers-*/.peermem-rust-metadata.files \
      /lib/modules/*/updates/dkms/nvidia_peermem.ko* 2>/dev/null; grep -l nvidia_peermem /lib/modules/*/modules.dep 2>/dev/null' || true)
  check "$1: nothing left behind${left:+ (left: ${left//$'\n'/ })}" test -z "$left"
}
decoy() { # decoy add|del KVER -- an nvidia-peermem.ko in the kernel's own tree
  local d=/lib/modules/$2/kernel/drivers/video f
  if [ "$1" = add ]; then
    f=$(cd "$ROOT/lib/modules/$2/kernel" && find . -name 'dummy.ko*' -print -quit)
    [ -n "$f" ] || f=$(cd "$ROOT/lib/modules/$2/kernel" && find . -name '*.ko*' -print -quit)
    mkdir -p "$ROOT$d"; cp "$ROOT/lib/modules/$2/kernel/$f" "$ROOT$d/nvidia-peermem.ko${f##*.ko}"
  else
    rm -f "$ROOT$d"/nvidia-peermem.ko*; rmdir "$ROOT$d" 2>/dev/null || true
  fi
  root depmod "$2"
}

case $what in
install)
  stage_src
  rm -f "$ROOT$STAGE/pkg/$KVER.installed"
  root sh -c "cd $SRC && make -s uninstall" > /dev/null 2>&1 || true
  out=$(root sh -c "cd $SRC && make install-dkms KVER=$KVER 2>&1") ||
    { echo "$out" | tail -30; bad "$KVER: make install-dkms"; exit 1; }
  check "$KVER: dkms status says installed" grep -q "peermem-rs/$VERSION, $KVER, .*: installed" <<< "$(root dkms status)"
  decoy add "$KVER"
  f=$(root modinfo -k "$KVER" -n nvidia_peermem)
  check "$KVER: depmod picks the DKMS build over a decoy in kernel/ ($f)" \
    is_dkms_path "$KVER" "$f"
  check "$KVER: modinfo: name nvidia_peermem, version $VERSION, softdep on ib_uverbs and nvidia" \
    test "$(root modinfo -k "$KVER" -F name nvidia_peermem)/$(root modinfo -k "$KVER" -F version nvidia_peermem)/$(root modinfo -k "$KVER" -F softdep nvidia_peermem)" \
         = "nvidia_peermem/$VERSION/pre: ib_uverbs nvidia"
  check "$KVER: modinfo names the binding: the weak fallback (no provider Module.symvers here)" \
    test "$(root modinfo -k "$KVER" -F binding nvidia_peermem)" = "weak: no provider Module.symvers found"
  check "$KVER: modprobe.d carries the softdep too" grep -q 'softdep nvidia_peermem pre: ib_uverbs nvidia' <<< "$(root modprobe -c)"
  check "$KVER: modprobe.d blacklists nv_peer_mem (one peer-memory client per host: packaging's job, not the module's)" \
    grep -qx 'blacklist nv_peer_mem' <<< "$(root modprobe -c)"
  check "$KVER: ... and not nvidia_peermem (the name this build loads under)" \
    bash -c "! grep -qx 'blacklist nvidia_peermem' <<< \"\$1\"" _ "$(root modprobe -c)"
  mkdir -p "$ROOT$STAGE/pkg"; echo "$VERSION" > "$ROOT$STAGE/pkg/$KVER.installed"
  ;;
remove)
  rm -f "$ROOT$STAGE/pkg/$KVER.installed"
  decoy del "$KVER"
  check "$KVER: make uninstall" root sh -c "cd $SRC && make -s uninstall > /dev/null 2>&1"
  nothing_left "$KVER: after make uninstall"
  ;;
host)
  stage_src
  . "$BENCH/pkg-host.inc"
  ;;
*) die "usage: pkg.sh install|remove|host KVER";;
esac
[ "$nfail" = 0 ]
