#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# peermem-rust-metadata -- give a Debian kernel's headers the Rust metadata
# they lack, so that Rust modules (peermem-rs) can be built against them.
#
#   peermem-rust-metadata [KVER]                 (default: the running kernel)
#   peermem-rust-metadata --kdir /usr/src/linux-headers-KVER
#   peermem-rust-metadata --remove KVER          take the files out again
#   peermem-rust-metadata --remove-all           ... of every tree it wrote to
#   options: --workdir DIR (default /var/tmp), --no-install (never call apt-get),
#            --output DIR (write the metadata there instead of into the headers)
#
# Debian builds its kernels with CONFIG_RUST=y (trixie-backports) but its
# linux-headers package ships no rust/*.rmeta.  This rebuilds them the way the
# bench does (tests/bench/kernel-debian.sh): from the matching linux-source
# with Debian's .config and exactly the kernel's rustc (`make modules_prepare`),
# checks that the rebuilt crates export exactly the Rust symbols of Debian's
# Module.symvers, and lays rust/*.rmeta, rust/*.so and scripts/target.json
# over the headers tree.  The files belong to no package: --remove takes them
# out (purging the headers package leaves them).  scripts/target.json lands in
# the headers' scripts/ link, i.e. in linux-kbuild-X.Y, shared by the flavours
# of that version.  Needs root, ~2 GB in the workdir and a few minutes.
# The trees it wrote to are listed in /var/lib/peermem-rs/rust-metadata.trees
# (purging peermem-rs-dkms removes their files); the packages it installs
# are marked automatically installed (`apt autoremove` takes them away).
set -euo pipefail

die() { echo "peermem-rust-metadata: $*" >&2; exit 1; }
log() { echo "peermem-rust-metadata: $*" >&2; }

KVER='' KDIR='' WORK=/var/tmp OUT='' install=yes remove=no
while [ $# -gt 0 ]; do
  case $1 in
    --kdir) KDIR=$2; shift 2;;
    --workdir) WORK=$2; shift 2;;
    --output) OUT=$2; shift 2;;
    --no-install) install=no; shift;;
    --remove) remove=yes; shift;;
    --remove-all) remove=all; shift;;
    -h|--help) sed -n '3,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0;;
    -*) die "unknown option $1 (see --help)";;
    *) KVER=$1; shift;;
  esac
done
REGISTRY=${PEERMEM_STATE:-/var/lib/peermem-rs}/rust-metadata.trees
# remove_tree KDIR -- take out the files listed in KDIR/.peermem-rust-metadata.files.
remove_tree() {
  local f
  [ -f "$1/.peermem-rust-metadata.files" ] || return 0
  while read -r f; do [ -z "$f" ] || rm -f "$1/$f"; done < "$1/.peermem-rust-metadata.files"
  rm -f "$1/.peermem-rust-metadata.files"
  if [ -f "$REGISTRY" ]; then grep -vxF -- "$1" "$REGISTRY" > "$REGISTRY.new" || true; mv "$REGISTRY.new" "$REGISTRY"; fi
  log "Rust metadata removed from $1"
}
if [ $remove = all ]; then
  for d in $(cat "$REGISTRY" 2> /dev/null) /usr/src/linux-headers-*; do remove_tree "$d"; done
  rm -f "$REGISTRY"; rmdir "${REGISTRY%/*}" 2> /dev/null || true
  exit 0
fi
if [ -z "$KDIR" ]; then
  KVER=${KVER:-$(uname -r)}
  KDIR=/usr/src/linux-headers-$KVER
  [ -d "$KDIR" ] || KDIR=$(readlink -f "/lib/modules/$KVER/build" 2>/dev/null || echo "$KDIR")
fi
[ -f "$KDIR/.config" ] || die "no kernel headers at $KDIR (apt install linux-headers-${KVER:-<kernel>})"
KDIR=$(readlink -f "$KDIR")
[ -n "$KVER" ] || KVER=$(sed -nE 's/^override KERNELRELEASE = (.*)/\1/p' "$KDIR/.kernelvariables" 2>/dev/null || true)
[ -n "$KVER" ] || KVER=${KDIR##*/linux-headers-}
FILES_LIST=$KDIR/.peermem-rust-metadata.files

if [ $remove = yes ]; then
  [ -f "$FILES_LIST" ] || { log "$KVER: no metadata of ours in $KDIR"; exit 0; }
  remove_tree "$KDIR"
  exit 0
fi

config=$KDIR/.config
grep -q '^CONFIG_RUST=y' "$config" || die "$KVER has CONFIG_RUST off: no Rust module can load on it (Debian: install the backports kernel)"
want=$(sed -nE 's/^CONFIG_RUSTC_VERSION_TEXT="(.*)"/\1/p' "$config")
have=$(rustc --version 2>/dev/null || echo "no rustc")
[ "$want" = "$have" ] || die "$KVER was built with '$want' but rustc here is '$have': install that rustc and rust-src (apt install rustc=<version> rust-src=<version>)"

# The build variables Debian used (its headers' .kernelvariables): ARCH,
# CROSS_COMPILE and the compiler.
kv() { sed -nE "s/^(override )?$1 = (.*)/\\2/p" "$KDIR/.kernelvariables" 2>/dev/null | head -1; }
ARCH=$(kv ARCH); CROSS=$(kv CROSS_COMPILE)
CC=$(sed -nE 's/^CONFIG_CC_VERSION_TEXT="([^ ]+) .*/\1/p' "$config")
[ -n "$ARCH" ] || die "$KDIR/.kernelvariables names no ARCH: is this a Debian headers tree?"
series=$(echo "$KVER" | cut -d. -f1,2)
src=/usr/src/linux-source-$series.tar.xz
hdrpkg=$(dpkg-query -S "$KDIR/.config" 2>/dev/null | cut -d: -f1 || true)
pkgver=''
if [ -n "$hdrpkg" ]; then pkgver=$(dpkg-query -W -f '${Version}' "$hdrpkg" 2>/dev/null || true); fi

# What the build needs.  The exact rust-src matters: core is rebuilt from it.
ccpkg=$(echo "${CC:-gcc}" | sed -E 's/^([a-z0-9_]+-)*(gcc(-[0-9]+)?)$/\2/')
need="linux-source-$series${pkgver:+=$pkgver} rust-src bindgen libclang-dev make flex bison bc libelf-dev libssl-dev pahole python3 $ccpkg"
# at_installed PKG -- PKG, or PKG=VERSION where the candidate depends on an
# exact version of an installed library that is installed at another one:
# `apt install -t trixie-backports linux-image-amd64` brings backports'
# libelf1t64, and trixie's libelf-dev (= its own libelf1t64) would need a
# downgrade, which apt refuses.  The version of PKG that matches the
# installed library is taken instead, when the archive has it.
at_installed() {
  local dep want have
  case $1 in *=*) echo "$1"; return;; esac
  while read -r dep want; do
    have=$(dpkg-query -W -f '${Status} ${Version}' "$dep" 2>/dev/null | sed -n 's/^install ok installed //p' || true)
    if [ -z "$have" ] || [ "$have" = "$want" ]; then continue; fi
    if apt-cache madison "$1" 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF -- "$have"; then
      echo "$1=$have"; return
    fi
  done < <(apt-cache show --no-all-versions "$1" 2>/dev/null | sed -n 's/^Depends: //p' | tr ',' '\n' |
           sed -nE 's/^ *([^ :]+)(:any)? \(= ([^)]+)\).*/\1 \3/p')
  echo "$1"
}
missing='' new=''
for p in $need; do
  name=${p%%=*}
  case $name in linux-source-*) [ -f "$src" ] && continue;; esac
  dpkg-query -W -f '${Status}' "$name" 2>/dev/null | grep -q 'ok installed' ||
    { missing="$missing $(at_installed "$p")"; new="$new $name"; }
done
rs=$(dpkg-query -W -f '${Version}' rust-src 2>/dev/null || true)
rc=$(dpkg-query -W -f '${Version}' rustc 2>/dev/null || true)
[ -z "$rs" ] || [ "$rs" = "$rc" ] || missing="$missing rust-src=$rc"
if [ -n "$missing" ]; then
  [ $install = yes ] || die "missing packages:$missing (apt install$missing)"
  [ "$(id -u)" = 0 ] || die "missing packages:$missing; run as root, or apt install$missing first"
  log "installing:$missing"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing > /dev/null ||
    die "apt-get install$missing failed"
  # Only this rebuild needs them: automatically installed, not manual, so
  # that `apt autoremove` takes them away (the upgrade of an installed
  # rust-src keeps its mark).
  # shellcheck disable=SC2086
  [ -z "$new" ] || apt-mark auto $new > /dev/null || die "apt-mark auto$new failed"
fi
[ -f "$src" ] || die "$src missing after installing linux-source-$series"

B=$(mktemp -d "$WORK/peermem-rust-metadata.XXXXXX")
trap 'rm -rf "$B"' EXIT
log "$KVER: unpacking $src into $B"
tar -C "$B" -xf "$src"
S=$B/linux-source-$series O=$B/out
mkdir -p "$O"; cp "$config" "$O/.config"
MK=(make -C "$S" O="$O" -j"$(nproc)" ARCH="$ARCH" KERNELRELEASE="$KVER" ${CROSS:+CROSS_COMPILE=$CROSS} ${CC:+CC=$CC} ${CC:+HOSTCC=$CC})
"${MK[@]}" olddefconfig > /dev/null
cmp -s "$config" "$O/.config" || log "note: olddefconfig changed the .config (another pahole or compiler than Debian's?)"
log "$KVER: make modules_prepare (a few minutes)"
"${MK[@]}" modules_prepare > "$B/modules_prepare.log" 2>&1 ||
  { tail -20 "$B/modules_prepare.log" >&2; die "modules_prepare failed (log above)"; }

# The rebuilt crates must export exactly what Debian's kernel exports.
ours=$(sed -nE 's/^EXPORT_SYMBOL_RUST_GPL\((_R[A-Za-z0-9_]+)\);.*/\1/p' "$O"/rust/exports_*_generated.h | sort -u)
debian=$(awk '$2 ~ /^_R/ {print $2}' "$KDIR/Module.symvers" | sort -u)
if [ "$ours" != "$debian" ]; then
  comm -3 <(echo "$ours") <(echo "$debian") | head -5 >&2
  die "the rebuilt Rust crates export other symbols than $KVER: not the toolchain Debian used"
fi
log "$KVER: $(echo "$ours" | grep -c .) Rust exports identical to the kernel's Module.symvers"

files=$(cd "$O" && ls rust/*.rmeta rust/*.so; [ -f scripts/target.json ] && echo scripts/target.json)
DEST=${OUT:-$KDIR}
for f in $files; do install -D -m 644 "$O/$f" "$DEST/$f"; done
if [ -z "$OUT" ]; then
  echo "$files" > "$FILES_LIST"
  mkdir -p "${REGISTRY%/*}"
  grep -qxF -- "$KDIR" "$REGISTRY" 2> /dev/null || echo "$KDIR" >> "$REGISTRY"
fi
log "$KVER: Rust metadata installed in $DEST ($(echo "$files" | wc -l) files)"
