//! NVIDIA's nvidia-peermem built as a stub (docs/facts/field-notes.md, row
//! 1): when its DKMS conftest finds none of the peer-memory core's symbols
//! (no core `Module.symvers` where it looks, as with Canonical's
//! `doca-ofed-*-dkms`), the module is compiled without its client, and its
//! init only logs "module compiled without IB peer memory symbols present"
//! and returns -EINVAL: `modprobe nvidia_peermem` says "Invalid argument".
//! A peer-memory client imports `ib_register_peer_memory_client`, so the
//! name is in its symbol table (and, with symbol versions, in
//! `__versions`); a stub's file holds it nowhere.  Read statically, from
//! the files depmod lists for the running kernel, loaded or not.

use super::{item, Item};
use crate::report::Status;
use crate::root::SysRoot;
use crate::sysinfo::SysState;

/// The core's entry point as a string-table entry.
const CORE_ENTRY: &[u8] = b"\0ib_register_peer_memory_client\0";

/// What one module file is.
#[derive(Debug, PartialEq, Eq)]
enum PeermemBuild {
    /// It imports the core's entry point: a peer-memory client.
    Client,
    /// It does not: a stub whose init fails with EINVAL.
    Stub,
}

/// Classifies an uncompressed module image.
fn classify(elf: &[u8]) -> PeermemBuild {
    if elf.windows(CORE_ENTRY.len()).any(|w| w == CORE_ENTRY) {
        PeermemBuild::Client
    } else {
        PeermemBuild::Stub
    }
}

/// The paths (relative to `/lib/modules/<k>/`) of every module file named
/// nvidia-peermem or nvidia_peermem in depmod's `modules.dep` text.
fn peermem_files(modules_dep: &str) -> Vec<String> {
    modules_dep
        .lines()
        .filter_map(|l| l.split_once(':').map(|(p, _)| p.trim()))
        .filter(|p| {
            let base = p.rsplit('/').next().unwrap_or(p);
            let stem = base.split(".ko").next().unwrap_or(base);
            stem.replace('-', "_") == "nvidia_peermem" && base.contains(".ko")
        })
        .map(str::to_string)
        .collect()
}

/// The uncompressed image of module file `rel` (.ko, .ko.zst, .ko.xz,
/// .ko.gz; the compressed ones through their tools), or None.
fn image(root: &SysRoot, rel: &str) -> Option<Vec<u8>> {
    let tool = if rel.ends_with(".ko") {
        return root.read_bytes(rel).ok();
    } else if rel.ends_with(".zst") {
        "zstd"
    } else if rel.ends_with(".xz") {
        "xz"
    } else if rel.ends_with(".gz") {
        "gzip"
    } else {
        return None;
    };
    let out = std::process::Command::new(tool)
        .arg("-dc")
        .arg(root.path(rel))
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

/// The doctor row: the nvidia-peermem of the running kernel is a stub.
/// depmod lists one file per module name (`-` and `_` alike), the one a
/// plain modprobe loads (search order and overrides applied), so a stub
/// that peermem-rs's build shadows is not seen, and one that is seen is
/// what `modprobe nvidia_peermem` gets.  Nothing when there is none.
pub(crate) fn item_for(root: &SysRoot, sys: &SysState) -> Option<Item> {
    let dir = format!("/lib/modules/{}", sys.kernel);
    let dep = root.read(&format!("{dir}/modules.dep"))?;
    let files: Vec<(String, Option<PeermemBuild>)> = peermem_files(&dep)
        .into_iter()
        .map(|p| {
            let abs = if p.starts_with('/') {
                p
            } else {
                format!("{dir}/{p}")
            };
            let what = image(root, &abs).map(|b| classify(&b));
            (abs, what)
        })
        .collect();
    let stubs: Vec<&str> = files
        .iter()
        .filter(|(_, w)| *w == Some(PeermemBuild::Stub))
        .map(|(p, _)| p.as_str())
        .collect();
    if stubs.is_empty() {
        return None;
    }
    // A kernel without the peer-memory interface: no client can build
    // there, NVIDIA's stub is what its conftest had to make.
    if sys.peer_interface == Some(false) {
        return Some(
            item(
                "modules",
                "nvidia-peermem stub",
                Status::Info,
                stubs.join(" "),
            )
            .detail(
                "built without the peer-memory core's symbols, as it must be on a kernel without \
                 the peer-memory interface: GPUDirect RDMA goes through dma-buf here",
            ),
        );
    }
    Some(
        item("modules", "nvidia-peermem stub", Status::Fail, stubs.join(" "))
            .detail(
                "built without the peer-memory core's symbols (no ib_register_peer_memory_client \
                 in the module): its init returns -EINVAL, so `modprobe nvidia_peermem` fails with \
                 \"Invalid argument\" and dmesg says \"module compiled without IB peer memory \
                 symbols present\"; NVIDIA's DKMS build found no Module.symvers of the core (DOCA-OFED \
                 packages that install none, or the driver built before DOCA-OFED)",
            )
            .remedy(
                "peermem-rs binds to the CRCs of the core's installed modules (README, Binding); or \
                 reinstall the NVIDIA driver's DKMS package after DOCA-OFED's mlnx-ofed-kernel-dkms, \
                 whose Module.symvers its conftest reads",
            ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::testtree::{mk, tree, Tree};
    use super::*;

    const K: &str = "7.3.4+deb13-amd64";
    /// A client's module: the core's entry point among its symbols.
    const CLIENT: &[u8] =
        b"\x7fELF\0nv_mem_client_init\0ib_register_peer_memory_client\0nvidia_p2p_get_pages\0";
    /// A stub's: NVIDIA's driver symbols, none of the core's.
    const STUB: &[u8] = b"\x7fELF\0nv_mem_client_init\0nvidia_p2p_get_pages\0module compiled without IB peer memory symbols present\0";

    #[test]
    fn a_module_without_the_cores_entry_point_is_a_stub() {
        assert_eq!(classify(CLIENT), PeermemBuild::Client);
        assert_eq!(classify(STUB), PeermemBuild::Stub);
        // A longer name that merely contains it is not the import.
        assert_eq!(
            classify(b"\0x_ib_register_peer_memory_client\0"),
            PeermemBuild::Stub
        );
    }

    #[test]
    fn modules_dep_names_both_spellings() {
        let dep = "kernel/drivers/infiniband/core/ib_core.ko.zst:\n\
                   kernel/nvidia-580-open/nvidia-peermem.ko.zst: kernel/nvidia-580-open/nvidia.ko.zst\n\
                   updates/dkms/nvidia_peermem.ko.xz: kernel/nvidia.ko\n\
                   kernel/nvidia-580-open/nvidia-peermem-extra.ko:\n";
        assert_eq!(
            peermem_files(dep),
            [
                "kernel/nvidia-580-open/nvidia-peermem.ko.zst",
                "updates/dkms/nvidia_peermem.ko.xz"
            ]
        );
    }

    fn stub_item(t: &std::path::Path) -> Option<Item> {
        let root = SysRoot::at(t);
        item_for(&root, &SysState::gather(&root))
    }

    /// A tree whose depmod lists `ko` (under /lib/modules/K), holding `elf`.
    fn listed(tag: &str, ko: &str, elf: &[u8]) -> Tree {
        let t = tree(tag);
        let dep = format!("{ko}:\n");
        mk(&t, &format!("lib/modules/{K}/modules.dep"), dep.as_bytes());
        mk(&t, &format!("lib/modules/{K}/{ko}"), elf);
        t
    }

    #[test]
    fn the_stub_modprobe_loads_fails_the_row() {
        let ko = "kernel/nvidia-580-open/nvidia-peermem.ko";
        let t = listed("stub-fail", ko, STUB);
        let it = stub_item(&t).expect("a row for the stub");
        assert_eq!(it.status, Status::Fail, "{it:?}");
        assert_eq!(it.value, format!("/lib/modules/{K}/{ko}"));
        assert!(
            it.detail.as_deref().unwrap().contains("Invalid argument"),
            "{it:?}"
        );
        assert!(
            it.remedy.as_deref().unwrap().contains("peermem-rs"),
            "{it:?}"
        );
        // The same file as a client: no row.
        mk(&t, &format!("lib/modules/{K}/{ko}"), CLIENT);
        assert!(stub_item(&t).is_none());
        // No modules.dep (depmod never ran): no row.
        let t = tree("stub-nodep");
        mk(&t, &format!("lib/modules/{K}/{ko}"), STUB);
        assert!(stub_item(&t).is_none());
    }

    #[test]
    fn a_stub_on_a_kernel_without_the_peer_memory_interface_is_information() {
        let t = listed("stub-nocore", "updates/dkms/nvidia-peermem.ko", STUB);
        // depmod's symbol list: an upstream ib_core, no peer-memory core.
        mk(
            &t,
            &format!("lib/modules/{K}/modules.symbols"),
            b"alias symbol:ib_register_mad_agent ib_core\n",
        );
        let root = SysRoot::at(&*t);
        let sys = SysState::gather(&root);
        assert_eq!(sys.peer_interface, Some(false));
        let it = item_for(&root, &sys).expect("a row");
        assert_eq!(it.status, Status::Info, "{it:?}");
    }
}
