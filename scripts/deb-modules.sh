#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# scripts/deb-modules.sh -- build once, deploy to a fleet (README "For a
# fleet"): peermem-rs built on this builder for one kernel, bound to the
# providers installed here for it, signed with the site's key, as a binary
# package per kernel (as Ubuntu's linux-modules-nvidia-* are):
# build/deb/peermem-rs-modules-KVER_<version>_<arch>.deb.  Nodes install it
# with no Rust toolchain, bindgen, headers or Rust metadata.
#
#   make deb-modules KVER=<kernel> SIGN_KEY=<key.pem> SIGN_CERT=<cert.pem|.der>
#   make deb-modules KVER=<kernel> SIGN=none        (unsigned: no Secure Boot node loads it)
#
# KDIR (default /lib/modules/KVER/build), PEERMEM_SYMVERS (README
# "Binding"; unset: the providers modprobe loads for KVER here), SIGN_HASH
# (default: the kernel's CONFIG_MODULE_SIG_HASH, else sha256), SIGN_FILE
# (default: KDIR's scripts/sign-file, else the newest linux-kbuild's),
# KERNEL_PKG ("NAME (= VERSION)", or none; default: the package that owns
# KVER's modules here, pinned to its version), PKG_VERSION (default
# <peermem version>+<UTC date and time>: a later build upgrades an earlier
# one), OUT (default build/deb).
# The package refuses to install where the providers modprobe loads for
# KVER export other CRCs than the builder's (its preinst; README).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "make deb-modules: $*" >&2; exit 1; }
KVER=${KVER:-${1:-}}
[ -n "$KVER" ] || die "KVER is not set: make deb-modules KVER=<kernel release> (e.g. KVER=\$(uname -r))"
case $KVER in *[!a-z0-9.+-]*) die "KVER=$KVER: a package name cannot carry it (lower-case letters, digits, . + - only)";; esac
KDIR=${KDIR:-/lib/modules/$KVER/build}
[ -f "$KDIR/.config" ] || die "no build tree for $KVER at $KDIR (install its headers, or KDIR=...)"
VERSION=$(cat "$TOP/VERSION")
PKG=peermem-rs-modules-$KVER
OUT=$(mkdir -p "${OUT:-$TOP/build/deb}" && cd "${OUT:-$TOP/build/deb}" && pwd)
W=$TOP/build/deb-modules/$KVER
for t in dpkg-buildpackage dh modinfo modprobe; do
  command -v $t > /dev/null || die "$t not found: apt install dpkg-dev debhelper kmod"
done

# --- the site's key, checked before anything is built ----------------------
SIGN=${SIGN:-}
if [ "$SIGN" = none ]; then
  signed="unsigned"
else
  if [ -z "${SIGN_KEY:-}" ] || [ -z "${SIGN_CERT:-}" ]; then
    die "SIGN_KEY and SIGN_CERT are not both set: name the site's module signing key and its certificate (the one enrolled in the nodes' MOK or kernel keyring), e.g. SIGN_KEY=/root/mok/MOK.priv SIGN_CERT=/root/mok/MOK.der; SIGN=none builds it unsigned"
  fi
  [ -r "$SIGN_KEY" ] || die "SIGN_KEY=$SIGN_KEY: no such readable file"
  [ -r "$SIGN_CERT" ] || die "SIGN_CERT=$SIGN_CERT: no such readable file"
  SIGN_FILE=${SIGN_FILE:-$KDIR/scripts/sign-file}
  if [ ! -x "$SIGN_FILE" ]; then
    SIGN_FILE=$(find /usr/lib/linux-kbuild-* -path '*/scripts/sign-file' 2> /dev/null | sort -V | tail -n1 || true)
  fi
  if [ -z "$SIGN_FILE" ] || [ ! -x "$SIGN_FILE" ]; then
    die "no sign-file: not in $KDIR/scripts nor any /usr/lib/linux-kbuild-*/scripts (apt install linux-kbuild-<version>, or SIGN_FILE=...)"
  fi
  SIGN_HASH=${SIGN_HASH:-$(sed -nE 's/^CONFIG_MODULE_SIG_HASH="(.*)"/\1/p' "$KDIR/.config")}
  SIGN_HASH=${SIGN_HASH:-sha256}
  signed="signed with the site's key"
fi

# --- build, from the files DKMS would build from ---------------------------
echo "make deb-modules: building peermem-rs $VERSION for $KVER ($KDIR)"
rm -rf "$W"; mkdir -p "$W/src" "$W/pkg/debian"
make -s -C "$TOP" install-files DESTDIR="$W/stage" > /dev/null
cp -a "$W/stage/usr/src/peermem-rs-$VERSION/." "$W/src/"
rm -rf "$W/stage"
make -C "$W/src" KDIR="$KDIR" PEERMEM_KVER="$KVER" PEERMEM_NAME=nvidia_peermem modules
KO=$W/src/nvidia_peermem.ko
[ -f "$KO" ] || die "the build made no $KO"
vm=$(modinfo -F vermagic "$KO")
case "$vm " in "$KVER "*) ;; *) die "$KO is for '$vm', not $KVER";; esac
binding=$(modinfo -F binding "$KO")
case $binding in
  weak:*) die "the build is not bound to the providers ($binding): install the NVIDIA driver and DOCA-OFED for $KVER on this builder (the nodes' versions), or name their Module.symvers with PEERMEM_SYMVERS=...; a package without them could not check a node's providers";;
esac

# --- sign ------------------------------------------------------------------
if [ "$SIGN" != none ]; then
  "$SIGN_FILE" "$SIGN_HASH" "$SIGN_KEY" "$SIGN_CERT" "$KO" || die "$SIGN_FILE $SIGN_HASH $SIGN_KEY $SIGN_CERT failed"
  signer=$(modinfo -F signer "$KO")
  [ -n "$signer" ] || die "$KO carries no signature after sign-file"
  signed="signed by '$signer' ($SIGN_HASH)"
  echo "make deb-modules: $signed"
fi

# --- what the node's preinst checks: the CRCs it was built against ---------
{
  echo "module $PKG"
  echo "binding $binding"
  modprobe --dump-modversions "$KO" 2> /dev/null |
    grep -E $'\t(ib_(un)?register_peer_memory_client|nvidia_p2p_[a-z_]+)$' || true
} > "$W/pkg/providers.versions"

# --- the kernel it is for: its package, at this version --------------------
if [ -z "${KERNEL_PKG:-}" ]; then
  # shellcheck disable=SC2016 # dpkg-query's format
  KERNEL_PKG=$(for f in "/lib/modules/$KVER/modules.builtin" "/boot/vmlinuz-$KVER"; do
                 dpkg-query -S "$f" 2> /dev/null | head -n1 | cut -d: -f1; done | head -n1 |
               xargs -r dpkg-query -W -f '${Package} (= ${Version})' 2> /dev/null || true)
fi
case ${KERNEL_PKG:-none} in
  none) kdep=; echo "make deb-modules: no package owns $KVER's modules here: the package depends on no kernel package (KERNEL_PKG=\"NAME (= VERSION)\" names one)";;
  *) kdep=", $KERNEL_PKG"; echo "make deb-modules: depends on $KERNEL_PKG";;
esac

# --- the binary package (debhelper) -----------------------------------------
PKG_VERSION=${PKG_VERSION:-$VERSION+$(date -u ${SOURCE_DATE_EPOCH:+-d @$SOURCE_DATE_EPOCH} +%Y%m%d%H%M%S)}
ARCH=$(dpkg --print-architecture)
MAINT=$(sed -nE 's/^Maintainer: (.*)/\1/p' "$TOP/debian/control")
subst() { sed -e "s|@KVER@|$KVER|g" -e "s|@VERSION@|$VERSION|g" -e "s|@ARCH@|$ARCH|g" -e "s|@MAINTAINER@|$MAINT|g" \
              -e "s|@KERNEL_DEPENDS@|$kdep|g" -e "s|@SIGNED@|$signed|g" -e "s|@BINDING@|$binding|g" "$@"; }
D=$TOP/debian/modules
subst "$D/control.in" > "$W/pkg/debian/control"
subst "$D/rules.in" > "$W/pkg/debian/rules"; chmod 755 "$W/pkg/debian/rules"
for s in preinst postinst postrm triggers; do
  subst "$D/$s.in" | sed -e "/^@PROVIDER_SYMVERS@\$/{r $TOP/scripts/provider-symvers.sh" -e 'd}' \
                         -e "/^@VERSIONS@\$/{r $W/pkg/providers.versions" -e 'd}' > "$W/pkg/debian/$PKG.$s"
done
printf '%s (%s) unstable; urgency=medium\n\n  * Built by make deb-modules for %s, %s.\n    Binding: %s\n\n -- %s  %s\n' \
  "$PKG" "$PKG_VERSION" "$KVER" "$signed" "$binding" "$MAINT" "$(date -R ${SOURCE_DATE_EPOCH:+-d @$SOURCE_DATE_EPOCH})" > "$W/pkg/debian/changelog"
printf '# from %s: modprobe nvidia_peermem loads this build for %s, not an\n# nvidia-peermem.ko of the NVIDIA driver (in updates/dkms or the kernel tree).\noverride nvidia_peermem %s updates/peermem-rs\n' \
  "$PKG" "$KVER" "$KVER" > "$W/pkg/depmod.conf"
cp "$KO" "$W/pkg/nvidia_peermem.ko"; cp "$TOP/scripts/provider-symvers.sh" "$W/pkg/"
(cd "$W/pkg" && dpkg-buildpackage -b -us -uc > ../dpkg-buildpackage.log 2>&1) ||
  { tail -n 20 "$W/dpkg-buildpackage.log" >&2; die "dpkg-buildpackage failed (log: $W/dpkg-buildpackage.log)"; }
deb=${PKG}_${PKG_VERSION}_$ARCH.deb
mv "$W/$deb" "$OUT/"
echo "make deb-modules: $OUT/$deb ($binding)"
