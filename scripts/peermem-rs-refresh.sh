#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# peermem-rs-refresh -- keep the DKMS build of peermem-rs bound to the
# providers that will be loaded (README "Binding", "Upgrades").
#
#   peermem-rs-refresh [--check] [KVER...]
#
# For each kernel KVER (default: every kernel DKMS has peermem-rs installed
# for), scripts/provider-symvers.sh check compares the symbol versions
# (CRCs) the installed nvidia_peermem was built against with those of the
# provider modules modprobe loads for KVER now (an NVIDIA driver or
# DOCA-OFED upgraded or installed after peermem-rs, by DKMS, by packages
# of prebuilt modules, or by hand).  A stale build is rebuilt and
# reinstalled through DKMS (dkms build --force, dkms install --force),
# before its next load.  One line per kernel that was stale.
#   --check    only say which kernels are stale; exit 1 if any is, or if
#              one cannot be told up to date: built for no kernel (for the
#              running one, when no KVER is given), no nvidia_peermem
#              installed, one that is not peermem-rs's, or a provider it
#              was built against no longer installed (so that
#              `--check && modprobe nvidia_peermem` loads only an up-to-date
#              peermem-rs)
#   --trigger  run by the package's dpkg trigger (a provider's modules or
#              sources changed): never fails, silent when nothing is stale;
#              a provider removed is said, with the command that brings it
#              back (a rebuild cannot); and a kernel that has its Rust
#              metadata now (Ubuntu's linux-lib-rust-<kver>, installed after
#              the kernel) and no peermem-rs build gets one
# Exit: 0 nothing stale (or all rebuilt), 1 stale or not known to be up to
# date (--check; a provider removed), installed for no kernel, or a rebuild
# failed, 2 usage.
set -uo pipefail
VERSION=@VERSION@
[ "$VERSION" != "@VERSION@" ] || VERSION=$(cat "$(dirname "$0")/../VERSION")
# provider-symvers.sh: beside this script in a source tree, else in the
# sources DKMS builds from.
PS=$(dirname "$0")/provider-symvers.sh
[ -x "$PS" ] || PS=/usr/src/peermem-rs-$VERSION/scripts/provider-symvers.sh
mode=refresh
case ${1:-} in --check) mode=check; shift;; --trigger) mode=trigger; shift;; -h|--help) sed -n '3,/^set /{/^#/p}' "$0"; exit 0;; -*) echo "usage: peermem-rs-refresh [--check | --trigger] [KVER...]" >&2; exit 2;; esac
command -v dkms > /dev/null || { [ $mode = trigger ] && exit 0; echo "peermem-rs-refresh: dkms is not installed: nothing to refresh (a build from source is rebuilt with make)" >&2; exit 2; }
[ -x "$PS" ] || { [ $mode = trigger ] && exit 0; echo "peermem-rs-refresh: $PS not found: is peermem-rs $VERSION installed?" >&2; exit 2; }
kernels=("$@")
rc=0
# new_metadata -- (--trigger) build for each kernel that DKMS has not built
# peermem-rs for and whose build tree has its Rust metadata now.  On
# Ubuntu that metadata is a package of its own per kernel
# (linux-lib-rust-<kver>), which no metapackage pulls in: a kernel update
# comes without it, DKMS's kernel hook skips peermem-rs with the one
# command (check-kernel.sh: apt install linux-lib-rust-<kver>), and this
# trigger (interest in /usr/src, where that package unpacks) builds it
# when that command has run.  Only metadata that arrived after peermem-rs
# was installed (its change time, which dpkg sets when it unpacks, against
# that of peermem-rs's dkms.conf): the kernels there before were DKMS's to
# build at our install, and said why not then.  One attempt per metadata
# file: a build that fails for another reason is not retried by every
# later trigger.
new_metadata() {
  local b k meta stamp tried ours
  ours=$(stat -c %Z "/usr/src/peermem-rs-$VERSION/dkms.conf" 2> /dev/null) || return 0
  for b in /lib/modules/*/build; do
    k=${b%/build}; k=${k##*/}
    meta=$b/rust/libcore.rmeta
    [ -f "$meta" ] || continue
    stamp=$(stat -L -c %Z "$meta" 2> /dev/null) || continue
    [ "$stamp" -gt "$ours" ] || continue
    dkms status -m peermem-rs -v "$VERSION" -k "$k" 2> /dev/null | grep -q ': installed' && continue
    # (The package's state directory, which its purge removes.)
    tried=/var/lib/peermem-rs/metadata-tried-$k
    [ "$(cat "$tried" 2> /dev/null)" = "$stamp" ] && continue
    { mkdir -p /var/lib/peermem-rs && echo "$stamp" > "$tried"; } 2> /dev/null
    echo "peermem-rs: $k: its Rust metadata is installed now: building peermem-rs $VERSION (dkms install; about a minute)"
    if dkms install -m peermem-rs -v "$VERSION" -k "$k" > /dev/null 2>&1; then
      echo "peermem-rs: $k: built: $(modinfo -k "$k" -F binding nvidia_peermem 2> /dev/null)"
    else
      echo "peermem-rs: $k: not built: dkms install -m peermem-rs -v $VERSION -k $k says why"
    fi
  done
}
if [ ${#kernels[@]} = 0 ]; then
  mapfile -t kernels < <(dkms status -m peermem-rs -v "$VERSION" 2> /dev/null |
    sed -nE 's/^peermem-rs\/[^,]+, ([^,]+), [^:]+: installed.*/\1/p' | sort -u)
  if [ ${#kernels[@]} = 0 ]; then
    [ $mode = trigger ] && { new_metadata; exit 0; }
    echo "peermem-rs: $VERSION is installed for no kernel (dkms status -m peermem-rs): dkms install -m peermem-rs -v $VERSION -k \$(uname -r) says why" >&2
    exit 1
  fi
  running=$(uname -r)
  if [ $mode = check ] && ! printf '%s\n' "${kernels[@]}" | grep -qxF -- "$running"; then
    echo "peermem-rs: $running (running): peermem-rs $VERSION is not installed for it (dkms install -m peermem-rs -v $VERSION -k $running says why)"; rc=1
  fi
fi
for k in "${kernels[@]}"; do
  ko=$(modinfo -k "$k" -n nvidia_peermem 2> /dev/null) || {
    [ $mode = trigger ] || echo "peermem-rs: $k: no nvidia_peermem installed for it"
    [ $mode = check ] && rc=1; continue; }
  why=$("$PS" check "$k" "$ko" 2>&1); st=$?
  case $st in
    0) [ $mode = trigger ] || echo "peermem-rs: $k: up to date with its providers";;
    1)
      echo "peermem-rs: $k: stale: $(head -n1 <<< "$why")"
      if [ $mode = check ]; then rc=1; continue; fi
      echo "peermem-rs: $k: rebuilding peermem-rs $VERSION (dkms build --force; about a minute)"
      if dkms build -m peermem-rs -v "$VERSION" -k "$k" --force > /dev/null 2>&1 &&
         dkms install -m peermem-rs -v "$VERSION" -k "$k" --force > /dev/null 2>&1; then
        if "$PS" check "$k" > /dev/null 2>&1; then
          echo "peermem-rs: $k: rebuilt: $(modinfo -k "$k" -F binding nvidia_peermem 2> /dev/null)"
        else
          echo "peermem-rs: $k: rebuilt, but still not bound to the installed providers: $("$PS" check "$k" 2>&1 | head -n1)"; rc=1
        fi
      else
        echo "peermem-rs: $k: the rebuild failed: see /var/lib/dkms/peermem-rs/$VERSION/build/make.log, or run: dkms build -m peermem-rs -v $VERSION -k $k --force"; rc=1
      fi;;
    3) # A provider it was built against is gone: a rebuild cannot bring
       # it back.  Said in every mode (the purge's trigger prints it).
       while read -r l; do echo "peermem-rs: $k: $l"; done <<< "$why"
       [ $mode = trigger ] || rc=1;;
    *) [ $mode = trigger ] || echo "peermem-rs: $k: cannot tell: $why"
       [ $mode = check ] && rc=1;;
  esac
done
[ $mode = trigger ] && { new_metadata; exit 0; }
exit $rc
