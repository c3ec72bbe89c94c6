#!/bin/bash
# tests/bench/perftest-cuda.sh -- perftest with CUDA for the VM's GPU runs
# (tests/vm/cases/perftest-cuda.sh, issue 34): Debian's perftest source
# (PERFTEST_PKGVER) built as validate.sh tells an admin to build it,
# `./configure CUDA_H_PATH=<cuda.h> && make` (the release tarball carries
# its configure: autogen.sh is for a git checkout), against the cuda.h of
# Debian's nvidia-cuda-dev (CUDA_DEV_PKGVER, non-free) and linked against
# the libcuda stand-in (tests/cuda-standin) as libcuda.so.1, which the VM
# case puts in front at run time.  Unmodified: no line of perftest changes.
#
# Cached under $CACHE/perftest-cuda-<versions>-r<BUILD_REV>/ (the
# binaries); the cuda.h alone under $CACHE/cuda-h-<version>/
# (the package is 0.9 GB, of which the bench needs that one header: it is
# downloaded once, the header kept, the package removed).  The sources come
# from the archive's pool with their SHA-256 from its signed Sources index
# (this mirror serves the source tarballs, not the .dsc).  Staged into
# <stage>/perftest-cuda/bin/, with the libcuda stand-in of this tree built
# into <stage>/perftest-cuda/lib/.
. "$(dirname "$0")/lib.sh"

# Bump when build() changes what it builds (the cache key).
BUILD_REV=1
D=$CACHE/perftest-cuda-$PERFTEST_PKGVER-$CUDA_DEV_PKGVER-r$BUILD_REV
H=$CACHE/cuda-h-$CUDA_DEV_PKGVER
A=/build/perftest-cuda-apt
apt_o="-o Dir::Etc::SourceList=$A/sources.list -o Dir::Etc::SourceParts=$A/parts -o Dir::State::Lists=$A/lists -o Dir::Cache=$A/cache"

# A private index of the archive's non-free binaries and main sources (the
# chroot's own lists stay as they are).
private_apt() {
  [ -z "${APT_DONE:-}" ] || return 0   # once per process: a fresh index
  rm -rf "$ROOT$A"; mkdir -p "$ROOT$A/lists/partial" "$ROOT$A/cache/archives/partial" "$ROOT$A/parts" "$ROOT$A/dl"
  printf 'deb %s %s non-free\ndeb-src %s %s main\n' "$(debian_mirror)" "$SUITE" "$(debian_mirror)" "$SUITE" > "$ROOT$A/sources.list"
  # shellcheck disable=SC2086 # a list of options
  in_root apt-get -q $apt_o update > /dev/null || die "apt-get update of $SUITE non-free and its sources failed"
  APT_DONE=1
}

# The pinned version of NAME, or a stop naming the newest on offer.
want_version() { # want_version madison|showsrc NAME VERSION
  local have
  # shellcheck disable=SC2086
  if [ "$1" = madison ]; then have=$(in_root apt-cache $apt_o madison "$2" | awk -F'|' '{gsub(/ /,"",$2); print $2}')
  else have=$(in_root apt-cache $apt_o showsrc "$2" | sed -nE 's/^Version: //p'); fi
  grep -qxF "$3" <<< "$have" ||
    die "pinned package $2=$3 is not in the archive; newest available: $(head -n1 <<< "$have"). Update it in tests/bench/versions.env."
}

cuda_h() {
  [ -f "$H/cuda.h" ] && return 0
  bench_lock "cuda-h-$CUDA_DEV_PKGVER"
  [ -f "$H/cuda.h" ] && return 0
  private_apt
  want_version madison nvidia-cuda-dev "$CUDA_DEV_PKGVER"
  log "nvidia-cuda-dev $CUDA_DEV_PKGVER: downloading (0.9 GB) for its cuda.h"
  # shellcheck disable=SC2086
  in_root sh -c "cd $A/dl && apt-get -q $apt_o -o APT::Sandbox::User=root download nvidia-cuda-dev=$CUDA_DEV_PKGVER" > /dev/null ||
    die "downloading nvidia-cuda-dev=$CUDA_DEV_PKGVER failed"
  rm -rf "$H.tmp"; mkdir -p "$H.tmp"
  dpkg-deb --fsys-tarfile "$ROOT$A"/dl/nvidia-cuda-dev_*.deb | nice tar -C "$H.tmp" -x ./usr/include/cuda.h ||
    die "nvidia-cuda-dev $CUDA_DEV_PKGVER has no /usr/include/cuda.h"
  rm -f "$ROOT$A"/dl/nvidia-cuda-dev_*.deb
  mv "$H.tmp/usr/include/cuda.h" "$H.tmp/cuda.h"; rm -rf "$H.tmp/usr"
  mv "$H.tmp" "$H"
}

# The source tarballs named by the Sources index, checked against it.
sources() { # sources DIR
  local f sum url list
  private_apt
  want_version showsrc perftest "$PERFTEST_PKGVER"
  # The orig tarball's line in the Checksums-Sha256 field of that version's
  # stanza.
  # shellcheck disable=SC2086
  list=$(in_root apt-cache $apt_o showsrc perftest | awk -v v="$PERFTEST_PKGVER" '
    /^Package:/ { ours = 0 } /^Version:/ { ours = ($2 == v) }
    /^Checksums-Sha256:/ { on = 1; next } /^[^ ]/ { on = 0 }
    ours && on && $3 ~ /\.orig\.tar\./ { print $1, $3 }' | sort -u)
  [ -n "$list" ] || die "perftest $PERFTEST_PKGVER: no orig tarball in the archive's Sources index"
  while read -r sum f; do
    url="$(debian_mirror)/pool/main/p/perftest/$f"
    curl -fsS -o "$1/$f" "$url" || die "downloading $url failed"
    echo "$sum  $1/$f" | sha256sum -c --quiet - || die "$f: not the checksum of the archive's Sources index"
  done <<< "$list"
}

build() {
  local B=/build/perftest-cuda
  bench_lock "perftest-cuda-r$BUILD_REV"
  [ -f "$D/.complete" ] && return 0
  cuda_h
  rm -rf "$ROOT$B" "$D"; mkdir -p "$ROOT$B/dl" "$ROOT$B/cuda" "$D/bin"
  log "perftest $PERFTEST_PKGVER: building with CUDA (cuda.h of nvidia-cuda-dev $CUDA_DEV_PKGVER)"
  sources "$ROOT$B/dl"
  tar -C "$ROOT$B" -xzf "$ROOT$B"/dl/perftest_*.orig.tar.gz
  local src; src=$(cd "$ROOT$B" && for d in perftest-*/; do echo "${d%/}"; break; done); src=$B/$src
  cp "$H/cuda.h" "$ROOT$B/cuda/"
  # The stand-in is what configure's checks link against (-lcuda).
  rsync -a "$TOP/tests/cuda-standin" "$TOP/tests/sim" "$ROOT$B/"
  in_root bash "$B/cuda-standin/build.sh" "$B/cuda" > /dev/null || die "building the libcuda stand-in failed"
  in_root sh -c "cd $src && nice ./configure -q CUDA_H_PATH=$B/cuda/cuda.h LDFLAGS=-L$B/cuda > $B/configure.log 2>&1 &&
    nice make -j2 > $B/make.log 2>&1" || { tail -30 "$ROOT$B/configure.log" "$ROOT$B/make.log" 2> /dev/null; die "perftest: the build with CUDA failed"; }
  grep -qx '#define HAVE_CUDA 1' "$ROOT$src/config.h" || die "perftest: configure did not enable CUDA"
  local help; help=$(in_root env LD_LIBRARY_PATH=$B/cuda "$src/ib_write_bw" --help 2>&1 || true)
  grep -q -- --use_cuda <<< "$help" || die "perftest: the build has no --use_cuda"
  local t
  for t in ib_write_bw ib_read_bw ib_send_bw; do cp "$ROOT$src/$t" "$D/bin/"; done
  rm -rf "$ROOT$B"
  touch "$D/.complete"
  log "perftest $PERFTEST_PKGVER with CUDA cached in $D"
}

[ -f "$D/.complete" ] || build
S=$ROOT$STAGE/perftest-cuda
rm -rf "$S"; mkdir -p "$S/src/tests/sim"
cp -r "$D/bin" "$S/"
# The stand-in from this tree, built here (a compile under TCG takes the
# VM seconds per case).
cp -r "$TOP/tests/cuda-standin" "$S/src/tests/"; cp -r "$TOP/tests/sim/include" "$S/src/tests/sim/"
in_root bash "$STAGE/perftest-cuda/src/tests/cuda-standin/build.sh" "$STAGE/perftest-cuda/lib" > /dev/null ||
  die "building the libcuda stand-in failed"
echo "perftest-cuda: $PERFTEST_PKGVER, CUDA $CUDA_DEV_PKGVER's cuda.h ($D)"
