//! Whether DKMS built peermem-rs for the running kernel, and if not, why:
//! read from DKMS's tree (what `dkms status peermem-rs` shows) and, on the
//! live system, from the package's own check (`scripts/check-kernel.sh`,
//! the one line DKMS printed when it skipped the kernel).

use super::{item, Item};
use crate::report::Status;
use crate::root::SysRoot;
use crate::sysinfo::SysState;

const DKMS_TREE: &str = "/var/lib/dkms/peermem-rs";

/// The one line check-kernel.sh prints for a kernel it cannot build for,
/// split into the problem and the remedy ("peermem-rs: kernel K: PROBLEM;
/// REMEDY").
pub(crate) fn split_check_line(line: &str, kernel: &str) -> Option<(String, String)> {
    let rest = line
        .trim()
        .strip_prefix("peermem-rs: kernel ")?
        .strip_prefix(kernel)?
        .strip_prefix(": ")?;
    match rest.split_once("; ") {
        Some((p, r)) => Some((p.to_string(), r.to_string())),
        None => Some((rest.to_string(), String::new())),
    }
}

/// The `binding=` tag of a module file: how it is bound to its providers
/// (README "Binding"); a compressed one through modinfo (live system only).
fn binding_of(root: &SysRoot, ko: &str) -> Option<String> {
    if !ko.ends_with(".ko") {
        if !root.is_live() {
            return None;
        }
        let out = std::process::Command::new("modinfo")
            .args(["-F", "binding", ko])
            .output()
            .ok()?;
        let b = String::from_utf8_lossy(&out.stdout).trim().to_string();
        return (out.status.success() && !b.is_empty()).then_some(b);
    }
    let b = root.read_bytes(ko).ok()?;
    let tag = b"binding=";
    let at = b.windows(tag.len()).position(|w| w == tag)? + tag.len();
    let end = b[at..].iter().position(|&c| c == 0)? + at;
    Some(String::from_utf8_lossy(&b[at..end]).into_owned())
}

/// Kernel `k` checks symbol versions: `CONFIG_MODVERSIONS=y` in its
/// `/boot/config-<k>` or its build tree's `.config`.
fn has_modversions(root: &SysRoot, k: &str) -> bool {
    [
        format!("/boot/config-{k}"),
        format!("/lib/modules/{k}/build/.config"),
    ]
    .iter()
    .find_map(|p| root.read(p))
    .is_some_and(|c| c.lines().any(|l| l == "CONFIG_MODVERSIONS=y"))
}

/// The installed module of kernel `k`, if DKMS installed one.
fn installed_ko(root: &SysRoot, k: &str) -> Option<String> {
    ["updates/dkms", "extra"].iter().find_map(|d| {
        let dir = format!("/lib/modules/{k}/{d}");
        root.list(&dir)
            .into_iter()
            .find(|f| f.starts_with("nvidia_peermem.ko"))
            .map(|f| format!("{dir}/{f}"))
    })
}

/// Runs the package's check for kernel `k` (live system only): its line.
fn run_check(root: &SysRoot, version: &str, k: &str) -> Option<String> {
    if !root.is_live() {
        return None;
    }
    let script = format!("/usr/src/peermem-rs-{version}/scripts/check-kernel.sh");
    if !root.exists(&script) {
        return None;
    }
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(format!("/lib/modules/{k}/build"))
        .arg(k)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .find(|l| l.starts_with("peermem-rs: "))
        .map(str::to_string)
}

/// What `peermem-rs-refresh --check` found wrong with a kernel's build.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RefreshVerdict {
    /// A provider changed since the build (its line, without "peermem-rs: ").
    Stale(String),
    /// A provider the build was bound to is no longer installed: what is
    /// missing, and the command that brings it back (a rebuild cannot).
    ProviderGone { what: String, remedy: String },
}

/// Reads `peermem-rs-refresh --check k`'s exit status and standard output
/// for kernel `k`: nothing unless it exited 1 with a line about `k`.
pub(crate) fn refresh_verdict(code: Option<i32>, stdout: &str, k: &str) -> Option<RefreshVerdict> {
    if code != Some(1) {
        return None;
    }
    let prefix = format!("peermem-rs: {k}: ");
    stdout.lines().find_map(|l| {
        let rest = l.strip_prefix(&prefix)?;
        if let Some(s) = rest.strip_prefix("stale: ") {
            return Some(RefreshVerdict::Stale(format!("{k}: stale: {s}")));
        }
        // provider-symvers.sh check: "SYM: KO was built against it, but no
        // module installed for K exports it: WHAT (WHY): COMMAND".
        if !rest.contains(" was built against it, but no module installed for ") {
            return None;
        }
        let (what, remedy) = rest.split_once("): ")?;
        Some(RefreshVerdict::ProviderGone {
            what: format!("{what})"),
            remedy: remedy.to_string(),
        })
    })
}

/// Runs `peermem-rs-refresh --check k` (live system only; the package's
/// comparison of the CRCs the installed build carries with those of the
/// provider modules modprobe loads now, README "Upgrades").
fn run_refresh_check(root: &SysRoot, k: &str) -> Option<RefreshVerdict> {
    if !root.is_live() {
        return None;
    }
    let out = std::process::Command::new("peermem-rs-refresh")
        .args(["--check", k])
        .output()
        .ok()?;
    refresh_verdict(out.status.code(), &String::from_utf8_lossy(&out.stdout), k)
}

/// The file a plain `modprobe nvidia_peermem` loads for kernel `k` (live
/// system only): peermem-rs's DKMS build or another module of that name,
/// such as NVIDIA's own nvidia-peermem.ko.
fn modprobe_choice(root: &SysRoot, k: &str) -> Option<String> {
    if !root.is_live() {
        return None;
    }
    let out = std::process::Command::new("modinfo")
        .args(["-k", k, "-n", "nvidia_peermem"])
        .output()
        .ok()?;
    let f = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !f.is_empty()).then_some(f)
}

/// The doctor item: the DKMS package's state, or "not installed".
pub(crate) fn item_for(root: &SysRoot, sys: &SysState) -> Option<Item> {
    let versions = root.list(DKMS_TREE);
    // Version directories, next to DKMS's kernel-<kernel>-<arch> links.
    let Some(version) = versions
        .iter()
        .rfind(|v| !v.starts_with('.') && !v.starts_with("kernel-"))
        .cloned()
    else {
        // Say so: an admin reading doctor should not have to infer it.
        let it = item("kernel", "peermem-rs DKMS", Status::Info, "not installed")
            .detail(format!("nothing under {DKMS_TREE}"));
        return Some(if sys.gpus.is_empty() || !sys.peer_modules().is_empty() {
            it
        } else {
            it.remedy("to use peermem-rs as this host's peer-memory client: install its DKMS package (README, install)")
        });
    };
    let k = &sys.kernel;
    let name = "peermem-rs DKMS";
    if let Some(ko) = installed_ko(root, k) {
        let v = format!("{version} installed for {k}");
        let binding = binding_of(root, &ko);
        // A build with weak, unversioned provider references refuses to
        // load on a kernel that checks symbol versions (README "Binding").
        if let Some(b) = binding.as_deref().filter(|b| b.contains("weak")) {
            if has_modversions(root, k) {
                return Some(
                    item("kernel", name, Status::Warn, v)
                        .detail(format!(
                            "{ko}: binding {b}: this kernel checks symbol versions \
                             (CONFIG_MODVERSIONS), so the module refuses to load \
                             unless allow_unversioned=1"
                        ))
                        .remedy(format!(
                            "install the providers for {k} (DOCA-OFED and the NVIDIA driver, \
                             as packages or by DKMS), then, as root: peermem-rs-refresh {k}"
                        )),
                );
            }
        }
        // A provider upgraded or installed after the build (README
        // "Upgrades"), or removed since.
        match run_refresh_check(root, k) {
            Some(RefreshVerdict::Stale(line)) => {
                return Some(
                    item("kernel", name, Status::Warn, v)
                        .detail(format!(
                            "{line}: modprobe nvidia_peermem fails (\"disagrees about version of symbol\")"
                        ))
                        .remedy(format!("as root: peermem-rs-refresh {k}")),
                );
            }
            Some(RefreshVerdict::ProviderGone { what, remedy }) => {
                return Some(
                    item("kernel", name, Status::Fail, v)
                        .detail(what)
                        .remedy(format!("as root: {remedy}")),
                );
            }
            None => {}
        }
        // Both peermem-rs and NVIDIA's module are named nvidia_peermem.
        if let Some(f) = modprobe_choice(root, k).filter(|f| *f != ko) {
            return Some(
                item("kernel", name, Status::Warn, v)
                    .detail(format!(
                        "a plain modprobe nvidia_peermem loads {f}, not peermem-rs's {ko}"
                    ))
                    .remedy("restore /etc/depmod.d/peermem-rs.conf (reinstall peermem-rs-dkms), then depmod -a"),
            );
        }
        let it = item("kernel", name, Status::Pass, v);
        return Some(match binding {
            Some(b) => it.detail(format!("{ko}: binding {b}")),
            None => it.detail(ko),
        });
    }
    let built = root.exists(&format!("{DKMS_TREE}/{version}/{k}"));
    let value = format!(
        "{version} {} for {k}",
        if built {
            "built but not installed"
        } else {
            "not built"
        }
    );
    let status = if matches!(sys.config_rust, Some((false, _))) {
        Status::Info
    } else {
        Status::Warn
    };
    let it = item("kernel", name, status, value);
    // Why: the package's own check when it can run, else what the files tell.
    if let Some((problem, remedy)) =
        run_check(root, &version, k).and_then(|l| split_check_line(&l, k))
    {
        let it = it.detail(problem);
        return Some(if remedy.is_empty() {
            it
        } else {
            it.remedy(remedy)
        });
    }
    let kdir = format!("/lib/modules/{k}/build");
    Some(if matches!(sys.config_rust, Some((false, _))) {
        it.detail("CONFIG_RUST is not set: this kernel cannot load Rust modules, DKMS skips it")
            .remedy("boot a kernel built with CONFIG_RUST=y (Debian: the trixie-backports kernel)")
    } else if !root.exists(&format!("{kdir}/.config")) {
        it.detail(format!("no kernel build tree at {kdir}"))
            .remedy(format!("install the kernel's headers (Debian/Ubuntu: apt install linux-headers-{k}), then dkms autoinstall -k {k}"))
    } else if !root.exists(&format!("{kdir}/rust/libkernel.rmeta")) {
        it.detail(format!("the build tree has no Rust metadata ({kdir}/rust/libkernel.rmeta missing)"))
            .remedy(format!("Debian: run as root (about 4 minutes): peermem-rust-metadata {k} && dkms autoinstall -k {k}; Ubuntu: apt install linux-lib-rust-{k}"))
    } else {
        it.detail(format!(
            "the build tree looks complete: the kernel's exact rustc or bindgen may be missing, or the build failed (dkms status peermem-rs; {DKMS_TREE}/{version}/build/make.log)"
        ))
        .remedy(format!("dkms install peermem-rs/{version} -k {k}, which prints the reason"))
    })
}

#[cfg(test)]
mod tests {
    use super::super::testtree::{mk, tree};
    use super::*;

    fn doctor_item(t: &std::path::Path) -> Option<Item> {
        let root = SysRoot::at(t);
        item_for(&root, &SysState::gather(&root))
    }

    #[test]
    fn no_package_says_not_installed() {
        let t = tree("dkms-none");
        let it = doctor_item(&t).expect("an item saying so");
        assert_eq!(
            (it.status, it.value.as_str()),
            (Status::Info, "not installed")
        );
        assert!(it.detail.unwrap().contains("/var/lib/dkms/peermem-rs"));
    }

    #[test]
    fn installed_names_its_binding() {
        let t = tree("dkms-inst");
        let k = "7.3.4+deb13-amd64";
        mk(
            &t,
            &format!("var/lib/dkms/peermem-rs/0.1.0/{k}/x86_64/module/x"),
            b"",
        );
        mk(
            &t,
            &format!("var/lib/dkms/peermem-rs/kernel-{k}-x86_64/x"),
            b"",
        );
        mk(
            &t,
            &format!("lib/modules/{k}/updates/dkms/nvidia_peermem.ko"),
            b"\x7fELF\0version=0.1.0\0binding=weak: no provider Module.symvers found\0name=nvidia_peermem\0",
        );
        let it = doctor_item(&t).unwrap();
        assert_eq!(it.status, Status::Pass, "{it:?}");
        assert_eq!(it.value, format!("0.1.0 installed for {k}"));
        assert!(it
            .detail
            .unwrap()
            .ends_with("binding weak: no provider Module.symvers found"));
    }

    #[test]
    fn weak_build_on_a_modversions_kernel_warns() {
        let t = tree("dkms-weakmv");
        let k = "7.3.4+deb13-amd64";
        mk(
            &t,
            &format!("var/lib/dkms/peermem-rs/0.1.0/{k}/x86_64/module/x"),
            b"",
        );
        let weak =
            b"\x7fELF\0binding=crc: /a/Module.symvers; weak: NVIDIA driver (no Module.symvers)\0";
        mk(
            &t,
            &format!("lib/modules/{k}/updates/dkms/nvidia_peermem.ko"),
            weak,
        );
        // Without CONFIG_MODVERSIONS: fine, the binding is shown.
        assert_eq!(doctor_item(&t).unwrap().status, Status::Pass);
        mk(
            &t,
            &format!("boot/config-{k}"),
            b"CONFIG_RUST=y\nCONFIG_MODVERSIONS=y\n",
        );
        let it = doctor_item(&t).unwrap();
        assert_eq!(it.status, Status::Warn, "{it:?}");
        assert!(
            it.detail
                .as_deref()
                .unwrap()
                .contains("refuses to load unless allow_unversioned=1"),
            "{it:?}"
        );
        assert!(it
            .remedy
            .as_deref()
            .unwrap()
            .ends_with(&format!("peermem-rs-refresh {k}")));
    }

    #[test]
    fn not_built_says_why() {
        let k = "7.3.4+deb13-amd64";
        // Rust metadata missing.
        let t = tree("dkms-meta");
        mk(&t, "var/lib/dkms/peermem-rs/0.1.0/source/dkms.conf", b"");
        mk(
            &t,
            &format!("lib/modules/{k}/build/.config"),
            b"CONFIG_RUST=y\n",
        );
        let it = doctor_item(&t).unwrap();
        assert_eq!(
            (it.status, it.value.as_str()),
            (Status::Warn, &*format!("0.1.0 not built for {k}"))
        );
        assert!(
            it.detail.as_deref().unwrap().contains("no Rust metadata"),
            "{it:?}"
        );
        assert!(it.remedy.as_deref().unwrap().contains(&format!(
            "peermem-rust-metadata {k} && dkms autoinstall -k {k}"
        )));
        // No headers.
        let t = tree("dkms-hdr");
        mk(&t, "var/lib/dkms/peermem-rs/0.1.0/source/dkms.conf", b"");
        let it = doctor_item(&t).unwrap();
        assert!(
            it.detail
                .as_deref()
                .unwrap()
                .starts_with("no kernel build tree"),
            "{it:?}"
        );
        // CONFIG_RUST off (read from /boot/config-K): only information.
        let t = tree("dkms-norust");
        mk(&t, "var/lib/dkms/peermem-rs/0.1.0/source/dkms.conf", b"");
        mk(
            &t,
            &format!("boot/config-{k}"),
            b"# CONFIG_RUST is not set\n",
        );
        let it = doctor_item(&t).unwrap();
        assert_eq!(it.status, Status::Info, "{it:?}");
        assert!(
            it.detail
                .as_deref()
                .unwrap()
                .starts_with("CONFIG_RUST is not set"),
            "{it:?}"
        );
    }

    #[test]
    fn refresh_check_lines_are_read_by_kind() {
        let k = "7.3.4+deb13-amd64";
        let stale = format!("peermem-rs: {k}: stale: nvidia_p2p_get_pages: /m.ko was built against CRC 0x1, but /n.ko (the module modprobe loads) exports 0x2\n");
        assert_eq!(
            refresh_verdict(Some(1), &stale, k),
            Some(RefreshVerdict::Stale(format!(
                "{k}: stale: nvidia_p2p_get_pages: /m.ko was built against CRC 0x1, but /n.ko (the module modprobe loads) exports 0x2"
            )))
        );
        // Up to date (exit 0), or another kernel's line: nothing.
        assert_eq!(refresh_verdict(Some(0), &stale, k), None);
        assert_eq!(refresh_verdict(Some(1), &stale, "7.2.12+deb13-amd64"), None);
        let gone = format!(
            "peermem-rs: {k}: nvidia_p2p_get_pages: /m.ko was built against it, but no module installed for {k} exports it: \
             the NVIDIA driver's modules were removed (modprobe nvidia_peermem fails with \"Unknown symbol nvidia_p2p_get_pages\"): \
             apt install linux-modules-nvidia-580-open-{k}\n"
        );
        let Some(RefreshVerdict::ProviderGone { what, remedy }) =
            refresh_verdict(Some(1), &gone, k)
        else {
            panic!("not read as a provider gone: {gone}");
        };
        assert!(
            what.starts_with("nvidia_p2p_get_pages: /m.ko was built against it"),
            "{what}"
        );
        assert!(
            what.ends_with(
                "(modprobe nvidia_peermem fails with \"Unknown symbol nvidia_p2p_get_pages\")"
            ),
            "{what}"
        );
        assert_eq!(
            remedy,
            format!("apt install linux-modules-nvidia-580-open-{k}")
        );
        // A remedy with a colon of its own stays whole.
        let gone = format!(
            "peermem-rs: {k}: ib_register_peer_memory_client: /m.ko was built against it, but no module installed for {k} exports it: \
             the peer-memory core's modules were removed (nvidia_peermem loads but has no core to register with): \
             reinstall DOCA-OFED for {k} (mlnx-ofed-kernel-dkms: dkms autoinstall -k {k})"
        );
        let Some(RefreshVerdict::ProviderGone { remedy, .. }) = refresh_verdict(Some(1), &gone, k)
        else {
            panic!("not read as a provider gone: {gone}");
        };
        assert_eq!(
            remedy,
            format!("reinstall DOCA-OFED for {k} (mlnx-ofed-kernel-dkms: dkms autoinstall -k {k})")
        );
    }

    #[test]
    fn check_line_splits_into_problem_and_remedy() {
        let k = "7.3.4+deb13-amd64";
        let l = format!("peermem-rs: kernel {k}: the kernel was built with 'rustc 1.85.1' but the host has rustc: rustc 1.91.1; install the rustc of the Debian release");
        assert_eq!(
            split_check_line(&l, k),
            Some((
                "the kernel was built with 'rustc 1.85.1' but the host has rustc: rustc 1.91.1"
                    .into(),
                "install the rustc of the Debian release".into()
            ))
        );
        assert_eq!(split_check_line("peermem-rs: kernel 6.1: x; y", k), None);
        assert_eq!(split_check_line("something else", k), None);
    }
}
