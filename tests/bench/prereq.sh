#!/bin/bash
# tests/bench/prereq.sh -- check what the bench needs from the host and
# install the host packages (debootstrap, QEMU, bc, zstd, rsync).  Every missing
# prerequisite is explained in one line.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "must run as root: the bench builds a chroot and mounts /proc and /dev into it (try: sudo make test)"

need_gib=${BENCH_MIN_FREE_GIB:-20}
mkdir -p "$CACHE"
if [ ! -d "$ROOT" ]; then
  free_gib=$(( $(df -Pk "$CACHE" | awk 'NR==2 {print $4}') / 1024 / 1024 ))
  [ "$free_gib" -ge "$need_gib" ] ||
    die "disk too small: $CACHE has ${free_gib} GiB free, the chroot and kernel builds need ${need_gib} GiB (set CACHE= to a bigger disk)"
fi

mirror=$(debian_mirror)
[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list{,.d}: set MIRROR=http://<your mirror>/debian"
hostport=$(echo "$mirror" | sed -E 's#^[a-z]+://([^/]+).*#\1#')
host=${hostport%%:*}
port=80; case "$mirror" in https:*) port=443;; esac
case "$hostport" in *:*) port=${hostport##*:};; esac
timeout 15 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null ||
  die "no network to the Debian archive ($host:$port, from $mirror): the bench downloads trixie packages"

missing=
for t in debootstrap:debootstrap qemu-system-x86_64:qemu-system-x86 bc:bc zstd:zstd rsync:rsync; do
  command -v "${t%%:*}" >/dev/null || missing="$missing ${t#*:}"
done
if [ -n "$missing" ]; then
  log "installing host packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -q update >/dev/null || log "apt-get update reported errors (continuing)"
  apt-get install -y -q --no-install-recommends $missing >/dev/null ||
    die "could not install host packages:$missing (apt-get install failed)"
fi
exit 0
