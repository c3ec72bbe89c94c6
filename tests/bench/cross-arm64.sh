#!/bin/bash
# tests/bench/cross-arm64.sh -- cross-build the module for Debian's arm64
# kernel (ARM64_KERNEL in versions.env; GH200/GB200 hosts are arm64):
#  1. Debian's arm64 headers package, fetched with apt for arm64 (a private
#     apt state: the chroot stays single-architecture); its .config must
#     have CONFIG_RUST=y and the chroot's rustc;
#  2. the kernel prepared for external modules with its Rust metadata:
#     linux-source + Debian's arm64 .config, ARCH=arm64, the aarch64 gcc 14,
#     `make modules_prepare`, Rust exports checked against Debian's arm64
#     Module.symvers (cached as a tarball keyed by kernel + toolchain);
#  3. nvidia_peermem.ko built against it: an AArch64 object whose vermagic is
#     the kernel's and whose every import the arm64 kernel exports.
# Prints ok/FAIL lines; exit 0 only if all passed.
. "$(dirname "$0")/lib.sh"
K=$ARM64_KERNEL
series=$(kseries "$K"); pkgver=$(debian_pkgver "$K")
B=/build/arm64; O=$B/kernel-$K; SRC=$STAGE/src-arm64
rc=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; rc=1; }

# 1. Debian's arm64 headers.
deb=$CACHE/arm64/linux-headers-${K}_${pkgver}_arm64.deb
if [ ! -f "$deb" ]; then
  A=/tmp/apt-arm64; mkdir -p "$ROOT$A/lists/partial" "$ROOT$A/archives/partial" "$CACHE/arm64"
  grep -E '^deb ' "$ROOT/etc/apt/sources.list" | sed 's/^deb /deb [arch=arm64] /' > "$ROOT$A/sources.list"
  : > "$ROOT$A/status"
  opts=(-o "Dir::State=$A" -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A" -o "Dir::Cache::Archives=$A/archives"
        -o "Dir::State::status=$A/status" -o "Dir::Etc::SourceList=$A/sources.list" -o Dir::Etc::SourceParts=/nonexistent
        -o APT::Architecture=arm64 -o APT::Architectures=arm64 -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  in_root apt-get "${opts[@]}" -q update > /dev/null || die "apt-get update for arm64 failed"
  # shellcheck disable=SC2016 # expanded by that sh
  in_root sh -c 'cd "$1" && shift && exec apt-get "$@"' sh "$A" "${opts[@]}" -q download "linux-headers-$K:arm64=$pkgver" > /dev/null ||
    die "linux-headers-$K:arm64=$pkgver is not in the archive"
  mv "$ROOT$A/linux-headers-${K}_"*_arm64.deb "$deb"; rm -rf "${ROOT:?}$A"
fi
# Laid out where Debian puts it (its links reach linux-headers-*-common, which
# the amd64 headers already brought, and linux-kbuild: the amd64 host tools).
HK=/usr/src/linux-headers-$K
H=$B/headers; rm -rf "$ROOT$H" "$ROOT$HK"; mkdir -p "$ROOT$H"
trap 'rm -rf "${ROOT:?}$H" "${ROOT:?}$HK"' EXIT
dpkg-deb -x "$deb" "$ROOT$H"
mv "$ROOT$H$HK" "$ROOT$HK"
want=$(sed -nE 's/^CONFIG_RUSTC_VERSION_TEXT="(.*)"/\1/p' "$ROOT$HK/.config")
grep -q '^CONFIG_RUST=y' "$ROOT$HK/.config" || { bad "$K has CONFIG_RUST off: no Rust module can be built for it"; exit 1; }
[ "$want" = "$(in_root rustc --version)" ] || { bad "$K was built with '$want', the chroot has another rustc"; exit 1; }
ok "$K: Debian's arm64 kernel has CONFIG_RUST=y, built with the chroot's $want"

# 2. The prepared arm64 tree with Rust metadata.
cc=$(sed -nE 's/^CONFIG_CC_VERSION_TEXT="([^ ]+) .*/\1/p' "$ROOT$HK/.config")
key=$(echo "$K $pkgver $want $cc $(in_root "$cc" --version | head -1)" | sha256sum | cut -c1-12)
tarball=$CACHE/arm64/kernel-$K-$key.tar.zst
MK=(nice make -C "/build/linux-source-$series" O="$O" -j"$(nproc)" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- CC="$cc"
    HOSTCC=x86_64-linux-gnu-gcc-14 KERNELRELEASE="$K")
if [ ! -f "$tarball" ]; then
  log "$K: preparing the arm64 tree (modules_prepare, cross)"
  [ -d "$ROOT/build/linux-source-$series" ] || in_root nice tar -C /build -xf "/usr/src/linux-source-$series.tar.xz"
  rm -rf "$ROOT$O"; mkdir -p "$ROOT$O"; cp "$ROOT$HK/.config" "$ROOT$O/.config"
  in_root "${MK[@]}" olddefconfig > /dev/null
  in_root "${MK[@]}" modules_prepare > "$CACHE/arm64/modules_prepare-$K.log" 2>&1 ||
    { tail -30 "$CACHE/arm64/modules_prepare-$K.log"; bad "$K: modules_prepare (cross) failed"; exit 1; }
  cp "$ROOT$HK/Module.symvers" "$ROOT$O/Module.symvers"
  tar -C "$ROOT" --zstd -cf "$tarball.tmp" --exclude='*.o' --exclude='.*.cmd' --exclude=source "${O#/}" && mv "$tarball.tmp" "$tarball"
  rm -rf "$ROOT/build/linux-source-$series"
else
  rm -rf "$ROOT$O"; tar -C "$ROOT" --zstd -xf "$tarball"
fi
ours=$(sed -nE 's/^EXPORT_SYMBOL_RUST_GPL\((_R[A-Za-z0-9_]+)\);.*/\1/p' "$ROOT$O"/rust/exports_*_generated.h | sort -u)
debian=$(awk '$2 ~ /^_R/ {print $2}' "$ROOT$HK/Module.symvers" | sort -u)
if [ -n "$ours" ] && [ "$ours" = "$debian" ]; then
  ok "$K: the rebuilt arm64 Rust crates export exactly Debian's $(echo "$ours" | wc -l) Rust symbols"
else
  bad "$K: the rebuilt arm64 Rust crates export other symbols than Debian's kernel"; comm -3 <(echo "$ours") <(echo "$debian") | head -5
fi

for f in "$ROOT$O"/rust/*.rmeta "$ROOT$O"/rust/*.so; do install -D -m 644 "$f" "$ROOT$HK/rust/${f##*/}"; done

# 3. The module, built against Debian's arm64 headers + that metadata.
mkdir -p "$ROOT$SRC"
rsync -a --delete --exclude=.git --exclude=/build --exclude=target --exclude=/userspace --exclude=/tests \
  --exclude='*.o' --exclude='*.ko' --exclude='.*.cmd' "$TOP/" "$ROOT$SRC/"
if in_root sh -c "make -C $HK M=$SRC ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- CC=$cc PEERMEM_NAME=nvidia_peermem modules" \
     > "$ROOT$SRC/build.log" 2>&1 && ! grep -qE '^(warning|error)|: warning:' "$ROOT$SRC/build.log"; then
  ok "$K: nvidia_peermem.ko cross-built, no warnings"
else
  grep -E 'warning|error' -A5 "$ROOT$SRC/build.log" | head -40; bad "$K: the arm64 build failed"; exit 1
fi
ko=$SRC/nvidia_peermem.ko
m=$(in_root readelf -h "$ko" | awk -F: '/Machine/ {gsub(/^ +/, "", $2); print $2}')
if [ "$m" = AArch64 ]; then ok "$K: the module is an $m object"; else bad "$K: the module is a '$m' object, not AArch64"; fi
vm=$(in_root modinfo -F vermagic "$ko")
case $vm in "$K "*) ok "$K: vermagic '$vm'";; *) bad "$K: vermagic '$vm' is not the kernel's";; esac
# Strong imports only: the providers' symbols (NVIDIA P2P, peer-memory core)
# are weak references, resolved at load time from OFED and the NVIDIA driver.
missing=$(comm -23 <(in_root aarch64-linux-gnu-nm -u "$ko" | awk '$1 == "U" {print $2}' | sort -u) <(awk '{print $2}' "$ROOT$HK/Module.symvers" | sort -u))
if [ -z "$missing" ]; then ok "$K: every symbol the module imports (weak provider symbols aside) is exported by Debian's arm64 kernel"
else bad "$K: imports the arm64 kernel does not export:"; echo "$missing" | head; fi
exit $rc
