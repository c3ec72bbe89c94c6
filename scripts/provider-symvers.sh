#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# scripts/provider-symvers.sh -- the symbol versions (CRCs) of peermem-rs's
# two providers, the peer-memory core and the NVIDIA driver (README
# "Binding"), so that the module is built against the providers that will
# be loaded for a kernel instead of weak, unversioned references.
#
#   provider-symvers.sh find KVER      the Module.symvers files for kernel KVER,
#                                      generated ones included, on one line
#                                      (none: an empty line, exit 0)
#   provider-symvers.sh explain KVER   per provider, one line: which module or
#                                      file its CRCs come from, and why
#   provider-symvers.sh check KVER [KO]  does KO (default: the nvidia_peermem
#                                      modprobe loads for KVER; or a FILE.versions,
#                                      what deb-modules.sh records of a build)
#                                      carry the CRCs
#                                      the installed providers export?  exit 0
#                                      yes, 1 no (one line per difference),
#                                      2 cannot tell (one line why), 3 a
#                                      provider KO was built against is no
#                                      longer installed for KVER (a line per
#                                      such provider: which, and the command
#                                      that brings it back; a rebuild would
#                                      not help)
#   provider-symvers.sh from-ko KO [NAME]  the Module.symvers lines of what the
#                                      module file KO (.ko, .ko.zst/.xz/.gz) exports
#   provider-symvers.sh classify FILE...   "core:FILE" and/or "nvidia:FILE"
#                                      per file (for Kbuild); a bad file: one
#                                      line on stderr, exit 1
#
# For each provider (the core: ib_register_peer_memory_client; the NVIDIA
# driver: nvidia_p2p_get_pages), `find` takes, for exactly KVER (never the
# running kernel):
#   1. the module modprobe would load for that symbol: depmod's
#      modules.symbols names it, modules.dep its file (depmod.d overrides
#      applied), e.g. Ubuntu's prebuilt, signed nvidia.ko.zst or
#      doca-ofed's ib_core.ko.zst, a DKMS build in updates/dkms, a .run
#      install in kernel/drivers/video.  Its CRCs are read from the file
#      (its __ksymtab and __kcrctab sections), and:
#      - the core exported by the kernel itself (NVIDIA's linux-nvidia
#        kernels build it into ib_uverbs) with the CRC of the kernel's own
#        Module.symvers: nothing to add, modpost reads that file anyway;
#      - a provider Module.symvers on disk for KVER (below) whose CRC of the
#        entry point is the module's: that file;
#      - otherwise a Module.symvers generated from the module, in
#        $PEERMEM_SYMVERS_OUT (default ./build/provider-symvers/KVER).
#   2. no such module installed for KVER (a provider built but not yet
#      installed): a provider Module.symvers for KVER on disk --
#      RDMA core (DOCA-OFED/MLNX_OFED): /usr/src/ofa_kernel/<arch>/KVER/Module.symvers,
#        or /usr/src/ofa_kernel/default/Module.symvers when `default` resolves
#        to a directory named KVER (older MLNX_OFED);
#      NVIDIA driver: its DKMS tree /var/lib/dkms/nvidia*/<ver>/KVER/<arch>/...,
#        then a source or DKMS build tree (/usr/src/nvidia-<ver>[/kernel-open],
#        /var/lib/dkms/nvidia*/<ver>/build) whose nvidia.ko was built for KVER
#        (its vermagic); the newest driver version wins.
# A file counts only if it exports the provider's entry point.
# PEERMEM_SYMVERS_ROOT prefixes every path searched (tests); PEERMEM_KDIR is
# the kernel's build tree (default /lib/modules/KVER/build).
set -euo pipefail

die() { echo "peermem-rs: $*" >&2; exit "${DIE_RC:-1}"; }
# exports FILE SYMBOL -- FILE is a Module.symvers that exports SYMBOL.
exports() { awk -v s="$2" '$2 == s { f = 1 } END { exit !f }' "$1" 2> /dev/null; }
# crc_in FILE SYMBOL -- SYMBOL's CRC in the Module.symvers FILE, as a number.
crc_in() { local c; c=$(awk -v s="$2" '$2 == s { print $1; exit }' "$1" 2> /dev/null); [ -n "$c" ] && echo $((c)); }
CORE_SYM=ib_register_peer_memory_client NV_SYM=nvidia_p2p_get_pages
# Every provider symbol the module imports (rust/glue.c).
PROVIDER_SYMS="ib_register_peer_memory_client ib_unregister_peer_memory_client nvidia_p2p_get_pages
  nvidia_p2p_put_pages nvidia_p2p_get_pages_persistent nvidia_p2p_put_pages_persistent
  nvidia_p2p_dma_map_pages nvidia_p2p_dma_unmap_pages"

# ko_symvers ELF NAME -- the Module.symvers lines of what the (uncompressed)
# module ELF exports.  Each export is an entry of __ksymtab (and, before
# Linux 6.15, of __ksymtab_gpl), whose first field is relocated against the
# exported symbol; the i-th entry's CRC is the i-th 32-bit word of
# __kcrctab (__kcrctab_gpl), both tables being sorted by symbol name by the
# modules' linker script; GPL-only is the table's name, or since 6.15 bit 0
# of the entry's byte in __kflagstab.  Without CONFIG_MODVERSIONS there is no
# __kcrctab: CRC 0, as modpost writes it then.
ko_symvers() {
  local f=$1 mod=$2 endian secs s t tabs=""
  endian=$(LC_ALL=C readelf -h "$f" 2> /dev/null | sed -nE 's/^ *Data: .*(little|big) endian.*/\1/p')
  [ -n "$endian" ] || { echo "peermem-rs: $f is not an ELF file" >&2; return 1; }
  secs=$(LC_ALL=C readelf -W -S "$f" | sed -nE 's/^ *\[ *([0-9]+)\] +([^ ]+) +[^ ]+ +[0-9a-f]+ +([0-9a-f]+) +([0-9a-f]+) .*/\1 \2 \3 \4/p')
  for s in __kcrctab __kcrctab_gpl __kflagstab; do
    t=$(awk -v s=$s '$2 == s { print $3, $4 }' <<< "$secs")
    [ -n "$t" ] || continue
    # shellcheck disable=SC2086 # "OFFSET SIZE"
    set -- $t
    tabs+="$s $(od -An -tx1 -v -j $((0x$1)) -N $((0x$2)) "$f" | tr -s ' \n' '  ')"$'\n'
  done
  {
    echo "#secs"; echo "$secs"
    echo "#tabs"; printf '%s' "$tabs"
    echo "#rels"; LC_ALL=C readelf -W -r "$f"
  } | awk -v endian="$endian" -v mod="$mod" '
    function hex(s,   i, v) { v = 0; s = tolower(s); for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1; return v }
    function u32(tab, i,   b0, b1, b2, b3) {
      b0 = byte[tab, 4 * i]; b1 = byte[tab, 4 * i + 1]; b2 = byte[tab, 4 * i + 2]; b3 = byte[tab, 4 * i + 3]
      return endian == "little" ? b3 b2 b1 b0 : b0 b1 b2 b3
    }
    /^#/ { part = $1; next }
    part == "#secs" { size[$2] = hex($4); next }
    part == "#tabs" { for (i = 2; i <= NF; i++) byte[$1, i - 2] = $i; next }
    part == "#rels" {
      if ($0 ~ /^Relocation section /) { cur = $3; gsub(/\047/, "", cur); sub(/^\.rela?/, "", cur); next }
      # Every field of an entry is relocated: the first (at a multiple of
      # the entry size) against the exported symbol, the others against
      # its strings (named __kstrtab*, or __ksymtab_strings + offset).
      if ((cur == "__ksymtab" || cur == "__ksymtab_gpl") && $1 ~ /^[0-9a-f]+$/ && NF >= 5) {
        o = hex($1); rel[cur, ++nrel[cur]] = o; name[cur, o] = $5
        if ($5 !~ /^__(kstrtab|ksymtab_strings)/) nsym[cur]++
      }
    }
    END {
      for (ti = 1; ti <= 2; ti++) {
        tab = ti == 1 ? "__ksymtab" : "__ksymtab_gpl"; crct = ti == 1 ? "__kcrctab" : "__kcrctab_gpl"
        if (!nrel[tab]) continue
        # The number of entries: from the tables of one element per entry,
        # else the relocations that name no string.
        n = ti == 1 && size["__kflagstab"] ? size["__kflagstab"] : (size[crct] ? size[crct] / 4 : nsym[tab])
        if (!n) continue
        es = size[tab] / n
        for (k = 1; k <= nrel[tab]; k++) {
          o = rel[tab, k]
          if (o % es) continue
          i = o / es
          gpl = ti == 2 || ((("__kflagstab", i) in byte) && hex(byte["__kflagstab", i]) % 2 == 1)
          crc = ((crct, 4 * i + 3) in byte) ? "0x" u32(crct, i) : "0x00000000"
          printf "%s\t%s\t%s\t%s\t\n", crc, name[tab, o], mod, gpl ? "EXPORT_SYMBOL_GPL" : "EXPORT_SYMBOL"
        }
      }
    }'
}
# from_ko FILE [NAME] -- ko_symvers of a module file, decompressed first.
from_ko() {
  local f=$1 name=${2:-} tmp tool rc=0
  [ -r "$f" ] || { echo "peermem-rs: $f: no such readable module file" >&2; return 1; }
  command -v readelf > /dev/null || { echo "peermem-rs: reading the CRCs of $f needs readelf (binutils)" >&2; return 1; }
  if [ -z "$name" ]; then name=${f##*/}; name=${name%.ko*}; fi
  case $f in
    *.ko) ko_symvers "$f" "$name"; return;;
    *.ko.zst) tool=zstd;; *.ko.xz) tool=xz;; *.ko.gz) tool=gzip;;
    *) echo "peermem-rs: $f: not a module file (.ko, .ko.zst, .ko.xz, .ko.gz)" >&2; return 1;;
  esac
  command -v $tool > /dev/null || { echo "peermem-rs: reading $f needs $tool (apt install $tool)" >&2; return 1; }
  tmp=$(mktemp)
  $tool -dcq < "$f" > "$tmp" 2> /dev/null || { rm -f "$tmp"; echo "peermem-rs: $f: $tool cannot decompress it" >&2; return 1; }
  ko_symvers "$tmp" "$name" || rc=$?
  rm -f "$tmp"
  return $rc
}

# installed_provider SYMBOL -- the module file modprobe would load for KVER
# to resolve SYMBOL (depmod's modules.symbols and modules.dep), or nothing.
installed_provider() {
  local md=$R/lib/modules/$KVER mod p
  [ -f "$md/modules.symbols" ] && [ -f "$md/modules.dep" ] || return 0
  mod=$(awk -v s="symbol:$1" '$1 == "alias" && $2 == s { print $3; exit }' "$md/modules.symbols")
  [ -n "$mod" ] || return 0
  p=$(awk -F: -v m="$mod" '{ b = $1; sub(/.*\//, "", b); sub(/\.ko(\.[a-z]+)?$/, "", b); gsub(/-/, "_", b)
        if (b == m) { print $1; exit } }' "$md/modules.dep")
  [ -n "$p" ] || return 0
  case $p in /*) echo "$R$p";; *) echo "$md/$p";; esac
}
# symvers_on_disk core|nvidia -- a provider Module.symvers for KVER (step 2).
symvers_on_disk() {
  local f d v ko
  if [ "$1" = core ]; then
    for f in "$R"/usr/src/ofa_kernel/*/"$KVER"/Module.symvers; do
      [ -f "$f" ] && exports "$f" $CORE_SYM && { echo "$f"; return; }
    done
    if [ -f "$R/usr/src/ofa_kernel/default/Module.symvers" ]; then
      d=$(readlink -f "$R/usr/src/ofa_kernel/default")
      [ "${d##*/}" = "$KVER" ] && exports "$d/Module.symvers" $CORE_SYM && echo "$d/Module.symvers"
    fi
    return 0
  fi
  # The NVIDIA driver's: "VERSION FILE" per candidate, the newest version last.
  {
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
    done
  } | sort -V -k1,1 | while read -r _ f; do exports "$f" $NV_SYM && echo "$f"; done | tail -n1
}
# resolve core|nvidia -- sets SRC (the file for the build, or empty) and WHY
# (one phrase for `explain`); may write a generated Module.symvers.
resolve() {
  local what=$1 sym ko disk gen kcrc name
  if [ "$what" = core ]; then sym=$CORE_SYM; else sym=$NV_SYM; fi
  SRC='' WHY=''
  ko=$(installed_provider $sym)
  disk=$(symvers_on_disk "$what")
  if [ -z "$ko" ]; then
    if [ "$what" = core ] && exports "$KSYMVERS" $sym; then
      WHY="the kernel's own Module.symvers ($KSYMVERS): the core is built into the kernel"; return
    fi
    if [ -n "$disk" ]; then SRC=$disk; WHY="$disk (no module exporting $sym is installed for $KVER)"; return; fi
    WHY="none: no module exporting $sym is installed for $KVER (depmod's modules.symbols) and no Module.symvers for it was found"
    return
  fi
  name=${ko##*/}; name=${name%.ko*}
  gen=$OUTDIR/$name.symvers
  mkdir -p "$OUTDIR"
  from_ko "$ko" "${ko%.ko*}" > "$gen.tmp" || { rm -f "$gen.tmp"; DIE_RC=2 die "cannot read the CRCs of $ko"; }
  # The provider's other entry points from other modules, if another
  # module exports them (the persistent pair from a module of its own, as
  # the bench's simulator does): their CRCs too, in the same file.
  local s o others=''
  if [ "$what" = nvidia ]; then
    for s in $PROVIDER_SYMS; do
      case $s in nvidia_p2p_*) ;; *) continue;; esac
      o=$(installed_provider "$s")
      [ -n "$o" ] && [ "$o" != "$ko" ] && case " $others " in *" $o "*) ;; *) others="$others $o";; esac
    done
    for o in $others; do
      from_ko "$o" "${o%.ko*}" >> "$gen.tmp" || { rm -f "$gen.tmp"; DIE_RC=2 die "cannot read the CRCs of $o"; }
    done
  fi
  exports "$gen.tmp" $sym || { rm -f "$gen.tmp"; DIE_RC=2 die "$ko: modules.symbols says it exports $sym, but its symbol table does not"; }
  kcrc=$(crc_in "$gen.tmp" $sym)
  if [ "$what" = core ] && exports "$KSYMVERS" $sym && [ "$(crc_in "$KSYMVERS" $sym)" = "$kcrc" ]; then
    rm -f "$gen.tmp"; WHY="the kernel's own Module.symvers ($KSYMVERS): modprobe loads the kernel's $ko"; return
  fi
  if [ -z "$others" ] && [ -n "$disk" ] && [ "$(crc_in "$disk" $sym)" = "$kcrc" ]; then
    rm -f "$gen.tmp"; SRC=$disk; WHY="$disk (its CRCs are those of $ko, which modprobe loads)"; return
  fi
  mv "$gen.tmp" "$gen"
  SRC=$gen; WHY="$gen, generated from $ko${others:+ and$others} (modprobe's choice for $sym; it comes with no Module.symvers${disk:+ that matches it: $disk differs})"
}
setup_kver() {
  [ -n "${1:-}" ] || die "no kernel release given (make: PEERMEM_KVER=<kernel release>, or a KDIR with include/config/kernel.release)"
  KVER=$1 R=${PEERMEM_SYMVERS_ROOT:-}
  KSYMVERS=${PEERMEM_KDIR:-$R/lib/modules/$KVER/build}/Module.symvers
  OUTDIR=${PEERMEM_SYMVERS_OUT:-$PWD/build/provider-symvers/$KVER}
}

# provider_gone core|nvidia -- what a missing provider means, and the
# command that installs it for $KVER (Ubuntu: its package for that kernel;
# elsewhere the vendor's DKMS package builds it). Ubuntu 24.04's archive has
# no DOCA-OFED (README "Ubuntu 24.04"): its core comes from NVIDIA's DKMS
# package, as elsewhere.
provider_gone() {
  local id ver branch
  id=$(ID=; . "${PEERMEM_OS_RELEASE:-$R/etc/os-release}" 2> /dev/null; echo "${ID:-}")
  ver=$(VERSION_ID=; . "${PEERMEM_OS_RELEASE:-$R/etc/os-release}" 2> /dev/null; echo "${VERSION_ID:-}")
  if [ "$1" = nvidia ]; then
    if [ "$id" = ubuntu ]; then
      # The branch of the CUDA userspace installed, if any (nvidia-utils-580).
      branch=$(dpkg-query ${R:+--admindir="$R/var/lib/dpkg"} -W -f '${Package} ${db:Status-Abbrev}\n' 'nvidia-utils-*' 2> /dev/null |
        sed -nE 's/^nvidia-utils-([0-9]+)(-server)? ii .*/\1/p' | sort -n | tail -n1)
      echo "the NVIDIA driver's modules were removed (modprobe nvidia_peermem fails with \"Unknown symbol $NV_SYM\"): apt install linux-modules-nvidia-${branch:-<branch>}-open-$KVER"
    else
      echo "the NVIDIA driver's modules were removed (modprobe nvidia_peermem fails with \"Unknown symbol $NV_SYM\"): reinstall the driver for $KVER (its DKMS package: dkms autoinstall -k $KVER)"
    fi
  elif [ "$id" = ubuntu ] && [ "$ver" != 24.04 ]; then
    echo "the peer-memory core's modules were removed (nvidia_peermem loads but has no core to register with): apt install linux-main-modules-doca-ofed-3.4-$KVER"
  else
    echo "the peer-memory core's modules were removed (nvidia_peermem loads but has no core to register with): reinstall DOCA-OFED for $KVER (mlnx-ofed-kernel-dkms: dkms autoinstall -k $KVER)"
  fi
}

case ${1:-} in
find)
  [ $# = 2 ] || die "usage: provider-symvers.sh find KVER"
  setup_kver "$2"
  resolve core; core=$SRC
  resolve nvidia; nvidia=$SRC
  out="$core $nvidia"; out=${out# }; echo "${out% }"
  ;;
explain)
  [ $# = 2 ] || die "usage: provider-symvers.sh explain KVER"
  setup_kver "$2"
  resolve core; echo "peer-memory core: $WHY"
  resolve nvidia; echo "NVIDIA driver: $WHY"
  ;;
check)
  [ $# = 2 ] || [ $# = 3 ] || die "usage: provider-symvers.sh check KVER [KO]"
  setup_kver "$2"
  ko=${3:-}
  if [ -z "$ko" ]; then
    ko=$(modinfo ${R:+-b "$R"} -k "$KVER" -n nvidia_peermem 2> /dev/null) || { echo "no nvidia_peermem module is installed for $KVER"; exit 2; }
  fi
  [ -r "$ko" ] || { echo "$ko: no such module file"; exit 2; }
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  if [ "${ko##*.}" = versions ]; then
    # What a module was built against, without the module (the preinst of a
    # binary package, scripts/deb-modules.sh): "module NAME", "binding ..."
    # and the module's __versions lines ("CRC<TAB>SYMBOL").
    binding=$(sed -n 's/^binding //p' "$ko")
    built=$(grep -E '^0x[0-9a-fA-F]+[[:space:]]' "$ko" || true)
    name=$(sed -n 's/^module //p' "$ko"); ko=${name:-$ko}
  else
    case $ko in
      *.zst) zstd -dcq < "$ko" > "$tmp/m.ko";; *.xz) xz -dc < "$ko" > "$tmp/m.ko";; *.gz) gzip -dc < "$ko" > "$tmp/m.ko";;
      *) cp "$ko" "$tmp/m.ko";;
    esac
    binding=$(modinfo -F binding "$tmp/m.ko" 2> /dev/null || true)
    built=$(modprobe --dump-modversions "$tmp/m.ko" 2> /dev/null || true)
  fi
  [ -n "$binding" ] || { echo "$ko is not a peermem-rs build (no binding in modinfo)"; exit 2; }
  OUTDIR=$tmp/gen stale=0 gone=0
  for what in core nvidia; do
    if [ $what = core ]; then sym=$CORE_SYM; else sym=$NV_SYM; fi
    ko_p=$(installed_provider $sym)
    if [ -n "$ko_p" ]; then
      from_ko "$ko_p" > "$tmp/$what.symvers" || exit 2
    elif [ $what = core ] && exports "$KSYMVERS" $sym; then
      ko_p=$KSYMVERS; cp "$KSYMVERS" "$tmp/$what.symvers"
    else
      # Not installed for KVER.  A build with no version of its entry
      # point was never bound to it (weak); one with a version was: the
      # driver's references are strong (modprobe fails with the loader's
      # bare "Unknown symbol"), the core's weak (the module loads and
      # cannot register).
      then_=$(awk -v s="$sym" '$2 == s { print $1; exit }' <<< "$built")
      if [ -n "$then_" ]; then
        echo "$sym: $ko was built against it, but no module installed for $KVER exports it: $(provider_gone $what)"
        gone=1
      fi
      continue
    fi
    for s in $PROVIDER_SYMS; do
      now=$(crc_in "$tmp/$what.symvers" "$s") || continue
      then_=$(awk -v s="$s" '$2 == s { print $1; exit }' <<< "$built")
      if [ -z "$then_" ]; then
        # Weak and unversioned while the kernel checks versions.
        [ "$((now))" = 0 ] && continue
        echo "$s: $ko was built without its symbol version ($binding); $ko_p now exports it with CRC $(printf '0x%08x' "$now")"
        stale=1
      elif [ "$((then_))" != "$now" ]; then
        echo "$s: $ko was built against CRC $(printf '0x%08x' "$((then_))"), but $ko_p (the module modprobe loads) exports $(printf '0x%08x' "$now")"
        stale=1
      fi
    done
  done
  [ $gone = 0 ] || exit 3
  exit $stale
  ;;
from-ko)
  [ $# = 2 ] || [ $# = 3 ] || die "usage: provider-symvers.sh from-ko KO [NAME]"
  from_ko "$2" "${3:-}"
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
    if exports "$f" $CORE_SYM; then
      [ -z "$seen_core" ] || die "PEERMEM_SYMVERS: two peer-memory cores' symvers ($seen_core, $f): name one"
      seen_core=$f; what="core:$f"
    fi
    if exports "$f" $NV_SYM; then
      [ -z "$seen_nv" ] || die "PEERMEM_SYMVERS: two NVIDIA drivers' symvers ($seen_nv, $f): name one"
      seen_nv=$f; what="$what nvidia:$f"
    fi
    [ -n "$what" ] || die "PEERMEM_SYMVERS: $f exports neither $CORE_SYM nor $NV_SYM: not a provider's Module.symvers"
    out="$out${out:+ }${what# }"
  done
  echo "$out"
  ;;
*) die "usage: provider-symvers.sh find KVER | explain KVER | check KVER [KO] | from-ko KO [NAME] | classify FILE...";;
esac
