#!/bin/bash
# tests/bench/nvidia-peermem.sh -- NVIDIA's own nvidia-peermem, unmodified,
# as the suite's control (tests/vm/nvpm.list) and make bench's comparison.
#   nvidia-peermem.sh src          the source tree (the directory holding
#                                  nvidia-peermem/, Kbuild, conftest.sh) on stdout
#   nvidia-peermem.sh build KVER   nvidia-peermem.ko for KVER, built against the
#                                  simulators' Module.symvers (build.sh's tree),
#                                  into <stage>/mods/KVER/nvidia/
#   nvidia-peermem.sh stage DIR    what the build reads of the tree, into the
#                                  chroot's DIR (for a build of NVIDIA's own
#                                  elsewhere: tests/bench/hosts.sh's Ubuntu host)
#   nvidia-peermem.sh make-cmd KVER DIR   the command line that builds it
#                                  there for KVER (in the chroot, or a view of it)
# The source: NVIDIA_PEERMEM_SRC=DIR (an nvidia-peermem directory of a driver
# an admin runs, e.g. /usr/src/nvidia-<version>/nvidia-peermem, on the host),
# else Debian's NVIDIA_OPEN_DKMS_PKG at NVIDIA_OPEN_DKMS_PKGVER
# (versions.env), downloaded from the archive's contrib component with the
# chroot's apt (a private source list and index, the chroot's own stay as
# they are) and unpacked -- never installed, which would make DKMS build the
# whole driver -- under $CACHE/nvidia-open-dkms-<version>/ (only what
# nvidia-peermem's build reads: the top-level build files, common/,
# nvidia-peermem/).
#
# The build is NVIDIA's own (its Makefile, Kbuild and conftest.sh), as on a
# host with MLNX_OFED/DOCA-OFED: the RDMA core's Module.symvers is found at
# /usr/src/ofa_kernel/<arch>/<kver>/, where its conftest and Kbuild look for
# it.  There, in a private mount of the build alone, lies the simulators'
# Module.symvers (peer_core_sim's ib_*peer_memory_client and
# nvidia_p2p_sim's nvidia_p2p_*: both providers, with their CRCs on the
# debug kernel).  Its own headers (nv-p2p.h, peer_mem.h) come with the
# source.
. "$(dirname "$0")/lib.sh"

# src_tree -- the cached tree of the pinned package (fetched once).
src_tree() {
  local ver=$NVIDIA_OPEN_DKMS_PKGVER pkg=$NVIDIA_OPEN_DKMS_PKG
  local d=$CACHE/nvidia-open-dkms-$ver A=/build/nvidia-open-dkms-apt
  if [ ! -f "$d/.complete" ]; then
    bench_lock "nvidia-open-dkms-$ver"
    if [ ! -f "$d/.complete" ]; then
      log "$pkg $ver: downloading from the archive's $NVIDIA_OPEN_DKMS_COMPONENT component"
      rm -rf "$ROOT$A" "$d"; mkdir -p "$ROOT$A/lists/partial" "$ROOT$A/cache/archives/partial" "$ROOT$A/parts" "$ROOT$A/dl"
      echo "deb $(debian_mirror) $SUITE $NVIDIA_OPEN_DKMS_COMPONENT" > "$ROOT$A/sources.list"
      local o="-o Dir::Etc::SourceList=$A/sources.list -o Dir::Etc::SourceParts=$A/parts -o Dir::State::Lists=$A/lists -o Dir::Cache=$A/cache"
      # shellcheck disable=SC2086 # $o is a list of options
      in_root apt-get -q $o update > /dev/null || die "apt-get update of $SUITE $NVIDIA_OPEN_DKMS_COMPONENT failed"
      # shellcheck disable=SC2086
      if ! in_root apt-cache $o madison "$pkg" | awk -F'|' '{gsub(/ /,"",$2); print $2}' | grep -qxF "$ver"; then
        die "pinned package $pkg=$ver is not in the archive; newest available: $(in_root apt-cache $o madison "$pkg" | awk -F'|' '{gsub(/ /,"",$2); print $2}' | head -n1). Update NVIDIA_OPEN_DKMS_PKGVER in tests/bench/versions.env."
      fi
      # shellcheck disable=SC2086
      in_root sh -c "cd $A/dl && apt-get -q $o -o APT::Sandbox::User=root download $pkg=$ver" > /dev/null ||
        die "downloading $pkg=$ver failed"
      local tmp=$d.tmp src
      rm -rf "$tmp"; mkdir -p "$tmp/x" "$d"
      dpkg-deb -x "$ROOT$A/dl/${pkg}"_*.deb "$tmp/x"
      src=$(dirname "$(ls -d "$tmp"/x/usr/src/nvidia-*/nvidia-peermem/nvidia-peermem.c | head -n1)")/..
      [ -f "$src/Kbuild" ] && [ -f "$src/conftest.sh" ] || die "$pkg $ver: no nvidia-peermem source with its Kbuild in the package"
      mkdir -p "$d/src"
      find "$src" -maxdepth 1 -type f -exec cp {} "$d/src/" \;
      cp -r "$src/common" "$src/nvidia-peermem" "$d/src/"
      basename "$(readlink -f "$src")" > "$d/source-dir"
      rm -rf "$tmp" "$ROOT$A"
      touch "$d/.complete"
      log "$pkg $ver: $(cat "$d/source-dir") cached in $d/src"
    fi
  fi
  echo "$d/src"
}

# given_tree DIR -- an admin's nvidia-peermem directory: its parent is the tree.
given_tree() {
  local p
  p=$(cd "$1/.." 2> /dev/null && pwd) || die "NVIDIA_PEERMEM_SRC=$1: no such directory"
  [ -f "$1/nvidia-peermem.c" ] && [ -f "$p/Kbuild" ] && [ -f "$p/conftest.sh" ] ||
    die "NVIDIA_PEERMEM_SRC=$1: not an nvidia-peermem directory of a driver source tree (wants nvidia-peermem.c, ../Kbuild, ../conftest.sh)"
  echo "$p"
}

tree() { if [ -n "${NVIDIA_PEERMEM_SRC:-}" ]; then given_tree "$NVIDIA_PEERMEM_SRC"; else src_tree; fi; }

# stage_tree DIR -- what nvidia-peermem's build reads of the tree (a
# driver's whole tree holds the other modules' sources and binary objects
# too), into the chroot's DIR.
stage_tree() {
  local src
  src=$(tree) || exit 1
  mkdir -p "$ROOT$1"
  rsync -a --delete --exclude='*.o' --exclude='*.ko' --exclude='.*.cmd' --exclude='*.mod*' --exclude=/conftest \
    --include=/common/ --include=/nvidia-peermem/ --include='/*.*' --include=/Kbuild --include=/Makefile \
    --include='/common/**' --include='/nvidia-peermem/**' --exclude='*' "$src/" "$ROOT$1/"
}
# make_cmd KVER DIR -- NVIDIA's own build of nvidia-peermem in DIR for KVER.
# PAHOLE_VARIABLES= (empty): NVIDIA's Makefile wraps pahole in an awk
# program when the kernel has no scripts/pahole-flags.sh (recent kernels
# have none), which the chroot's awk (mawk) cannot parse; the kernel's own
# BTF step runs instead.
make_cmd() {
  local KDIR LLVM=
  if is_debug_kernel "$1"; then KDIR=/build/kernel-$1; LLVM="LLVM=1"; else KDIR=/usr/src/linux-headers-$1; fi
  echo "make -C $2 modules NV_KERNEL_MODULES=nvidia-peermem SYSSRC=$KDIR ARCH=x86_64${LLVM:+ $LLVM} PAHOLE_VARIABLES="
}

# build KVER
build() {
  local KVER=$1 KDIR B OFA OUT symvers arch=x86_64
  if is_debug_kernel "$KVER"; then KDIR=/build/kernel-$KVER; else KDIR=/usr/src/linux-headers-$KVER; fi
  symvers=$STAGE/src/$KVER/tests/sim/Module.symvers
  [ -f "$ROOT$symvers" ] || die "no simulators' Module.symvers for $KVER ($symvers): run build.sh first"
  B=$STAGE/nvidia-peermem/$KVER; OFA=$STAGE/nvidia-peermem/ofa-$KVER; OUT=$STAGE/mods/$KVER/nvidia
  mkdir -p "$ROOT$OFA/$arch/$KVER" "$ROOT$OUT" "$ROOT/usr/src/ofa_kernel"
  stage_tree "$B"
  # Without nvidia_p2p_sim_plain's lines (the same API again, from the
  # module that cannot be loaded beside nvidia_p2p_sim): the module's
  # dependencies name the simulated GPU that is loaded.
  awk -F'\t' '$3 !~ /nvidia_p2p_sim_plain$/' "$ROOT$symvers" > "$ROOT$OFA/$arch/$KVER/Module.symvers"
  rm -f "$ROOT$OUT"/*.ko
  # The chroot with the simulators' symvers mounted where an OFED install
  # puts the core's (this process's mount namespace only).
  # shellcheck disable=SC2046 # make_cmd's words
  if ! unshare --mount --propagation private -- sh -c \
      'r=$1; o=$2; shift 2; mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" &&
       mount --bind "$o" "$r/usr/src/ofa_kernel" && exec chroot "$r" "$@"' \
      sh "$ROOT" "$ROOT$OFA" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      $(make_cmd "$KVER" "$B") > "$ROOT$B/build.log" 2>&1; then
    echo "BUILD-FAIL $KVER nvidia-peermem (NVIDIA's, from $(tree))"; grep -E 'error' -A5 "$ROOT$B/build.log" | head -40; tail -20 "$ROOT$B/build.log"
    return 1
  fi
  grep -rqx '#define NV_MLNX_IB_PEER_MEM_SYMBOLS_PRESENT' "$ROOT$B/conftest" ||
    { echo "BUILD-FAIL $KVER nvidia-peermem: its conftest did not find the core's symbols (a module that only fails to load)"; return 1; }
  cp "$ROOT$B/nvidia-peermem.ko" "$ROOT$OUT/"
  # Every import exported by the kernel or the simulators.
  local missing
  missing=$(comm -23 <(in_root nm -u "$OUT/nvidia-peermem.ko" | awk '{print $2}' | sort -u) \
                     <(cat "$ROOT$KDIR/Module.symvers" "$ROOT$symvers" | awk '{print $2}' | sort -u))
  [ -z "$missing" ] || { echo "BUILD-FAIL $KVER nvidia-peermem imports symbols nobody exports: $missing"; return 1; }
  echo "BUILD-OK $KVER nvidia-peermem.ko ($(sed -nE 's/^version: *//p' < <(in_root modinfo "$OUT/nvidia-peermem.ko")), NVIDIA's, from $(tree))"
}

case ${1:-} in
  src) tree ;;
  build) [ -n "${2:-}" ] || die "usage: nvidia-peermem.sh build KVER"; build "$2" ;;
  stage) [ -n "${2:-}" ] || die "usage: nvidia-peermem.sh stage DIR"; stage_tree "$2" ;;
  make-cmd) [ -n "${3:-}" ] || die "usage: nvidia-peermem.sh make-cmd KVER DIR"; make_cmd "$2" "$3" ;;
  *) die "usage: nvidia-peermem.sh src | build KVER | stage DIR | make-cmd KVER DIR" ;;
esac
