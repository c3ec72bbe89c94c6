#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# scripts/check-kernel.sh -- can peermem-rs be built for this kernel?
#
#   check-kernel.sh [--make-vars] KDIR [KVER]
#
# Checks, in this order, and stops at the first failure with ONE line on
# stderr that says what is wrong and what to install on the distribution it
# detects (Ubuntu, Debian, RHEL-like, other), exit 77 ("skip", as DKMS's
# BUILD_EXCLUSIVE); before any compiler runs:
#   1. KDIR is a kernel build tree (.config);
#   2. the kernel has CONFIG_RUST=y;
#   3. the build tree has the Rust metadata (rust/libkernel.rmeta, ...);
#   4. a host rustc whose `--version` is exactly the kernel's
#      CONFIG_RUSTC_VERSION_TEXT (`rustc`, or Ubuntu's versioned `rustc-1.NN`);
#   5. bindgen (the module generates its bindings at build time).
# With --make-vars it prints the make variables that select the matching
# tools (e.g. "RUSTC=rustc-1.85 BINDGEN=bindgen"), for the Makefile.
# Used by dkms.conf, its PRE_BUILD and the Makefile's `modules` target.
# PEERMEM_OS_RELEASE overrides /etc/os-release, PEERMEM_APT /etc/apt and
# PEERMEM_ARCH the Debian architecture (tests).
set -euo pipefail

make_vars=no
[ "${1:-}" = --make-vars ] && { make_vars=yes; shift; }
[ $# -ge 1 ] || { echo "usage: check-kernel.sh [--make-vars] KDIR [KVER]" >&2; exit 2; }
KDIR=$1
KVER=${2:-}
[ -n "$KVER" ] || KVER=$(sed -nE 's/^#define UTS_RELEASE "(.*)"/\1/p' "$KDIR/include/generated/utsrelease.h" 2>/dev/null || true)
[ -n "$KVER" ] || KVER=$(basename "$(readlink -f "$KDIR")")

# The distribution family: ubuntu, debian, rhel, arch or other.
distro() {
  local id="" like="" f=${PEERMEM_OS_RELEASE:-/etc/os-release}
  if [ -r "$f" ]; then
    id=$(sed -nE 's/^ID="?([^"]*)"?$/\1/p' "$f")
    like=$(sed -nE 's/^ID_LIKE="?([^"]*)"?$/\1/p' "$f")
  fi
  case " $id $like " in
    *" ubuntu "*) echo ubuntu;;
    *" debian "*) echo debian;;
    *" rhel "*|*" fedora "*|*" centos "*) echo rhel;;
    *" arch "*) echo arch;;
    *) echo other;;
  esac
}
DISTRO=$(distro)

# backports_remedy -- the commands (as root) that install Debian's backports
# kernel, adding the backports source first unless apt already has one; the
# same commands as README "Debian trixie". The source is derived from the
# host's own deb822 entry (its mirror), so no mirror is named here.
# PEERMEM_APT overrides /etc/apt (tests).
backports_remedy() {
  local cn arch apt=${PEERMEM_APT:-/etc/apt} add
  cn=$(. "${PEERMEM_OS_RELEASE:-/etc/os-release}" 2>/dev/null; echo "${VERSION_CODENAME:-trixie}")
  arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
  if grep -rqs -- "$cn-backports" "$apt/sources.list" "$apt/sources.list.d"; then
    add=
  elif [ -f "$apt/sources.list.d/debian.sources" ]; then
    add="first add the $cn-backports source from your mirror's entry: awk -v RS= '!/security/ {print; exit}' /etc/apt/sources.list.d/debian.sources | sed 's/^Suites:.*/Suites: $cn-backports/' > /etc/apt/sources.list.d/$cn-backports.sources && apt update; then: "
  else
    add="first add the $cn-backports source from your mirror's line: grep -m1 '^deb [^ ]* $cn main' /etc/apt/sources.list | sed 's/ $cn main/ $cn-backports main/' > /etc/apt/sources.list.d/$cn-backports.list && apt update; then: "
  fi
  echo "${add}apt install -t $cn-backports linux-image-$arch linux-headers-$arch"
}

fail() { # fail PROBLEM REMEDY -- the one line, then exit 77
  echo "peermem-rs: kernel $KVER: $1; $2" >&2
  exit 77
}

config=$KDIR/.config
# 1. A build tree.
if [ ! -f "$config" ]; then
  case $DISTRO in
    ubuntu|debian) r="install its headers: apt install linux-headers-$KVER";;
    rhel) r="install its headers: dnf install kernel-devel-$KVER";;
    arch) r="install its headers: pacman -S linux-headers";;
    *) r="install the headers (build tree) of that kernel";;
  esac
  fail "no kernel build tree at $KDIR" "$r"
fi

# The release's version (os-release VERSION_ID), and its major number; or empty.
os_version() { (VERSION_ID=; . "${PEERMEM_OS_RELEASE:-/etc/os-release}" 2>/dev/null; echo "${VERSION_ID:-}"); }
os_major() { local v; v=$(os_version); echo "${v%%.*}"; }
# The Debian architecture (amd64, arm64, ...).
deb_arch() { echo "${PEERMEM_ARCH:-$(dpkg --print-architecture 2>/dev/null || echo amd64)}"; }

# ubuntu_kernel_remedy -- the Ubuntu kernel to boot (README "Ubuntu 26.04",
# "Ubuntu 24.04"). Ubuntu publishes the generic kernels' Rust metadata,
# linux-lib-rust-<version>-generic, for amd64 only (noble's and resolute's
# package metadata, checked 2026-11-29).
ubuntu_kernel_remedy() {
  local a; a=$(deb_arch)
  if [ "$a" != amd64 ]; then
    echo "Ubuntu builds the generic kernels' Rust metadata (linux-lib-rust-<version>-generic) for amd64 only: Ubuntu's generic kernels give no route on $a; use an amd64 host"
  elif [ "$(os_version)" = 24.04 ]; then
    echo "on 24.04 boot the 7.0 HWE kernel (apt install linux-generic-hwe-24.04, then reboot into it); its Rust metadata is the package linux-lib-rust-<version>"
  else
    echo "boot a kernel with CONFIG_RUST=y: Ubuntu 26.04's generic kernel (apt install linux-generic), on 24.04 the 7.0 HWE kernel (apt install linux-generic-hwe-24.04), or NVIDIA's linux-nvidia kernels where their config has it (grep '^CONFIG_RUST=y' /boot/config-<version>); such kernels have a linux-lib-rust-<version> package"
  fi
}

# debian_kernel_remedy PREFIX -- the kernel to install on Debian: on 13,
# PREFIX and its backports kernel; before 13, whose kernels (backports
# included) all have Rust off, Debian 13 and its backports kernel.
debian_kernel_remedy() {
  local a
  a=$(dpkg --print-architecture 2>/dev/null || echo amd64)
  if [ -n "$(os_major)" ] && [ "$(os_major)" -lt 13 ] 2>/dev/null; then
    echo "no Debian $(os_major) kernel, backports included, has Rust on: upgrade to Debian 13 (trixie) and install its backports kernel (README \"Debian trixie\"): apt install -t trixie-backports linux-image-$a linux-headers-$a"
  else
    echo "$1$(backports_remedy)"
  fi
}

# 2. CONFIG_RUST.
if ! grep -q '^CONFIG_RUST=y' "$config"; then
  case $DISTRO in
    # Ubuntu 26.04's generic 7.0 kernel and 24.04's 7.0 HWE kernel have Rust
    # on, with linux-lib-rust-<version> packages (amd64).
    ubuntu) r=$(ubuntu_kernel_remedy);;
    # Debian 12's kernels, bookworm-backports' included, have Rust off:
    # only Debian 13's backports kernels (7.x) have it.
    debian) r=$(debian_kernel_remedy "Debian's stable kernels have Rust off: install the backports kernel, ");;
    rhel) r="RHEL-like distribution kernels are built without CONFIG_RUST: a Rust module needs a kernel built with CONFIG_RUST=y";;
    *) r="a Rust module needs a kernel built with CONFIG_RUST=y";;
  esac
  fail "CONFIG_RUST is not set: this kernel cannot load Rust modules" "$r"
fi

# 2b. A kernel crate the module can build against: Linux 6.19 or later
# (rust/compat.rs, docs/facts/kernel-crate-versions.md).  The version from
# the tree's Makefile (VERSION, PATCHLEVEL), else from KVER.
kv=$(sed -nE 's/^VERSION = ([0-9]+)$/\1/p; s/^PATCHLEVEL = ([0-9]+)$/.\1/p' "$KDIR/Makefile" 2>/dev/null | tr -d '\n' || true)
case $kv in [0-9]*.[0-9]*) ;; *) kv=$(echo "$KVER" | sed -nE 's/^([0-9]+\.[0-9]+).*/\1/p');; esac
if [ -n "$kv" ] && { [ "${kv%%.*}" -lt 6 ] || { [ "${kv%%.*}" = 6 ] && [ "${kv#*.}" -lt 19 ]; }; } 2>/dev/null; then
  case $DISTRO in
    ubuntu) r=$(ubuntu_kernel_remedy);;
    debian) r=$(debian_kernel_remedy "install the backports kernel, ");;
    *) r="use a kernel of Linux 6.19 or later built with CONFIG_RUST=y";;
  esac
  fail "Linux $kv: peermem-rs needs the kernel crate of Linux 6.19 or later (core::ffi::CStr)" "$r"
fi

# 3. The Rust metadata of the kernel crates.
missing=
for f in rust/libcore.rmeta rust/libkernel.rmeta rust/libmacros.so; do
  [ -e "$KDIR/$f" ] || { missing=$f; break; }
done
if [ -n "$missing" ]; then
  case $DISTRO in
    # Ubuntu builds the generic kernels' metadata for amd64 only.
    ubuntu) case $(deb_arch)/$KVER in
              amd64/*) r="apt install linux-lib-rust-$KVER";;
              */*-generic|*/*-generic-64k) r="Ubuntu builds linux-lib-rust-<version>-generic for amd64 only: no package has this kernel's Rust metadata on $(deb_arch); use an amd64 host";;
              *) r="apt install linux-lib-rust-$KVER";;
            esac;;
    # The one command that ends it (about 4 minutes on 2 cores, ~2 GB in
    # /var/tmp): under DKMS (a kernel upgrade runs this through DKMS's
    # /etc/kernel/postinst.d hook) the rebuild and the module's build; from
    # the source tree the rebuild, then make again.
    debian) if [ $make_vars = yes ]; then
              r="Debian's headers lack it: rebuild it (about 4 minutes) with: make rust-metadata KDIR=$KDIR (or peermem-rust-metadata $KVER), then make again"
            else
              r="Debian's headers lack it: run as root (about 4 minutes): peermem-rust-metadata $KVER && dkms autoinstall -k $KVER"
            fi;;
    arch) r="reinstall the kernel's headers package (Arch ships the metadata in it when Rust is on)";;
    *) r="install the package with the kernel's rust/*.rmeta, or rebuild it (make modules_prepare in the kernel's source with its .config and rustc)";;
  esac
  fail "the build tree has no Rust metadata ($KDIR/$missing missing)" "$r"
fi

# 4. The exact rustc.
want=$(sed -nE 's/^CONFIG_RUSTC_VERSION_TEXT="(.*)"$/\1/p' "$config")
if [ -z "$want" ]; then # kernels before 6.12: only the number
  n=$(sed -nE 's/^CONFIG_RUSTC_VERSION=([0-9]+)$/\1/p' "$config")
  [ -n "$n" ] && want="rustc $((n / 10000)).$((n / 100 % 100)).$((n % 100))"
fi
[ -n "$want" ] || fail "its .config names no rustc (CONFIG_RUSTC_VERSION_TEXT)" "use the build tree the kernel was built in"
minor=$(echo "$want" | sed -nE 's/^rustc ([0-9]+\.[0-9]+)\..*/\1/p')
rustc=; seen=
for c in ${RUSTC:-} rustc ${minor:+rustc-$minor}; do
  command -v "$c" > /dev/null 2>&1 || continue
  v=$("$c" --version 2>/dev/null || true)
  case "$want" in
    *"("*) [ "$v" = "$want" ] && { rustc=$c; break; };;
    *) case "$v" in "$want"|"$want "*) rustc=$c; break;; esac;;
  esac
  seen=${seen:-$c: $v}
done
if [ -z "$rustc" ]; then
  case $DISTRO in
    ubuntu) r="apt install rustc-$minor";;
    debian) r="install the rustc of the Debian release the kernel comes from (apt install rustc=<that version>; $want)";;
    *) r="install exactly that rustc (e.g. rustup toolchain install ${want#rustc }) and build with RUSTC=<it>";;
  esac
  fail "the kernel was built with '$want' but the host has ${seen:-no rustc}" "$r"
fi

# 5. bindgen (generates the module's bindings; any version the kernel accepts).
bwant=$(sed -nE 's/^CONFIG_BINDGEN_VERSION_TEXT="bindgen (.*)"$/\1/p' "$config")
bindgen=
for c in ${BINDGEN:-} bindgen ${bwant:+bindgen-$(echo "$bwant" | cut -d. -f1,2)}; do
  command -v "$c" > /dev/null 2>&1 && { bindgen=$c; break; }
done
if [ -z "$bindgen" ]; then
  case $DISTRO in
    ubuntu) r="apt install bindgen libclang-dev";;
    debian) r="apt install bindgen libclang-dev";;
    rhel) r="dnf install bindgen clang-devel (or cargo install bindgen-cli)";;
    *) r="install bindgen${bwant:+ $bwant} and libclang";;
  esac
  fail "no bindgen on the host (the module generates its bindings at build time)" "$r"
fi

[ $make_vars = yes ] && echo "RUSTC=$rustc BINDGEN=$bindgen"
exit 0
