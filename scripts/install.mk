# SPDX-License-Identifier: GPL-2.0
# scripts/install.mk -- installing peermem-rs (included by the top Makefile).
#
#   make install [KVER=<kernel>]   the non-packaged DKMS route (root)
#   make uninstall
#   make install-files DESTDIR=... what the packages ship (debian/rules uses it)
#   make deb                       build/deb/peermem-rs-dkms_<ver>_all.deb, peermem-probe_<ver>_<arch>.deb
#                                  (crates vendored first; the package build runs offline)
#   make deb-modules KVER=<kernel> SIGN_KEY=... SIGN_CERT=...  (or SIGN=none)
#                                  build/deb/peermem-rs-modules-<kernel>_<ver>_<arch>.deb: the module
#                                  built here for one kernel and this builder's providers, signed,
#                                  for nodes without a Rust toolchain (scripts/deb-modules.sh)
#   make rust-metadata KDIR=...    rebuild a Debian kernel's Rust metadata into its headers
#   make hwtest [ARGS=--dry-run]   the hardware validation on a GPU + ConnectX host
#   make hwtest-selftest           validate.sh against stand-ins (no hardware; part of make check)

PEERMEM_VERSION := $(shell cat $(CURDIR)/VERSION)
DKMS_NAME := peermem-rs
DKMS_SRC := /usr/src/$(DKMS_NAME)-$(PEERMEM_VERSION)
PREFIX ?= /usr/local
# Where DKMS installs the module: /extra on RHEL-like systems, /updates/dkms elsewhere.
DKMS_DEST := $(if $(wildcard /etc/redhat-release),extra,updates/dkms)
# The module sources DKMS builds from (everything the Kbuild needs, and dkms.conf).
DKMS_FILES := dkms.conf Kbuild Makefile VERSION include rust scripts/check-kernel.sh scripts/provider-symvers.sh scripts/install.mk

.PHONY: install uninstall install-files install-dkms install-probe deb deb-modules rust-metadata hwtest hwtest-selftest

install-files:
	install -d $(DESTDIR)$(DKMS_SRC)
	tar -C $(CURDIR) --exclude=target --exclude='*.o' --exclude='*.ko' --exclude='.*.cmd' \
	  --exclude='*_generated.rs' --exclude='*.mod' --exclude='*.mod.c' -cf - $(DKMS_FILES) | \
	  tar -C $(DESTDIR)$(DKMS_SRC) --no-same-owner -xf -
	install -D -m 644 etc/modprobe.d-peermem-rs.conf $(DESTDIR)/etc/modprobe.d/peermem-rs.conf
	install -D -m 644 etc/depmod.d-peermem-rs.conf $(DESTDIR)/etc/depmod.d/peermem-rs.conf
	sed -i 's|^override nvidia_peermem \* .*|override nvidia_peermem * $(DKMS_DEST)|' $(DESTDIR)/etc/depmod.d/peermem-rs.conf
	install -D -m 755 scripts/rust-metadata.sh $(DESTDIR)$(if $(DESTDIR),/usr,$(PREFIX))/sbin/peermem-rust-metadata
	install -D -m 755 scripts/peermem-rs-refresh.sh $(DESTDIR)$(if $(DESTDIR),/usr,$(PREFIX))/sbin/peermem-rs-refresh
	sed -i 's|^VERSION=@VERSION@$$|VERSION=$(PEERMEM_VERSION)|' $(DESTDIR)$(if $(DESTDIR),/usr,$(PREFIX))/sbin/peermem-rs-refresh

# dkms add, then build + install for KVER (or, without KVER, for every kernel
# DKMS autoinstalls to).  A kernel that cannot build a Rust module is skipped
# with its one-line reason (dkms exit 77), which is not an error here.
install-dkms: install-files
	@command -v dkms > /dev/null || { echo "make install: dkms is not installed (apt install dkms / dnf install dkms)" >&2; exit 1; }
	dkms status -m $(DKMS_NAME) -v $(PEERMEM_VERSION) | grep -q . || dkms add -m $(DKMS_NAME) -v $(PEERMEM_VERSION)
	@if [ -n "$(KVER)" ]; then \
	  dkms install -m $(DKMS_NAME) -v $(PEERMEM_VERSION) -k $(KVER) || [ $$? = 77 ]; \
	else \
	  dkms autoinstall || true; dkms status -m $(DKMS_NAME) -v $(PEERMEM_VERSION); \
	fi

install-probe:
	cd userspace && cargo build --release --locked
	install -D -m 755 userspace/target/release/peermem-probe $(DESTDIR)$(PREFIX)/bin/peermem-probe

install: install-dkms install-probe

uninstall:
	-dkms status -m $(DKMS_NAME) -v $(PEERMEM_VERSION) | grep -q . && dkms remove -m $(DKMS_NAME) -v $(PEERMEM_VERSION) --all
	-[ ! -x $(PREFIX)/sbin/peermem-rust-metadata ] || $(PREFIX)/sbin/peermem-rust-metadata --remove-all
	rm -rf $(DKMS_SRC)
	rm -f /etc/modprobe.d/peermem-rs.conf /etc/depmod.d/peermem-rs.conf
	rm -f $(PREFIX)/sbin/peermem-rust-metadata $(PREFIX)/sbin/peermem-rs-refresh $(PREFIX)/bin/peermem-probe

# Both packages, built from the tracked files only (git archive of the
# index and working tree of tracked files, via `git stash create`: no
# untracked or ignored file reaches a package). A tree that is not a git
# checkout (a release tarball) is packaged as it is, minus build outputs.
# The one generated addition to that tree: the crates of userspace/Cargo.lock,
# vendored into it by `debian/rules vendor` (userspace/vendor, and the
# userspace/.cargo/config.toml that points cargo at it; both ignored by git).
# That is the only step that needs the network (the crate registry; or
# CARGO_NET_OFFLINE=true and a CARGO_HOME that has the crates):
# dpkg-buildpackage then builds offline.
# The build dependencies are checked first: one line names what is missing
# and the command that installs it.
deb:
	@command -v dpkg-checkbuilddeps > /dev/null || { echo "make deb: dpkg-checkbuilddeps not found: install dpkg-dev (apt install dpkg-dev)" >&2; exit 1; }
	@unmet=$$(cd $(CURDIR) && dpkg-checkbuilddeps 2>&1 > /dev/null | sed -n 's/^.*Unmet build dependencies: //p'); \
	  if [ -n "$$unmet" ]; then echo "make deb: missing build dependencies: $$unmet; install them as root with: apt-get build-dep $(CURDIR)" >&2; exit 1; fi
	rm -rf build/deb && mkdir -p build/deb/src
	@if [ -e $(CURDIR)/.git ]; then \
	  command -v git > /dev/null || { echo "make deb: git not found: apt install git (it lists the tracked files to package)" >&2; exit 1; }; \
	  c=$$(git -C $(CURDIR) stash create) && c=$${c:-HEAD} && \
	  git -C $(CURDIR) archive --format=tar "$$c" | tar -C build/deb/src -xf - && \
	  echo "make deb: packaging the $$(git -C $(CURDIR) ls-files | wc -l) tracked files$$(git -C $(CURDIR) diff --quiet HEAD || echo ', with their uncommitted changes')"; \
	else \
	  echo "make deb: not a git checkout: packaging the tree as it is"; \
	  tar -C $(CURDIR) --exclude=./build --exclude=target --exclude='*.o' --exclude='*.ko' \
	    --exclude='.*.cmd' --exclude='*_generated.rs' --exclude=./userspace/vendor --exclude=./userspace/.cargo \
	    -cf - . | tar -C build/deb/src -xf -; \
	fi
	@echo "make deb: vendoring the crates of userspace/Cargo.lock into the package's tree (the network is needed for this step only)"
	cd build/deb/src && debian/rules vendor
	cd build/deb/src && dpkg-buildpackage -b -us -uc $(DEB_FLAGS)
	@ls build/deb/*.deb

# Build once, deploy to a fleet (README "For a fleet").
deb-modules:
	KVER="$(KVER)" $(if $(filter command line environment,$(origin KDIR)),KDIR="$(KDIR)") SIGN="$(SIGN)" SIGN_KEY="$(SIGN_KEY)" SIGN_CERT="$(SIGN_CERT)" \
	  bash scripts/deb-modules.sh

rust-metadata:
	scripts/rust-metadata.sh $(if $(KVER),$(KVER),--kdir $(KDIR))

hwtest:
	bash tests/hw/validate.sh $(ARGS)

hwtest-selftest:
	bash tests/hw/selftest.sh
