#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# scripts/provider-symvers.sh -- the Module.symvers of peermem-rs's two
# providers (README "Binding"), so that the module is built against their
# symbol versions (CRCs) instead of weak, unversioned references.
#
#   provider-symvers.sh find KVER      the files for kernel KVER, on one line
#                                      (none found: an empty line, exit 0)
#   provider-symvers.sh classify FILE...   "core:FILE" and/or "nvidia:FILE"
#                                      per file (for Kbuild); a bad file: one
#                                      line on stderr, exit 1
#
# `find` looks, for exactly KVER (never the running kernel), in:
#   RDMA core (DOCA-OFED/MLNX_OFED): /usr/src/ofa_kernel/<arch>/KVER/Module.symvers,
#     or /usr/src/ofa_kernel/default/Module.symvers when `default` resolves
#     to a directory named KVER (older MLNX_OFED);
#   NVIDIA driver: its DKMS tree /var/lib/dkms/nvidia*/<ver>/KVER/<arch>/...,
#     then a source or DKMS build tree (/usr/src/nvidia-<ver>[/kernel-open],
#     /var/lib/dkms/nvidia*/<ver>/build) whose nvidia.ko was built for KVER
#     (its vermagic); the newest driver version wins.
# A file counts only if it exports the provider's entry point
# (ib_register_peer_memory_client, nvidia_p2p_get_pages).
# PEERMEM_SYMVERS_ROOT prefixes every path searched (tests).
set -euo pipefail

die() { echo "peermem-rs: $*" >&2; exit 1; }
# exports FILE SYMBOL -- FILE is a Module.symvers that exports SYMBOL.
exports() { awk -v s="$2" '$2 == s { f = 1 } END { exit !f }' "$1" 2> /dev/null; }

case ${1:-} in
find)
  [ $# = 2 ] || die "usage: provider-symvers.sh find KVER"
  [ -n "$2" ] || die "no kernel release to look for provider Module.symvers for (make: PEERMEM_KVER=<kernel release>, or a KDIR with include/config/kernel.release)"
  KVER=$2 R=${PEERMEM_SYMVERS_ROOT:-}
  core=
  for f in "$R"/usr/src/ofa_kernel/*/"$KVER"/Module.symvers; do
    [ -f "$f" ] && exports "$f" ib_register_peer_memory_client && { core=$f; break; }
  done
  if [ -z "$core" ] && [ -f "$R/usr/src/ofa_kernel/default/Module.symvers" ]; then
    d=$(readlink -f "$R/usr/src/ofa_kernel/default")
    [ "${d##*/}" = "$KVER" ] && exports "$d/Module.symvers" ib_register_peer_memory_client && core=$d/Module.symvers
  fi
  # The NVIDIA driver's: "VERSION FILE" per candidate, the newest version last.
  nv=$(
    for f in "$R"/var/lib/dkms/nvidia*/*/"$KVER"/*/Module.symvers "$R"/var/lib/dkms/nvidia*/*/"$KVER"/*/*/Module.symvers; do
      [ -f "$f" ] || continue
      v=${f#"$R"/var/lib/dkms/nvidia*/}; echo "${v%%/*} $f"
    done
    for f in "$R"/usr/src/nvidia-*/Module.symvers "$R"/usr/src/nvidia-*/kernel-open/Module.symvers \
             "$R"/var/lib/dkms/nvidia*/*/build/Module.symvers; do
      [ -f "$f" ] || continue
      ko=${f%/Module.symvers}/nvidia.ko
      [ -f "$ko" ] || continue
      case " $(modinfo -F vermagic "$ko" 2> /dev/null) " in " $KVER "*) ;; *) continue;; esac
      case $f in
        "$R"/usr/src/nvidia-*) v=${f#"$R"/usr/src/nvidia-};;
        *) v=${f#"$R"/var/lib/dkms/nvidia*/};;
      esac
      echo "${v%%/*} $f"
    done | sort -V -k1,1
  )
  nvidia=
  while read -r _ f; do
    [ -n "$f" ] && exports "$f" nvidia_p2p_get_pages && nvidia=$f
  done <<< "$nv"
  out="$core $nvidia"; out=${out# }; echo "${out% }"
  ;;
classify)
  shift
  [ $# -ge 1 ] || die "usage: provider-symvers.sh classify FILE..."
  seen_core='' seen_nv='' out=''
  for f in "$@"; do
    case $f in /*) ;; *) die "PEERMEM_SYMVERS: $f is not an absolute path";; esac
    case $f in *[!A-Za-z0-9._/+@:,=-]*) die "PEERMEM_SYMVERS: '$f' has characters a build flag cannot carry (keep to A-Z a-z 0-9 . _ / + @ : , = -)";; esac
    [ -f "$f" ] || die "PEERMEM_SYMVERS: $f does not exist"
    [ -r "$f" ] || die "PEERMEM_SYMVERS: $f is not readable"
    what=
    if exports "$f" ib_register_peer_memory_client; then
      [ -z "$seen_core" ] || die "PEERMEM_SYMVERS: two peer-memory cores' symvers ($seen_core, $f): name one"
      seen_core=$f; what="core:$f"
    fi
    if exports "$f" nvidia_p2p_get_pages; then
      [ -z "$seen_nv" ] || die "PEERMEM_SYMVERS: two NVIDIA drivers' symvers ($seen_nv, $f): name one"
      seen_nv=$f; what="$what nvidia:$f"
    fi
    [ -n "$what" ] || die "PEERMEM_SYMVERS: $f exports neither ib_register_peer_memory_client nor nvidia_p2p_get_pages: not a provider's Module.symvers"
    out="$out${out:+ }${what# }"
  done
  echo "$out"
  ;;
*) die "usage: provider-symvers.sh find KVER | classify FILE...";;
esac
