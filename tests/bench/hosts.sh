#!/bin/bash
# tests/bench/hosts.sh KVER -- the hosts peermem-rs must load on, played in
# the chroot for the debug kernel KVER (symbol versions on, as on Ubuntu's
# and NVIDIA's Rust kernels), with the simulators as the providers, laid
# out as each host lays out its NVIDIA driver and RDMA core (README
# "Binding", "Upgrades").  Each layout runs in a copy-on-write view of the
# chroot (an overlay mount in a private mount namespace: the shared chroot
# is never changed), through the real install path:
#   ubuntu         Ubuntu 26.04: the headers' rust/ a symlink into
#                  /usr/src/linux-lib-rust-KVER/rust, only versioned
#                  rustc-1.NN/bindgen-0.NN, the NVIDIA driver and the core as
#                  packages of prebuilt .ko.zst modules without Module.symvers
#                  (as linux-modules-nvidia-*-open-* and
#                  linux-modules-doca-ofed-* ship them, in /usr/lib/modules),
#                  NVIDIA's own nvidia-peermem.ko.zst beside them; then the
#                  peermem-rs-dkms .deb: DKMS binds it with CRCs read from
#                  the installed modules;
#   ubuntu-upgraded  the same host after a driver upgrade: the NVIDIA package
#                  reinstalled with a driver build whose
#                  nvidia_p2p_get_pages has another CRC; the package's dpkg
#                  trigger rebuilds peermem-rs by itself;
#                  then apt purge: nothing of ours is left, and a plain
#                  modprobe nvidia_peermem would load NVIDIA's again;
#   nvidia-kernel  NVIDIA's linux-nvidia kernels: the core is the kernel's
#                  own (its CRCs in the kernel's Module.symvers), the NVIDIA
#                  driver prebuilt; a build from source binds both.
# The modules each layout ends with are staged under <stage>/hosts/<layout>/
# (lib/modules/KVER/..., as modprobe -d reads them) for the VM case
# host-layouts, which loads them with no override.
# HOSTS_NO_REFRESH=1 (a bench knob, for showing the case fails without it):
# the upgrade happens with the package's rebuild mechanism (its dpkg
# trigger and peermem-rs-refresh) turned off.
# Prints "ok - ..." / "FAIL - ..." lines; counts in $RESULTS/hosts-KVER.counts.
. "$(dirname "$0")/lib.sh"
KVER=${1:?usage: hosts.sh KVER}
VERSION=$(cat "$TOP/VERSION")
mkdir -p "$RESULTS"
npass=0; nfail=0
ok()  { echo "ok   - $*"; npass=$((npass+1)); }
bad() { echo "FAIL - $*"; nfail=$((nfail+1)); }
CHECK_RC=0
check() { local d=$1; shift; CHECK_RC=0; "$@" || CHECK_RC=$?; if [ $CHECK_RC = 0 ]; then ok "$d"; else bad "$d"; fi; }
counts() {
  local st=${1:-$?}
  if [ "$st" != 0 ] && [ $nfail = 0 ]; then echo "FAIL - hosts.sh $KVER stopped (exit $st)"; nfail=1; fi
  echo "$npass $nfail 0" > "$RESULTS/hosts-$KVER.counts"
  [ -z "${WORK:-}" ] || [ "${HOSTS_KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap counts EXIT

# (HOSTS_ANY_KERNEL=1: on a Debian kernel too, to work on the mechanics;
# its CRC checks fail there, those kernels having no symbol versions.)
is_debug_kernel "$KVER" || [ "${HOSTS_ANY_KERNEL:-0}" = 1 ] ||
  die "hosts.sh: $KVER has no symbol versions: the host layouts run on the debug kernel"
if is_debug_kernel "$KVER"; then KB=/build/kernel-$KVER; else KB=/usr/src/linux-headers-$KVER; fi
MODS=$STAGE/mods/$KVER SIMS=$STAGE/src/$KVER/tests/sim SIMSU=$STAGE/src/$KVER-upgrade/tests/sim
for f in nvidia_p2p_sim.ko nvidia_p2p_sim_persistent.ko peer_core_sim.ko; do
  [ -f "$ROOT$MODS/$f" ] || die "hosts.sh: $MODS/$f not built (tests/bench/build.sh $KVER first)"
done
[ -f "$ROOT$SIMSU/nvidia_p2p_sim.ko" ] || [ "${HOSTS_ANY_KERNEL:-0}" = 1 ] ||
  die "hosts.sh: the upgraded driver build ($SIMSU) is missing (build.sh)"
[ -f "$ROOT$SIMSU/nvidia_p2p_sim.ko" ] || SIMSU=$SIMS
H=$STAGE/hosts
rm -rf "$ROOT$H"; mkdir -p "$ROOT$H"
WORK=$(mktemp -d /var/tmp/peermem-hosts.XXXXXX)
rc_of() { local rc=0; "$@" || rc=$?; echo $rc; }
qre() { printf '%s' "$1" | sed 's/[][\.*^$+?(){}|/]/\\&/g'; }

# --- a copy-on-write view of the chroot -------------------------------------
# ov_new NAME: a fresh upper layer; ov CMD...: CMD in the chroot through it.
ov_new() { OV=$WORK/$1; mkdir -p "$OV/up" "$OV/work" "$OV/mnt"; }
# shellcheck disable=SC2016 # expanded by the inner sh
ov() {
  unshare --mount --propagation private -- sh -c '
    r=$1 ov=$2; shift 2
    mount -t overlay overlay -o "lowerdir=$r,upperdir=$ov/up,workdir=$ov/work" "$ov/mnt" &&
    mount -t proc proc "$ov/mnt/proc" && mount --rbind /dev "$ov/mnt/dev" && exec chroot "$ov/mnt" "$@"' \
    sh "$ROOT" "$OV" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}

# --- the providers as packages of prebuilt, compressed modules --------------
# provider_deb NAME VERSION DIR KO... -- NAME_VERSION_amd64.deb in <stage>/hosts/debs
# shipping each KO as /usr/lib/modules/K/kernel/DIR/<name>.ko.zst (K:
# PROVIDER_KVER, default KVER; a KO given as SRC=NAME is installed under
# NAME), running depmod like Ubuntu's linux-modules-* packages; built in
# the chroot.
DEBS=$H/debs
provider_deb() {
  local name=$1 ver=$2 dir=$3 k=${PROVIDER_KVER:-$KVER} p ko dst; shift 3
  p=$H/pkg-$name-$ver; rm -rf "$ROOT$p"
  mkdir -p "$ROOT$p/DEBIAN" "$ROOT$p/usr/lib/modules/$k/kernel/$dir" "$ROOT$DEBS"
  for ko in "$@"; do
    dst=${ko#*=}; [ "$dst" = "$ko" ] && dst=$(basename "$ko")
    in_root zstd -q -o "$p/usr/lib/modules/$k/kernel/$dir/$dst.zst" "${ko%%=*}"
  done
  printf 'Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: peermem-rs bench <bench@invalid>\nDescription: bench stand-in for a package of prebuilt provider modules\n' \
    "$name" "$ver" > "$ROOT$p/DEBIAN/control"
  printf '#!/bin/sh\nset -e\ndepmod -a %s\n' "$k" > "$ROOT$p/DEBIAN/postinst"
  printf '#!/bin/sh\nset -e\ndepmod -a %s\n' "$k" > "$ROOT$p/DEBIAN/postrm"
  chmod 755 "$ROOT$p/DEBIAN/postinst" "$ROOT$p/DEBIAN/postrm"
  in_root dpkg-deb --root-owner-group -Zxz -b "$p" "$DEBS/${name}_${ver}_amd64.deb" > /dev/null
  rm -rf "$ROOT$p"
}
NVPKG=linux-modules-nvsim-580-open-$KVER COREPKG=linux-modules-coresim-3.4-$KVER
# NVIDIA's own nvidia-peermem.ko beside the driver, as Ubuntu's package
# ships it: any module under that file name stands in (it is never loaded).
provider_deb "$NVPKG" 580.1 nvidia-580-open "$MODS/nvidia_p2p_sim.ko" "$MODS/nvidia_p2p_sim_persistent.ko" \
  "$MODS/simclient_good.ko=nvidia-peermem.ko"
provider_deb "$NVPKG" 580.2 nvidia-580-open "$SIMSU/nvidia_p2p_sim.ko" "$SIMSU/nvidia_p2p_sim_persistent.ko" \
  "$MODS/simclient_good.ko=nvidia-peermem.ko"
provider_deb "$COREPKG" 3.4.0 doca-ofed-3.4 "$MODS/peer_core_sim.ko"

# The simulators' own CRCs (their build's Module.symvers): the truth the
# generated files are checked against.
crc_of() { awk -v s="$2" '$2 == s { print $1; exit }' "$1"; }
NV1=$(crc_of "$ROOT$SIMS/Module.symvers" nvidia_p2p_get_pages)
NV2=$(crc_of "$ROOT$SIMSU/Module.symvers" nvidia_p2p_get_pages)
CORE=$(crc_of "$ROOT$SIMS/Module.symvers" ib_register_peer_memory_client)
check "the upgraded driver build exports nvidia_p2p_get_pages with another CRC ($NV1 -> $NV2)" \
  test -n "$NV1" -a -n "$NV2" -a "$NV1" != "$NV2"

# The peermem-rs-dkms package (architecture all; no crates needed).
log "hosts: building peermem-rs-dkms"
PS=$STAGE/hosts-src
rm -rf "$ROOT$PS"; mkdir -p "$ROOT$PS"
( cd "$TOP" && git ls-files -z --cached --others --exclude-standard | grep -zv '^userspace/' |
    rsync -a --from0 --files-from=- ./ "$ROOT$PS/" )
out=$(in_root sh -c "cd $PS && dpkg-buildpackage -A -us -uc 2>&1") ||
  { echo "$out" | tail -20; bad "dpkg-buildpackage -A of peermem-rs-dkms"; exit 1; }
DKMS_DEB=$(cd "$ROOT$PS/.." && find . -maxdepth 1 -name "peermem-rs-dkms_${VERSION}*_all.deb" -printf '%f\n' | sort -V | tail -n1)
cp "$ROOT$PS/../$DKMS_DEB" "$ROOT$DEBS/"; rm -f "$ROOT$PS/../"peermem-rs*.{deb,buildinfo,changes}

# stage LAYOUT -- the modules of the view's KVER the VM case needs, under
# <stage>/hosts/LAYOUT/lib/modules/KVER (modules.dep's paths are relative).
stage() {
  local d=$ROOT$H/$1/lib/modules/$KVER
  mkdir -p "$d"
  # shellcheck disable=SC2016 # expanded by the inner sh
  unshare --mount --propagation private -- sh -c '
    r=$1 ov=$2 k=$3 d=$4
    mount -t overlay overlay -o "lowerdir=$r,upperdir=$ov/up,workdir=$ov/work" "$ov/mnt" || exit 1
    cd "$ov/mnt/usr/lib/modules/$k" && cp modules.* "$d/" &&
    for s in updates kernel/nvidia-580-open kernel/doca-ofed-3.4 kernel/drivers/infiniband/core/peer_core_sim.ko.zst; do
      [ -e "$s" ] || continue; mkdir -p "$d/$(dirname "$s")"; cp -a "$s" "$d/$(dirname "$s")/"
    done' sh "$ROOT" "$OV" "$KVER" "$d"
}

# --- Ubuntu 26.04 -----------------------------------------------------------
ubuntu_layout() {
  # Other kernels out of DKMS's way; the Ubuntu header and tool layout.
  # shellcheck disable=SC2016 # expanded in the view
  ov sh -ec '
    k=$1 kb=$2
    for d in /usr/lib/modules/*; do [ "${d##*/}" = "$k" ] || rm -rf "$d"; done
    mkdir -p /usr/src/linux-lib-rust-$k/rust
    (cd $kb/rust && find . -maxdepth 1 -type f \( -name "*.rmeta" -o -name "*.so" -o -name "*.json" -o -name "*.rs" \) -exec cp -a {} /usr/src/linux-lib-rust-$k/rust/ \;)
    rm -rf $kb/rust && ln -s /usr/src/linux-lib-rust-$k/rust $kb/rust
    [ "$kb" = /usr/src/linux-headers-$k ] || ln -sfn $kb /usr/src/linux-headers-$k
    ln -sfn /usr/src/linux-headers-$k /usr/lib/modules/$k/build
    v=$(rustc --version | sed -nE "s/^rustc ([0-9]+\.[0-9]+)\..*/\1/p")
    b=$(bindgen --version | sed -nE "s/^bindgen ([0-9]+\.[0-9]+)\..*/\1/p")
    mv /usr/bin/rustc /usr/bin/rustc-$v && mv /usr/bin/bindgen /usr/bin/bindgen-$b' sh "$KVER" "$KB"
}
log "hosts: ubuntu"
ov_new ubuntu
ubuntu_layout
check "ubuntu: the headers' rust/ is a symlink into linux-lib-rust-$KVER" \
  test "$(ov readlink /usr/src/linux-headers-"$KVER"/rust)" = "/usr/src/linux-lib-rust-$KVER/rust"
check "ubuntu: only versioned rustc-1.NN and bindgen-0.NN ($(ov sh -c 'ls /usr/bin/rustc* /usr/bin/bindgen*' | tr '\n' ' '))" \
  ov sh -c '! command -v rustc && ! command -v bindgen && ls /usr/bin/rustc-1.* /usr/bin/bindgen-0.* > /dev/null'
out=$(ov dpkg -i "$DEBS/${NVPKG}_580.1_amd64.deb" "$DEBS/${COREPKG}_3.4.0_amd64.deb" 2>&1) ||
  { echo "$out" | tail; bad "ubuntu: the provider packages install"; }
check "ubuntu: the providers are compressed modules, with no Module.symvers of theirs" \
  test "$(ov sh -c "find /usr/lib/modules/$KVER /usr/src/ofa_kernel /usr/src/nvidia-* /var/lib/dkms -name Module.symvers 2>/dev/null; ls /usr/lib/modules/$KVER/kernel/nvidia-580-open/")" \
       = "$(printf 'nvidia-peermem.ko.zst\nnvidia_p2p_sim.ko.zst\nnvidia_p2p_sim_persistent.ko.zst')"
found=$(ov sh -c "cd /tmp && $PS/scripts/provider-symvers.sh find $KVER" 2>&1 || true)
check "ubuntu: provider-symvers.sh find, on a tree that has only the providers' .ko.zst, prints generated files ($found)" \
  test "$found" = "/tmp/build/provider-symvers/$KVER/peer_core_sim.symvers /tmp/build/provider-symvers/$KVER/nvidia_p2p_sim.symvers"
gen=$(ov sh -c "cat /tmp/build/provider-symvers/$KVER/nvidia_p2p_sim.symvers /tmp/build/provider-symvers/$KVER/peer_core_sim.symvers" | sort || true)
want=$(awk -F'\t' '$3 ~ /(^|\/)(nvidia_p2p_sim|nvidia_p2p_sim_persistent|peer_core_sim)$/' "$ROOT$SIMS/Module.symvers" | cut -f1,2,4 | sort)
check "ubuntu: ... holding each module's CRCs and export types, as the simulators' build wrote them" \
  test "$(cut -f1,2,4 <<< "$gen" | sort)" = "$want"
[ "$CHECK_RC" = 0 ] || diff <(cut -f1,2,4 <<< "$gen" | sort) <(echo "$want") | head || true
log "hosts: ubuntu: apt install peermem-rs-dkms (DKMS builds for $KVER)"
out=$(ov apt-get install -y -q --no-install-recommends "$DEBS/$DKMS_DEB" 2>&1) && rc=0 || rc=$?
{ grep -E '^(peermem-rs|Building|Installing|Error|Warning)' <<< "$out" || true; } | sed 's/^/    | /'
check "ubuntu: apt install peermem-rs-dkms succeeds" test "$rc" = 0
[ "$rc" = 0 ] || echo "$out" | tail -20
check "ubuntu: ... DKMS built and installed it for $KVER" grep -q "peermem-rs/$VERSION, $KVER, .*: installed" <<< "$(ov dkms status)"
b=$(ov modinfo -k "$KVER" -F binding nvidia_peermem 2>&1 || true)
G=/var/lib/dkms/peermem-rs/$VERSION/build/build/provider-symvers/$KVER
check "ubuntu: ... bound with CRCs read from the installed modules: $b" \
  test "$b" = "crc: $G/peer_core_sim.symvers $G/nvidia_p2p_sim.symvers"
vers=$(ov sh -c "modprobe --dump-modversions \$(modinfo -k $KVER -n nvidia_peermem)" 2>&1 || true)
check "ubuntu: ... its __versions hold the providers' CRCs (nvidia_p2p_get_pages $NV1, ib_register_peer_memory_client $CORE)" \
  test "$(awk '$2 == "nvidia_p2p_get_pages" { print $1 }' <<< "$vers")/$(awk '$2 == "ib_register_peer_memory_client" { print $1 }' <<< "$vers")" = "$NV1/$CORE"
f=$(ov modinfo -k "$KVER" -n nvidia_peermem 2>&1 || true)
check "ubuntu: ... depmod's override picks it over NVIDIA's nvidia-peermem.ko.zst ($f)" \
  grep -qxE "/lib/modules/$(qre "$KVER")/updates/dkms/nvidia_peermem\.ko(\.[a-z]+)?" <<< "$f"
check "ubuntu: peermem-rs-refresh --check: up to date" ov peermem-rs-refresh --check "$KVER"
stage ubuntu

# The driver upgrade: the NVIDIA package reinstalled with another build.
if [ "${HOSTS_NO_REFRESH:-0}" = 1 ]; then
  echo "    | HOSTS_NO_REFRESH=1: the package's rebuild mechanism is off for this upgrade"
  ov sh -c 'dpkg-divert --quiet --local --rename --add /usr/sbin/peermem-rs-refresh && printf "#!/bin/sh\nexit 0\n" > /usr/sbin/peermem-rs-refresh && chmod 755 /usr/sbin/peermem-rs-refresh'
fi
log "hosts: ubuntu: the NVIDIA driver upgrade"
out=$(ov dpkg -i "$DEBS/${NVPKG}_580.2_amd64.deb" 2>&1) && rc=0 || rc=$?
{ grep -E '^(peermem-rs|Processing triggers)' <<< "$out" || true; } | sed 's/^/    | /'
check "ubuntu-upgraded: dpkg -i of the upgraded driver package succeeds" test "$rc" = 0
check "ubuntu-upgraded: ... its trigger rebuilt peermem-rs for $KVER, saying why" \
  grep -qE "^peermem-rs: $(qre "$KVER"): stale: nvidia_p2p_get_pages: .* was built against CRC $NV1, but .*/nvidia_p2p_sim.ko.zst \(the module modprobe loads\) exports $NV2" <<< "$out"
vers=$(ov sh -c "modprobe --dump-modversions \$(modinfo -k $KVER -n nvidia_peermem)" 2>&1 || true)
check "ubuntu-upgraded: ... the installed nvidia_peermem now carries the new CRC ($NV2)" \
  test "$(awk '$2 == "nvidia_p2p_get_pages" { print $1 }' <<< "$vers")" = "$NV2"
check "ubuntu-upgraded: peermem-rs-refresh --check: up to date" ov peermem-rs-refresh --check "$KVER"
stage ubuntu-upgraded

# The driver removed (issue 33): the build bound to it cannot load (its
# references to the driver are strong: "Unknown symbol"), and no rebuild
# helps.  The removal's trigger says so with the command for this kernel,
# --check fails with the same line, and reinstalling the driver makes it
# up to date again.  Ubuntu's os-release for the scripts (the chroot is
# Debian's), and the CUDA userspace of branch 580 (the command names it).
ov sh -ec 'grep -v "^ID=" /etc/os-release > /etc/os-release.ubuntu; echo ID=ubuntu >> /etc/os-release.ubuntu
  mkdir -p /tmp/nvutils/DEBIAN
  printf "Package: nvidia-utils-580\nVersion: 580.1\nArchitecture: amd64\nMaintainer: peermem-rs bench <bench@invalid>\nDescription: bench stand-in\n" > /tmp/nvutils/DEBIAN/control
  dpkg-deb --root-owner-group -b /tmp/nvutils /tmp/nvutils.deb > /dev/null && dpkg -i /tmp/nvutils.deb > /dev/null'
UBUNTU_OS=PEERMEM_OS_RELEASE=/etc/os-release.ubuntu
GONE_RE="^peermem-rs: $(qre "$KVER"): nvidia_p2p_get_pages: .* was built against it, but no module installed for $(qre "$KVER") exports it: the NVIDIA driver's modules were removed \(modprobe nvidia_peermem fails with \"Unknown symbol nvidia_p2p_get_pages\"\): apt install linux-modules-nvidia-580-open-$(qre "$KVER")\$"
out=$(ov env $UBUNTU_OS dpkg -r "$NVPKG" 2>&1) && rc=0 || rc=$?
{ grep -E '^peermem-rs' <<< "$out" || true; } | sed 's/^/    | /'
check "ubuntu-removed: dpkg -r of the driver package succeeds" test "$rc" = 0
check "ubuntu-removed: ... its trigger names what is missing and the command for $KVER" grep -qE "$GONE_RE" <<< "$out"
out=$(ov env $UBUNTU_OS peermem-rs-refresh --check "$KVER" 2>&1) && rc=0 || rc=$?
check "ubuntu-removed: peermem-rs-refresh --check exits 1 (exit $rc), with that line" \
  test "$rc" = 1 -a "$(grep -cE "$GONE_RE" <<< "$out")" = 1
out=$(ov dpkg -i "$DEBS/${NVPKG}_580.2_amd64.deb" 2>&1) && rc=0 || rc=$?
check "ubuntu-reinstalled: dpkg -i of the driver package succeeds, its trigger silent" \
  test "$rc" = 0 -a -z "$(grep -E '^peermem-rs' <<< "$out")"
[ "$CHECK_RC" = 0 ] || tail -n 15 <<< "$out"
check "ubuntu-reinstalled: peermem-rs-refresh --check: up to date" ov peermem-rs-refresh --check "$KVER"

# A kernel update on Ubuntu (issue 33): kernel K2 comes with its headers and
# its providers' packages but without linux-lib-rust-K2, which no
# metapackage pulls in.  DKMS's kernel hook skips peermem-rs for K2 with
# the one command; running it (a stand-in linux-lib-rust-K2, unpacked
# under /usr/src) fires peermem-rs's dpkg trigger, which builds it for K2.
# K2 is the bench kernel's build tree under another release name: the
# tree's rust/ points at linux-lib-rust-K2's files, absent until that
# package is installed (the installed module of the first kernel does not
# need them; the tree's rust/ points back at its own afterwards).  (A
# symlink farm of the tree would not do: Kbuild then takes the farm for an
# output directory of its own.)
K2=$KVER-next
log "hosts: ubuntu: a kernel update to $K2, its linux-lib-rust later"
# shellcheck disable=SC2016 # expanded in the view
ov sh -ec '
  k=$1 k2=$2 kb=$3
  ln -sfn "$kb" "/usr/src/linux-headers-$k2"
  mkdir -p "/usr/lib/modules/$k2"; ln -sfn "/usr/src/linux-headers-$k2" "/usr/lib/modules/$k2/build"
  rm "$kb/rust"; ln -s "/usr/src/linux-lib-rust-$k2/rust" "$kb/rust"
  p=/tmp/librust; mkdir -p "$p/DEBIAN" "$p/usr/src/linux-lib-rust-$k2"
  cp -a "/usr/src/linux-lib-rust-$k/rust" "$p/usr/src/linux-lib-rust-$k2/"
  printf "Package: linux-lib-rust-%s\nVersion: 1\nArchitecture: amd64\nMaintainer: peermem-rs bench <bench@invalid>\nDescription: bench stand-in\n" "$k2" > "$p/DEBIAN/control"
  dpkg-deb --root-owner-group -b "$p" /tmp/librust.deb > /dev/null' sh "$KVER" "$K2" "$KB"
PROVIDER_KVER=$K2 provider_deb "linux-modules-nvsim-580-open-$K2" 580.2 nvidia-580-open "$SIMSU/nvidia_p2p_sim.ko" "$SIMSU/nvidia_p2p_sim_persistent.ko"
PROVIDER_KVER=$K2 provider_deb "linux-modules-coresim-3.4-$K2" 3.4.0 doca-ofed-3.4 "$MODS/peer_core_sim.ko"
out=$(ov dpkg -i "$DEBS/linux-modules-nvsim-580-open-${K2}_580.2_amd64.deb" "$DEBS/linux-modules-coresim-3.4-${K2}_3.4.0_amd64.deb" 2>&1) && rc=0 || rc=$?
check "ubuntu-update: $K2's provider packages install, the trigger silent" \
  test "$rc" = 0 -a -z "$(grep -E '^peermem-rs' <<< "$out")"
[ "$CHECK_RC" = 0 ] || tail -n 15 <<< "$out"
out=$(ov env $UBUNTU_OS /etc/kernel/postinst.d/dkms "$K2" 2>&1) || true
printf '    | %s\n' "${out//$'\n'/$'\n'    | }"
check "ubuntu-update: DKMS's kernel hook skips $K2 with one peermem-rs line" test "$(grep -c '^peermem-rs: ' <<< "$out")" = 1
check "ubuntu-update: ... naming the one command: apt install linux-lib-rust-$K2" \
  grep -qE "^peermem-rs: kernel $(qre "$K2"): .*apt install linux-lib-rust-$(qre "$K2")\$" <<< "$out"
out=$(ov env $UBUNTU_OS dpkg -i /tmp/librust.deb 2>&1) && rc=0 || rc=$?
{ grep -E '^peermem-rs' <<< "$out" || true; } | sed 's/^/    | /'
check "ubuntu-update: that command (linux-lib-rust-$K2 installed) succeeds" test "$rc" = 0
check "ubuntu-update: ... its trigger built peermem-rs for $K2" grep -qE "^peermem-rs: $(qre "$K2"): built: crc: " <<< "$out"
[ "$CHECK_RC" = 0 ] || { ov sh -c "tail -n 20 /var/lib/dkms/peermem-rs/$VERSION/build/make.log" 2>&1 | sed 's/^/    | /'; } || true
check "ubuntu-update: ... DKMS has it installed for $K2" grep -q "peermem-rs/$VERSION, $K2, .*: installed" <<< "$(ov dkms status)"
f=$(ov modinfo -k "$K2" -n nvidia_peermem 2>&1 || true)
check "ubuntu-update: ... modprobe's nvidia_peermem for $K2 is that build ($f)" \
  grep -qxE "/lib/modules/$(qre "$K2")/updates/dkms/nvidia_peermem\.ko(\.[a-z]+)?" <<< "$f"
check "ubuntu-update: peermem-rs-refresh --check $K2: up to date" ov peermem-rs-refresh --check "$K2"
out=$(ov env $UBUNTU_OS dpkg -i /tmp/librust.deb 2>&1) || true
check "ubuntu-update: the same package again: the trigger builds nothing" \
  test -z "$(grep -E '^peermem-rs' <<< "$out")"
[ "$CHECK_RC" = 0 ] || tail -n 15 <<< "$out"
# shellcheck disable=SC2016 # expanded in the view
ov sh -ec 'rm "$2/rust"; ln -s "/usr/src/linux-lib-rust-$1/rust" "$2/rust"' sh "$KVER" "$KB"

# Going back: apt purge leaves nothing, and NVIDIA's module is modprobe's again.
out=$(ov apt-get purge -y -q peermem-rs-dkms 2>&1) && rc=0 || rc=$?
check "ubuntu: apt purge peermem-rs-dkms" test "$rc" = 0
left=$(ov sh -c 'ls -d /var/lib/dkms/peermem-rs /usr/src/peermem-rs-* /etc/modprobe.d/peermem-rs.conf /etc/depmod.d/peermem-rs.conf \
   /usr/sbin/peermem-rs-refresh /usr/lib/modules/*/updates/dkms/nvidia_peermem.ko* 2>/dev/null' || true)
check "ubuntu: ... nothing of ours left, the depmod override included${left:+ (left: ${left//$'\n'/ })}" test -z "$left"
f=$(ov modinfo -k "$KVER" -n nvidia_peermem 2>&1 || true)
check "ubuntu: ... a plain modprobe nvidia_peermem would load NVIDIA's again ($f)" \
  test "$f" = "/lib/modules/$KVER/kernel/nvidia-580-open/nvidia-peermem.ko.zst"

# --- NVIDIA's linux-nvidia kernels: the core is the kernel's own ------------
log "hosts: nvidia-kernel"
ov_new nvidia-kernel
# The core built into the kernel: its exports in the kernel's Module.symvers
# (as ib_uverbs), its module in the kernel's own tree.
awk -F'\t' -v OFS='\t' '$2 ~ /^ib_(un)?register_peer_memory_client$/ { $3 = "drivers/infiniband/core/ib_uverbs"; print }' \
  "$ROOT$SIMS/Module.symvers" > "$WORK/core.symvers"
cp "$WORK/core.symvers" "$ROOT$H/core.symvers.tmp"
# shellcheck disable=SC2016 # expanded in the view
ov sh -ec '
  k=$1 kb=$2 mods=$3 cs=$4
  d=/usr/lib/modules/$k/kernel/drivers/infiniband/core; mkdir -p $d
  zstd -q -o $d/peer_core_sim.ko.zst $mods/peer_core_sim.ko
  cat $cs >> $kb/Module.symvers && rm -f $cs
  depmod -a $k' sh "$KVER" "$KB" "$MODS" "$H/core.symvers.tmp"
rm -f "$ROOT$H/core.symvers.tmp"
out=$(ov dpkg -i "$DEBS/${NVPKG}_580.1_amd64.deb" 2>&1) || { echo "$out" | tail; bad "nvidia-kernel: the NVIDIA package installs"; }
ex=$(ov sh -c "cd /tmp && $PS/scripts/provider-symvers.sh explain $KVER" 2>&1 || true)
printf '    | %s\n' "${ex//$'\n'/$'\n'    | }"
check "nvidia-kernel: provider-symvers.sh explain: the core's CRCs from the kernel's own Module.symvers" \
  grep -qE "^peer-memory core: the kernel's own Module.symvers \(/lib/modules/$(qre "$KVER")/build/Module.symvers\): modprobe loads the kernel's " <<< "$ex"
check "nvidia-kernel: ... the driver's from its installed module" \
  grep -qE "^NVIDIA driver: .*/nvidia_p2p_sim.symvers, generated from /lib/modules/$(qre "$KVER")/kernel/nvidia-580-open/nvidia_p2p_sim.ko.zst and /lib/modules/$(qre "$KVER")/kernel/nvidia-580-open/nvidia_p2p_sim_persistent.ko.zst " <<< "$ex"
log "hosts: nvidia-kernel: make (from source)"
out=$(ov sh -c "rm -rf /tmp/src && cp -a $PS /tmp/src && cd /tmp/src && make KDIR=/lib/modules/$KVER/build 2>&1") && rc=0 || rc=$?
check "nvidia-kernel: make builds the module" test "$rc" = 0
[ "$rc" = 0 ] || echo "$out" | tail -20
b=$(ov modinfo -F binding /tmp/src/peermem_rs.ko 2>&1 || true)
check "nvidia-kernel: ... bound with CRCs, the core's from the kernel's Module.symvers: $b" \
  grep -qE "^crc: /tmp/src/build/provider-symvers/$(qre "$KVER")/nvidia_p2p_sim.symvers /[^ ]*/Module.symvers$" <<< "$b"
vers=$(ov modprobe --dump-modversions /tmp/src/peermem_rs.ko 2>&1 || true)
check "nvidia-kernel: ... its __versions hold the providers' CRCs (nvidia_p2p_get_pages $NV1, ib_register_peer_memory_client $CORE)" \
  test "$(awk '$2 == "nvidia_p2p_get_pages" { print $1 }' <<< "$vers")/$(awk '$2 == "ib_register_peer_memory_client" { print $1 }' <<< "$vers")" = "$NV1/$CORE"
stage nvidia-kernel
mkdir -p "$ROOT$H/nvidia-kernel/src"
# shellcheck disable=SC2016 # expanded by the inner sh
unshare --mount --propagation private -- sh -c '
  mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/up,workdir=$2/work" "$2/mnt" && cp "$2/mnt/tmp/src/peermem_rs.ko" "$3/"' \
  sh "$ROOT" "$OV" "$ROOT$H/nvidia-kernel/src"

echo "$VERSION" > "$ROOT$H/ready"
[ "$nfail" = 0 ]
