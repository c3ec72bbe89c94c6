#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# scripts/contact.sh [check [TOP] | set ADDRESS [TOP] | files]
#   check: every place that names the maintainer or the bug-report channel
#          agrees with CONTACT, and none says "localhost"; prints "ok ..." /
#          "FAIL ..." lines and a WARNING while the address is a placeholder
#          (.invalid or example.*); exit 1 on any FAIL.
#   set:   replaces the maintainer's address (the part in <>) in CONTACT and
#          in every place check reads, then runs check.
#   files: the files check reads, relative to the top directory.
set -uo pipefail
cmd=${1:-check}
case $cmd in
  check) TOP=${2:-$(cd "$(dirname "$0")/.." && pwd)} ;;
  set) [ $# -ge 2 ] || { echo "usage: $0 set ADDRESS [TOP]" >&2; exit 2; }
       TOP=${3:-$(cd "$(dirname "$0")/.." && pwd)} ;;
  files) ;;
  *) echo "usage: $0 [check [TOP] | set ADDRESS [TOP] | files]" >&2; exit 2 ;;
esac

# The files that name the maintainer or the channel, relative to TOP.
FILES=(CONTACT debian/control debian/changelog debian/copyright userspace/Cargo.toml
  userspace/probe-lib/Cargo.toml userspace/peermem-probe/Cargo.toml rust/glue.c
  userspace/peermem-probe/src/main.rs README.md)
[ "$cmd" = files ] && { printf '%s\n' "${FILES[@]}"; exit 0; }

value() { # value KEY: the one KEY= line of CONTACT
  local n
  n=$(grep -c "^$1=" "$TOP/CONTACT" 2>/dev/null)
  [ "$n" = 1 ] || { echo "FAIL CONTACT: $1= appears ${n:-0} times, not once" >&2; return 1; }
  sed -n "s/^$1=//p" "$TOP/CONTACT"
}

maint=$(value MAINTAINER) || exit 1
bugs=$(value BUGS) || exit 1
name=${maint%% <*}
addr=${maint#*<}; addr=${addr%>}

if [ "$cmd" = set ]; then
  new=$2
  [[ $new =~ ^[^[:space:]\<\>@]+@[^[:space:]\<\>@]+\.[^[:space:]\<\>@]+$ ]] ||
    { echo "contact: '$new' is not a mail address (local@domain)" >&2; exit 2; }
  for f in "${FILES[@]}"; do
    [ -f "$TOP/$f" ] || continue
    text=$(cat "$TOP/$f"; printf x); text=${text%x}
    [[ $text == *"$addr"* ]] || continue
    printf '%s' "${text//"$addr"/"$new"}" > "$TOP/$f"
    echo "set: $f"
  done
  case ${new#*@} in
    *.invalid|example.com|example.net|example.org|*.example) ;;
    *) echo "set: README.md and debian/control still call the address a placeholder: edit those sentences" ;;
  esac
  exec bash "$0" check "$TOP"
fi

fails=0
ok()   { echo "ok $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
has()  { grep -qF -- "$2" "$TOP/$1"; } # has FILE TEXT: TEXT is in FILE, literally
# expect PASS-TEXT FAIL-TEXT CMD...: CMD decides which line is printed.
expect() {
  local yes=$1 no=$2; shift 2
  if "$@"; then ok "$yes"; else fail "$no"; fi
}
well_formed() { [[ $maint =~ ^[^\<\>]+\ \<[^[:space:]\<\>@]+@[^[:space:]\<\>@]+\>$ ]]; }

expect "CONTACT: MAINTAINER is 'Name <address>'" \
  "CONTACT: MAINTAINER '$maint' is not 'Name <address>'" well_formed
expect "debian/control: Maintainer" "debian/control: no line 'Maintainer: $maint'" \
  grep -qxF "Maintainer: $maint" "$TOP/debian/control"

trailers=$(grep -E '^ -- ' "$TOP/debian/changelog")
if [ -z "$trailers" ]; then
  fail "debian/changelog: no entry trailer (' -- Name <address>  date')"
elif bad=$(grep -vF -- " -- $maint  " <<< "$trailers"); then
  fail "debian/changelog: trailer(s) not signed '$maint': $bad"
else
  ok "debian/changelog: every entry signed by the maintainer"
fi

expect "debian/copyright: the copyright holder is '$name'" \
  "debian/copyright: no 'Copyright: ... $name' line" \
  grep -qE "^Copyright: .*$name\$" "$TOP/debian/copyright"
expect "userspace/Cargo.toml: workspace authors" \
  "userspace/Cargo.toml: no 'authors = [\"$maint\"]' in [workspace.package]" \
  grep -qxF "authors = [\"$maint\"]" "$TOP/userspace/Cargo.toml"
for c in userspace/probe-lib/Cargo.toml userspace/peermem-probe/Cargo.toml; do
  expect "$c: authors from the workspace" "$c: no 'authors.workspace = true'" \
    grep -qxF 'authors.workspace = true' "$TOP/$c"
  if grep -qE '^(repository|homepage)' "$TOP/$c" "$TOP/userspace/Cargo.toml"; then
    fail "$c: repository/homepage set, but the project has no public URL (CONTACT)"
  fi
done
expect "rust/glue.c: MODULE_AUTHOR" "rust/glue.c: no MODULE_AUTHOR(\"$name\")" \
  has rust/glue.c "MODULE_AUTHOR(\"$name\");"

line="Bugs: $bugs; attach \`peermem-probe doctor --save DIR\`."
expect "peermem-probe --help: the bug-report line" \
  "userspace/peermem-probe/src/main.rs: no '$line'" has userspace/peermem-probe/src/main.rs "$line"
expect "README.md: the bug-report line" "README.md: no '$line'" has README.md "$line"

for f in "${FILES[@]}"; do
  if grep -qi localhost "$TOP/$f" 2>/dev/null; then
    fail "$f: says localhost: $(grep -ni localhost "$TOP/$f" | head -1)"
  fi
done

case ${addr#*@} in
  *.invalid|example.com|example.net|example.org|*.example)
    for f in README.md debian/control; do
      if has "$f" "$addr" && grep -qi placeholder "$TOP/$f"; then
        ok "$f: says the address is a placeholder"
      else
        fail "$f: does not say that $addr is a placeholder"
      fi
    done
    echo "WARNING: the maintainer address $addr is a placeholder that delivers no mail; a distributor sets a real one: scripts/contact.sh set ADDRESS" ;;
esac

[ "$fails" = 0 ]
