#!/bin/bash
# tests/bench/build.sh KVER -- build the kernel modules for one kernel of the
# matrix inside the chroot, from a copy of the working tree:
#   1. peermem_rs.ko (the product: the top-level Kbuild), and the same
#      module under its detected identity, nvidia_peermem.ko
#      (PEERMEM_NAME=nvidia_peermem, from a copy of the tree so that both
#      builds stay incremental);
#   2. every test module tree tests/<dir>/ that has a Kbuild (simulators,
#      test clients, negative controls), in name order, each seeing the
#      symbols exported by the trees built before it;
# then check that every symbol each .ko imports is exported by that kernel
# (its Module.symvers: the `_R…` Rust symbols in particular) or by one of our
# own modules.  Output: <stage>/mods/KVER/*.ko, the tree the VM sees.
. "$(dirname "$0")/lib.sh"
KVER=$1
if is_debug_kernel "$KVER"; then KDIR=/build/kernel-$KVER; LLVM="LLVM=1"
else KDIR=/usr/src/linux-headers-$KVER; LLVM=; fi
[ -f "$ROOT$KDIR/Module.symvers" ] || die "$KVER is not prepared (no $KDIR/Module.symvers): run the kernel step"
SRC=$STAGE/src/$KVER; OUT=$STAGE/mods/$KVER
mkdir -p "$ROOT$SRC" "$ROOT$OUT"
rsync -a --delete --exclude=.git --exclude=/build --exclude=target --exclude=/userspace \
  --exclude=/tests/rxe-peer/rxe --exclude='*.o' --exclude='*.ko' --exclude='.*.cmd' "$TOP/" "$ROOT$SRC/"
rm -f "$ROOT$OUT"/*.ko

# The bench's soft RDMA device (tests/rxe-peer): rxe's own source, from the
# chroot's linux-source (unpacked once into /build), with rxe.patch, in
# tests/rxe-peer/rxe/ -- for the kernels built from that source, with rxe
# configured: Debian's 7.3 and our debug kernel (debug-kernel.config has the
# RDMA core and rxe).  For other kernels rxe/ is absent and tests/rxe-peer
# builds nothing.  Kept between builds (incremental) while the patch is
# the same.
RXE=$SRC/tests/rxe-peer/rxe
if [ "$(kseries "$KVER")" = "${DEBUG_KERNEL_SRC#linux-source-}" ] &&
   grep -qx 'CONFIG_RDMA_RXE=m' "$ROOT$KDIR/.config"; then
  want=$(sha256sum < "$TOP/tests/rxe-peer/rxe.patch" | cut -c1-16)
  if [ "$(cat "$ROOT$RXE/.patch" 2>/dev/null)" != "$want" ]; then
    rsrc=/build/rxe-$DEBUG_KERNEL_SRCVER
    if [ ! -f "$ROOT$rsrc/rxe.c" ]; then
      rm -rf "$ROOT$rsrc.tmp"; mkdir -p "$ROOT$rsrc.tmp"
      in_root nice tar -C "$rsrc.tmp" -xf "/usr/src/$DEBUG_KERNEL_SRC.tar.xz" "$DEBUG_KERNEL_SRC/drivers/infiniband/sw/rxe"
      mv "$ROOT$rsrc.tmp/$DEBUG_KERNEL_SRC/drivers/infiniband/sw/rxe" "$ROOT$rsrc"; rm -rf "$ROOT$rsrc.tmp"
    fi
    rm -rf "$ROOT$RXE"; cp -r "$ROOT$rsrc" "$ROOT$RXE"
    if ! patch -s -p1 -d "$ROOT$RXE" < "$TOP/tests/rxe-peer/rxe.patch"; then
      echo "BUILD-FAIL $KVER rxe_peer: tests/rxe-peer/rxe.patch does not apply to $DEBUG_KERNEL_SRC's rxe"; exit 1
    fi
    echo "$want" > "$ROOT$RXE/.patch"
  fi
  rm -f "$ROOT$OUT/rxe_peer.none"
else
  rm -rf "$ROOT$RXE"
  # Why there is no rxe_peer.ko here (the perftest cases skip with it).
  echo "the soft RDMA device is built only for the kernels of $DEBUG_KERNEL_SRC (rxe configured), not $KVER" \
    > "$ROOT$OUT/rxe_peer.none"
fi
# product_copy DIR -- a copy of the product's source (no tests, no build
# outputs) for a build of its own (identity, plants, binding variants), so
# that each build stays incremental.
product_copy() {
  mkdir -p "$ROOT$1"
  rsync -a --delete --exclude=/tests --exclude=build.log --exclude='*.o' --exclude='*.ko' --exclude='.*.cmd' \
    --exclude='*.mod*' --exclude=Module.symvers --exclude=modules.order "$ROOT$SRC/" "$ROOT$1/"
}
IDSRC=$STAGE/src/$KVER-nvidia_peermem
product_copy "$IDSRC"
# The negative controls (PEERMEM_PLANTS="leak_sg ...", set by run.sh only
# when a plant-* case runs): the module with that bug planted,
# peermem_plant_<bug>.ko, each from a copy of its own with
# tests/plants/<bug>.patch applied (the product source holds no planted
# bug).  A patch that no longer applies fails the build with its name.
plant_dirs=
for p in ${PEERMEM_PLANTS:-}; do
  product_copy "$SRC-plant-$p"
  if ! patch -s -p1 -d "$ROOT$SRC-plant-$p" < "$TOP/tests/plants/$p.patch"; then
    echo "BUILD-FAIL $KVER peermem_plant_$p: tests/plants/$p.patch does not apply to rust/"; exit 1
  fi
  plant_dirs="$plant_dirs $SRC-plant-$p"
done

# A kernel with symbol versions (CONFIG_MODVERSIONS=y: the debug kernel):
# the product is built as DKMS builds it on a real host, against its
# providers' Module.symvers -- the simulators', built first --, so that its
# provider references carry their CRCs (README "Binding").  Two more builds
# for module-modversions, in <out>/weak and <out>/skew: the weak fallback
# (no PEERMEM_SYMVERS), and a build against a provider symvers whose CRC
# of nvidia_p2p_get_pages differs from the simulator's (a driver other than
# the one built against).
# And for tests/bench/hosts.sh, the NVIDIA simulator as another build of
# the same driver (NVSIM_DRIVER_REBUILD: the same code, other CRCs), in
# <src>-upgrade/tests/sim.
modversions=; product_symvers=; variant_dirs=
if grep -qx CONFIG_MODVERSIONS=y "$ROOT$KDIR/.config"; then
  modversions=y; product_symvers=$SRC/tests/sim/Module.symvers
  for v in weak skew; do
    product_copy "$SRC-$v"; mkdir -p "$ROOT$OUT/$v"; rm -f "$ROOT$OUT/$v"/*.ko
    variant_dirs="$variant_dirs $SRC-$v"
  done
  mkdir -p "$ROOT$SRC-upgrade"
  rsync -a --delete --exclude=build.log --exclude='*.o' --exclude='*.ko' --exclude='.*.cmd' \
    --exclude='*.mod*' --exclude=Module.symvers --exclude=modules.order "$ROOT$SRC/" "$ROOT$SRC-upgrade/"
  variant_dirs="$variant_dirs $SRC-upgrade/tests/sim"
fi

# The simulators first where the product is built against their symvers.
dirs="$SRC $IDSRC$plant_dirs"
[ -n "$modversions" ] && dirs="$SRC/tests/sim $dirs$variant_dirs"
for kb in "$ROOT$SRC"/tests/*/Kbuild; do
  t=${kb%/Kbuild}; t=${t#"$ROOT"}
  [ -n "$modversions" ] && [ "$t" = "$SRC/tests/sim" ] && continue
  dirs="$dirs $t"
done
symvers=; status=0
for d in $dirs; do
  d=${d#$ROOT}
  # The product is built through clippy (warnings fail the build, below).
  name=${d#$SRC}; name=${name#/}; name=${name:-peermem_rs}; extra=; kes=$symvers
  [ "$d" = "$SRC" ] && extra=CLIPPY=1
  # The product's builds see only the providers' symvers they are given
  # (PEERMEM_SYMVERS), as on a host: none in the weak fallback.
  case $d in "$SRC"|"$IDSRC"|"$SRC"-*) kes=;; esac
  [ "$d" = "$IDSRC" ] && { name=nvidia_peermem; extra=PEERMEM_NAME=nvidia_peermem; }
  case $d in "$SRC"-plant-*) name=peermem_plant_${d#"$SRC"-plant-}; extra=PEERMEM_NAME=$name;; esac
  case $d in "$SRC"|"$IDSRC"|"$SRC"-plant-*)
    [ -n "$product_symvers" ] && extra="$extra PEERMEM_SYMVERS=$product_symvers";;
  "$SRC"-weak) name="peermem_rs (weak fallback)";;
  "$SRC"-upgrade/tests/sim) name="tests/sim (another driver build)"; extra="KCFLAGS=-DNVSIM_DRIVER_REBUILD KBUILD_GENDWARFKSYMS_STABLE=1";;
  "$SRC"-skew)
    name="peermem_rs (against a skewed NVIDIA symvers)"
    crc=$(awk -F'\t' '$2 == "nvidia_p2p_get_pages" { print $1; exit }' "$ROOT$product_symvers")
    sed "s/^$crc\tnvidia_p2p_get_pages\t/$(printf '0x%08x' $((crc ^ 0x5a5a5a5a)))\tnvidia_p2p_get_pages\t/" \
      "$ROOT$product_symvers" > "$ROOT$d.symvers"
    extra="PEERMEM_SYMVERS=$d.symvers";;
  esac
  if ! in_root make -s -C "$KDIR" M="$d" $LLVM $extra KBUILD_EXTRA_SYMBOLS="$kes" modules > "$ROOT$d/build.log" 2>&1; then
    echo "BUILD-FAIL $KVER $name"; grep -E 'error|warning' -A5 "$ROOT$d/build.log" | head -60; cat "$ROOT$d/build.log" | tail -20
    status=1; continue
  fi
  # Warnings are errors for our code: the log must be clean.
  if grep -qE '^(warning|error)|: warning:' "$ROOT$d/build.log"; then
    echo "BUILD-FAIL $KVER $name: compiler warnings"; grep -E 'warning' -A8 "$ROOT$d/build.log" | head -60; status=1
  fi
  # The product exports nothing; its builds under other names are not
  # passed on either (only the product's own symvers is).
  # (A tree that built no module for this kernel, tests/rxe-peer beside
  # another kernel's source, has no Module.symvers to pass on.)
  case $d in "$IDSRC"|"$SRC"-plant-*|"$SRC"-weak|"$SRC"-skew|"$SRC"-upgrade/*) ;;
    *) [ ! -f "$ROOT$d/Module.symvers" ] || symvers="$symvers $d/Module.symvers";; esac
  case $d in
    "$SRC"-weak|"$SRC"-skew) cp "$ROOT$d"/*.ko "$ROOT$OUT/${d#"$SRC"-}/" ;;
    "$SRC"-upgrade/*) ;;
    *) cp "$ROOT$d"/*.ko "$ROOT$OUT/" 2>/dev/null || true ;;
  esac
done
# Import check.
exports=$(cat "$ROOT$KDIR/Module.symvers" $(for s in $symvers; do echo "$ROOT$s"; done) 2>/dev/null | awk '{print $2}' | sort -u)
for ko in "$ROOT$OUT"/*.ko; do
  [ -f "$ko" ] || continue
  missing=$(comm -23 <(in_root nm -u "${ko#$ROOT}" | awk '{print $2}' | sort -u) <(echo "$exports"))
  if [ -n "$missing" ]; then
    echo "BUILD-FAIL $KVER $(basename "$ko"): imports symbols the kernel does not export:"; echo "$missing" | head -20; status=1
  fi
done
# NVIDIA's own nvidia-peermem (the control, make bench's comparison), when
# this run needs it (run.sh sets PEERMEM_NVIDIA=1): into <out>/nvidia/.
if [ -n "${PEERMEM_NVIDIA:-}" ] && [ $status = 0 ]; then
  bash "$BENCH/nvidia-peermem.sh" build "$KVER" || status=1
fi
[ $status = 0 ] && echo "BUILD-OK $KVER $(cd "$ROOT$OUT" && ls *.ko 2>/dev/null | tr '\n' ' ')"
exit $status
