#!/bin/bash
# tests/bench/route-debian.sh -- `make route-test`: README's Debian trixie
# route, pasted into a fresh trixie chroot as root, ends with the module
# built by DKMS; `apt purge peermem-rs-dkms` then leaves nothing of what the
# package generated.  Long (it rebuilds a kernel's Rust metadata; 11 to 13
# minutes on 2 cores, downloads included): not part of `make test`.
#
#   1. A minimal trixie (debootstrap --variant=minbase) from this host's
#      Debian mirror (lib.sh's debian_mirror), with the apt sources a trixie
#      install has: /etc/apt/sources.list.d/debian.sources (deb822; trixie,
#      trixie-updates, and trixie-security from the host's security entry).
#      Cached as $CACHE/route-trixie-<key>/base (key: suite, mirrors,
#      ROUTE_REV); every run starts from a fresh copy of it (.../run).
#   2. The commands of README's indented block under "### Debian trixie (13)",
#      parsed from the README (comment lines skipped, a line ending in ||, &&,
#      | or \ joined with the next) and run verbatim, one by one, as root
#      (bash -c, root's PATH) in /root/peermem-rs.
#   3. `apt purge peermem-rs-dkms`, and none of the files it generated is
#      left: the Rust metadata listed in /var/lib/peermem-rs/ (the headers
#      trees' .peermem-rust-metadata.files), that list, the DKMS builds.
# Prints each step with its time; the last line: "N passed, N failed, N
# skipped" (steps after a failed one are skipped).  The run's copy is
# removed after a clean run (ROUTE_KEEP=1 keeps it; a failed run keeps it),
# each step's output is in build/route-debian/.
#
# What a chroot cannot do as a pasted route does, and what is done instead
# (nothing else differs from an admin's paste):
#  - No reboot: the chroot keeps the host's kernel.  Right after the command
#    that installs the backports kernel ("then reboot into it"), a uname in
#    /usr/sbin (ahead of /usr/bin in root's PATH and in apt's DPkg::Path, so
#    DKMS's postinst and peermem-rust-metadata see it too) reports that
#    kernel's release (/boot/vmlinuz-<release>) instead of the host's:
#    every `uname -r` of the route is the installed backports kernel.
#  - The repository: /root/peermem-rs is a copy of its tracked files (git
#    archive, uncommitted changes included, as `make deb` packages them),
#    where `make deb` runs.
#  - `modprobe nvidia_peermem && peermem-probe doctor` needs the running
#    kernel to be the one with the module: instead, `dkms status` must say
#    installed for that kernel, the .ko must be in
#    /lib/modules/<kernel>/updates/dkms/ and be what modinfo resolves, and
#    peermem-probe doctor, on a sysroot whose running kernel is that one,
#    must pass its "peermem-rs DKMS" item.
#  - Nobody answers apt's questions: APT::Get::Assume-Yes in the chroot's
#    apt configuration and DEBIAN_FRONTEND=noninteractive (an admin says Y
#    and takes debconf's defaults).
#  - The environment: the archive is a snapshot past its Valid-Until
#    (Acquire::Check-Valid-Until "false", as chroot.sh writes it); no service
#    starts in a chroot (policy-rc.d); where the host has a CA bundle (a TLS
#    proxy's CA), cargo is given it (CARGO_HTTP_CAINFO), as pkg-host.inc does.
. "$(dirname "$0")/lib.sh"

ROUTE_REV=1          # bump when the clean chroot's making changes
[ "$(id -u)" = 0 ] || die "route-debian.sh: must run as root (debootstrap, chroot); try: sudo make route-test"
command -v debootstrap > /dev/null || die "route-debian.sh: debootstrap not found (apt install debootstrap)"
{ command -v git > /dev/null && [ -e "$TOP/.git" ]; } || die "route-debian.sh: needs git and a git checkout (the route packages the tracked files)"
mirror=$(debian_mirror)
[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list{,.d}: set MIRROR=http://<your mirror>/debian"
# The security archive: this host's -security entry, else the mirror's.
debian_security_mirror() {
  local m
  m=$(grep -rhE '^[[:space:]]*(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
      grep -oE 'https?://[^ ]+/debian-security/?' | head -n1)
  m=${SECURITY_MIRROR:-${m:-$mirror-security}}
  echo "${m%/}"
}
security=$(debian_security_mirror)
KEY=$(printf '%s\n' "$SUITE" "$mirror" "$security" "$ROUTE_REV" | sha256sum | cut -c1-12)
RDIR=$CACHE/route-$SUITE-$KEY
BASE=$RDIR/base
ROOT=$RDIR/run                  # in_root (lib.sh) runs commands in $ROOT
SRC=/root/peermem-rs
LOGS=$TOP/build/route-debian
VERSION=$(cat "$TOP/VERSION")
renice -n "${ROUTE_NICE:-10}" -p $$ > /dev/null || true
mkdir -p "$RDIR"
bench_lock "route-$KEY"
rm -rf "$LOGS"; mkdir -p "$LOGS"
free_gib=$(( $(df -Pk "$RDIR" | awk 'NR==2 {print $4}') / 1024 / 1024 ))
[ "$free_gib" -ge "${ROUTE_MIN_FREE_GIB:-8}" ] ||
  die "route-debian.sh: $RDIR has ${free_gib} GiB free; the route needs about 6 GiB (set CACHE= to a bigger disk)"

T0=$(date +%s.%N)
npass=0 nfail=0 nskip=0 stopped='' n=0 times=()
since() { echo "$(date +%s.%N) - $1" | bc; }
# step LABEL CMD... -- one timed step of the route; its output goes to
# $LOGS/NN.log, with the lines that say what happened shown.  After a failed
# step, the later ones are skipped.
step() {
  local label=$1 t0 rc=0 dt log; shift
  n=$((n+1)); log=$LOGS/$(printf %02d "$n").log
  if [ -n "$stopped" ]; then
    echo "skip - step $n: $label (step $stopped failed)"; nskip=$((nskip+1)); return 0
  fi
  log "step $n: $label"
  t0=$(date +%s.%N)
  "$@" > "$log" 2>&1 || rc=$?
  dt=$(since "$t0")
  { grep -E '^(peermem-rs|peermem-rust-metadata|make deb|Building for|Building module|Installing /|Error|E: |dpkg: error|route:)' "$log" || true; } |
    head -n 12 | sed 's/^/    | /'
  times+=("$(printf '%7.1f s  step %2d  %s' "$dt" "$n" "$label")")
  if [ "$rc" = 0 ]; then
    printf 'ok   - step %d (%.1f s): %s\n' "$n" "$dt" "$label"; npass=$((npass+1))
  else
    printf 'FAIL - step %d (%.1f s, exit %d): %s\n' "$n" "$dt" "$rc" "$label"
    tail -n 40 "$log" | sed 's/^/    | /'
    nfail=$((nfail+1)); stopped=$n
  fi
}
# check DESC CMD... -- a check (no step of its own); skipped after a failed step.
check() {
  local d=$1; shift
  if [ -n "$stopped" ]; then echo "skip - $d"; nskip=$((nskip+1)); return 0; fi
  if "$@"; then echo "ok   - $d"; npass=$((npass+1)); else echo "FAIL - $d"; nfail=$((nfail+1)); fi
}
finish() {
  local st=$?
  [ "$st" = 0 ] || [ "$nfail" != 0 ] || { echo "FAIL - route-debian.sh stopped (exit $st)"; nfail=1; }
  if [ "$nfail" = 0 ] && [ "${ROUTE_KEEP:-0}" != 1 ] && [ -d "$ROOT" ]; then
    rm -rf "$ROOT"
  elif [ -d "$ROOT" ]; then
    echo "the route's chroot is kept: $ROOT (rm -rf it when done)"
  fi
  echo
  echo "== step times (logs: $LOGS)"
  printf '%s\n' "${times[@]}"
  printf '%7.1f s  in all\n' "$(since "$T0")"
  echo "$npass passed, $nfail failed, $nskip skipped"
  [ "$nfail" = 0 ]
}
trap finish EXIT

# Nothing may be mounted under a tree that rm -rf removes (in_root mounts in
# a private namespace: nothing should ever be).
no_mounts_under() { ! findmnt -rn -o TARGET | grep -q "^$1\(/\|\$\)"; }
# a root's shell in the chroot: root's PATH, the route's environment
route_sh() { # route_sh COMMAND
  in_root env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive ${cainfo:+CARGO_HTTP_CAINFO=$cainfo} bash -c "cd $SRC && $1"
}

# --- 1. the clean chroot (cached) and the run's copy --------------------------------
make_base() {
  no_mounts_under "$BASE.tmp" || { echo "route: something is mounted under $BASE.tmp"; return 1; }
  rm -rf "$BASE.tmp"
  debootstrap --variant=minbase "$SUITE" "$BASE.tmp" "$mirror" || return 1
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -e "$BASE.tmp$keyring" ] || keyring=/usr/share/keyrings/debian-archive-keyring.pgp
  # apt's sources as a trixie install writes them
  rm -f "$BASE.tmp/etc/apt/sources.list"
  cat > "$BASE.tmp/etc/apt/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: $mirror/
Suites: $SUITE $SUITE-updates
Components: main non-free-firmware
Signed-By: $keyring

Types: deb
URIs: $security/
Suites: $SUITE-security
Components: main non-free-firmware
Signed-By: $keyring
SRC
  # The archive here is a snapshot whose Release files are past Valid-Until.
  echo 'Acquire::Check-Valid-Until "false";' > "$BASE.tmp/etc/apt/apt.conf.d/90bench"
  # No service starts in a chroot.
  printf '#!/bin/sh\nexit 101\n' > "$BASE.tmp/usr/sbin/policy-rc.d"; chmod 755 "$BASE.tmp/usr/sbin/policy-rc.d"
  ROOT=$BASE.tmp in_root apt-get -q update || return 1
  ROOT=$BASE.tmp in_root apt-get clean
  mv "$BASE.tmp" "$BASE"
}
if [ -x "$BASE/usr/bin/apt-get" ]; then
  echo "ok   - the clean $SUITE chroot: cached ($BASE)"; npass=$((npass+1))
else
  step "the clean $SUITE chroot: debootstrap --variant=minbase from $mirror (cached as $BASE)" make_base
fi
fresh_copy() {
  no_mounts_under "$ROOT" || { echo "route: something is mounted under $ROOT"; return 1; }
  rm -rf "$ROOT" && cp -a "$BASE" "$ROOT" || return 1
  # substitutions: apt asks nothing; the repository's tracked files
  echo 'APT::Get::Assume-Yes "true";' > "$ROOT/etc/apt/apt.conf.d/90route-assume-yes"
  mkdir -p "$ROOT$SRC"
  local c; c=$(git -C "$TOP" stash create) && c=${c:-HEAD} &&
    git -C "$TOP" archive --format=tar "$c" | tar -C "$ROOT$SRC" -xf - || return 1
  echo "route: $SRC: $(git -C "$TOP" ls-files | wc -l) tracked files of $(git -C "$TOP" rev-parse --short HEAD)$(git -C "$TOP" diff --quiet HEAD || echo ', with their uncommitted changes')"
  if [ -f "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" ]; then
    cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$ROOT/root/route-host-ca.crt"
  fi
}
step "a fresh copy of the clean chroot, the repository's tracked files in $SRC" fresh_copy
cainfo=; [ ! -f "$ROOT/root/route-host-ca.crt" ] || cainfo=/root/route-host-ca.crt

# --- 2. README's route, command by command --------------------------------------------
# The lines of the first indented block after the heading, unindented.
readme_block() {
  awk '/^### Debian trixie \(13\)/ {sec=1; next}
       sec && /^#+ / {exit}
       sec && /^    / {blk=1; print substr($0, 5); next}
       sec && blk && /^[[:space:]]*$/ {print ""; next}
       sec && blk {exit}' "$TOP/README.md"
}
cmds=() cur=''
while IFS= read -r line; do
  case ${line#"${line%%[![:space:]]*}"} in ''|'#'*) continue;; esac
  cur=${cur:+$cur$'\n'}$line
  if ! [[ $line =~ (\|\||&&|\||\\)[[:space:]]*$ ]]; then cmds+=("$cur"); cur=''; fi
done < <(readme_block)
[ -z "$cur" ] || cmds+=("$cur")
[ ${#cmds[@]} -gt 0 ] || die "README.md: no indented block under '### Debian trixie (13)'"
echo "README's Debian trixie route: ${#cmds[@]} commands"

KVER=''
# The reboot: the kernel the route installed, as uname's release from now on.
reboot_into_backports_kernel() {
  KVER=$(find "$ROOT/boot" -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | sort -V | tail -n1)
  [ -n "$KVER" ] || { echo "route: no /boot/vmlinuz-* after the kernel's install"; return 1; }
  cat > "$ROOT/usr/sbin/uname" <<EOF
#!/bin/bash
# route-debian.sh: the chroot runs the host's kernel; the route has rebooted
# into $KVER (the host's release is replaced by that one).
out=\$(/usr/bin/uname "\$@") || exit
real=\$(/usr/bin/uname -r)
printf '%s\n' "\${out//"\$real"/$KVER}"
EOF
  chmod 755 "$ROOT/usr/sbin/uname"
  echo "route: uname -r in the chroot: $(route_sh 'uname -r')"
  [ "$(route_sh 'uname -r')" = "$KVER" ]
}
installed_for() { grep -q "^peermem-rs/$VERSION, $KVER, [^:]*: installed" <<< "$(in_root dkms status -m peermem-rs)"; }
dkms_ko() { find "$ROOT/lib/modules/$KVER/updates/dkms" -name 'nvidia_peermem.ko*' 2> /dev/null | head -n1 || true; }
# doctor's item "peermem-rs DKMS", on a sysroot whose running kernel is $KVER: "status|value"
doctor_dkms() {
  local sr=/tmp/route-sysroot
  rm -rf "$ROOT$sr"; mkdir -p "$ROOT$sr/proc/sys/kernel" "$ROOT$sr/var/lib"
  echo "$KVER" > "$ROOT$sr/proc/sys/kernel/osrelease"; : > "$ROOT$sr/proc/modules"
  ln -s /var/lib/dkms "$ROOT$sr/var/lib/dkms"; ln -s /lib "$ROOT$sr/lib"
  in_root sh -c "peermem-probe doctor --sysroot $sr --json 2> /dev/null; true" | in_root python3 -c '
import json, sys
for i in json.load(sys.stdin)["items"]:
    if i["name"] == "peermem-rs DKMS": print("%s|%s" % (i["status"], i["value"]))' 2> /dev/null || true
}
modprobe_substitute() {
  echo "(substituted: no module loads in a chroot; DKMS's build for $KVER is checked instead)"
  check "dkms status: peermem-rs/$VERSION, $KVER: installed" installed_for
  ko=$(dkms_ko)
  check "the module is in /lib/modules/$KVER/updates/dkms/ (${ko#"$ROOT"})" test -n "$ko"
  f=$(in_root modinfo -k "$KVER" -n nvidia_peermem 2>&1 || true)
  check "modinfo -k $KVER nvidia_peermem resolves to it ($f)" test -n "$ko" -a "$f" = "${ko#"$ROOT"}"
  d=$(doctor_dkms)
  check "peermem-probe doctor, the running kernel being $KVER: 'peermem-rs DKMS' passes ($d)" \
    test "$d" = "pass|$VERSION installed for $KVER"
}
for c in "${cmds[@]}"; do
  label=${c//$'\n'/ }
  if [[ $c =~ ^modprobe[[:space:]] ]]; then
    echo "---- $label"
    if [ -n "$stopped" ]; then check "$label (substituted)" true; else modprobe_substitute; fi
    continue
  fi
  step "$label" route_sh "$c"
  if [[ $c =~ linux-image- ]] && [ -z "$KVER" ]; then
    step "(substituted) reboot into the backports kernel: uname -r reports it" reboot_into_backports_kernel
  fi
done

# --- 3. apt purge peermem-rs-dkms: nothing it generated is left -----------------------
# What peermem-rust-metadata generated, as its lists name it (before the purge).
generated=()
if [ -z "$stopped" ]; then
  while read -r t; do
    [ -f "$ROOT$t/.peermem-rust-metadata.files" ] || continue
    while read -r f; do [ -z "$f" ] || generated+=("$t/$f"); done < "$ROOT$t/.peermem-rust-metadata.files"
    generated+=("$t/.peermem-rust-metadata.files")
  done < <(cat "$ROOT/var/lib/peermem-rs/rust-metadata.trees" 2> /dev/null)
fi
check "peermem-rust-metadata listed what it generated in /var/lib/peermem-rs/ (${#generated[@]} files)" test ${#generated[@]} -gt 1
step "apt purge peermem-rs-dkms" route_sh 'apt purge peermem-rs-dkms'
left_after_purge() {
  local f left=''
  for f in "${generated[@]}"; do [ ! -e "$ROOT$f" ] && [ ! -L "$ROOT$f" ] || left="$left $f"; done
  # shellcheck disable=SC2016 # expanded in the chroot
  left="$left $(in_root sh -c 'ls -d /var/lib/peermem-rs /var/lib/dkms/peermem-rs /usr/src/peermem-rs-* \
      /usr/src/linux-headers-*/.peermem-rust-metadata.files /lib/modules/*/updates/dkms/nvidia_peermem.ko* \
      /etc/modprobe.d/peermem-rs.conf /etc/depmod.d/peermem-rs.conf /usr/sbin/peermem-rust-metadata 2> /dev/null;
      grep -l nvidia_peermem /lib/modules/*/modules.dep 2> /dev/null' || true)"
  left=$(tr -s ' \n' '  ' <<< "$left" | sed 's/^ //; s/ $//')
  echo "${left:-nothing}"
}
left=nothing; [ -n "$stopped" ] || left=$(left_after_purge)
check "after the purge, nothing of what the package generated is left (left: $left)" test "$left" = nothing
# The purge took out only files of ours: the kernel headers' packages
# (linux-headers-*, linux-kbuild-*, where the metadata was laid) are intact.
verify_headers() {
  local pkgs bad
  # shellcheck disable=SC2016 # dpkg-query's format
  pkgs=$(in_root dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' 'linux-headers-*' 'linux-kbuild-*' | awk '$1 == "ii" {print $2}' | tr '\n' ' ')
  bad=$(in_root sh -c "dpkg --verify $pkgs 2>&1" || true)
  echo "    | dpkg --verify ${pkgs:-(no headers package)}${bad:+: $bad}"
  [ -n "$pkgs" ] && [ -z "$bad" ]
}
check "the kernel headers' packages are intact after the purge (dpkg --verify)" verify_headers
