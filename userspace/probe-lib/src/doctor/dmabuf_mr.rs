//! doctor's dma-buf MR row per RDMA device: one real `ibv_reg_dmabuf_mr`
//! of a host dma-buf (udmabuf), the decisive test a tool without a GPU can
//! make of "does this device and driver take dma-buf MRs" (for mlx5: the
//! kernel's on-demand-paging gate and the UMR capability together). The
//! errno decides; docs/facts/libraries.md gives the kernel sources.

use super::{item, Item};
use crate::rdma::RdmaDev;
use crate::report::Status;
use crate::root::SysRoot;
use crate::sysinfo::SysState;
use crate::udmabuf::{HostDmabuf, UdmabufError, DEV_UDMABUF};
use crate::verbs::{dmabuf_unsupported_errno, errno_name, ffi::Verbs, Context};

/// Why the registration was not attempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRun {
    /// doctor reads a saved tree (`--sysroot`), not this host's devices.
    SavedTree,
    /// libibverbs did not load (its loader error).
    NoVerbs(String),
    /// libibverbs older than rdma-core 34 has no `ibv_reg_dmabuf_mr`.
    NoSymbol,
    /// Opening the device or allocating its PD failed.
    Device(String),
    /// The host dma-buf could not be made.
    Udmabuf(UdmabufError),
}

/// What one registration attempt on one device gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MrTest {
    Registered,
    /// `ibv_reg_dmabuf_mr` failed with this errno.
    Refused(i32),
    NotRun(NotRun),
}

/// Registers a one-page udmabuf on `dev` and deregisters it.
fn attempt(dev: &str) -> MrTest {
    let v = match Verbs::get() {
        Ok(v) => v,
        Err(e) => return MrTest::NotRun(NotRun::NoVerbs(e)),
    };
    if v.reg_dmabuf_mr.is_none() {
        return MrTest::NotRun(NotRun::NoSymbol);
    }
    let ctx = match Context::open(dev) {
        Ok(c) => c,
        Err(e) => return MrTest::NotRun(NotRun::Device(e)),
    };
    let pd = match ctx.alloc_pd() {
        Ok(p) => p,
        Err(e) => return MrTest::NotRun(NotRun::Device(e.to_string())),
    };
    let buf = match HostDmabuf::new(1) {
        Ok(b) => b,
        Err(e) => return MrTest::NotRun(NotRun::Udmabuf(e)),
    };
    let r = match pd.reg_dmabuf_mr(buf.fd(), buf.len(), 0) {
        Ok(mr) => {
            let _ = mr.dereg();
            MrTest::Registered
        }
        Err(e) => MrTest::Refused(e.errno),
    };
    crate::trace!("doctor: {dev}: ibv_reg_dmabuf_mr of a udmabuf: {r:?}");
    r
}

/// The device as the verdict needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevKind {
    Mlx5,
    /// rxe, siw: no PCI function.
    Software,
    Other,
}

pub fn dev_kind(d: &RdmaDev) -> DevKind {
    match (&d.pci, d.driver.as_deref()) {
        (None, _) => DevKind::Software,
        (Some(_), Some(drv)) if drv.starts_with("mlx5") => DevKind::Mlx5,
        _ => DevKind::Other,
    }
}

/// The row for device `name` from the test's outcome. Pure: the unit tests
/// drive it with every outcome.
pub fn verdict(name: &str, kind: DevKind, gpus: bool, t: &MrTest) -> Item {
    let row = format!("MR on {name}");
    // Missing dma-buf MRs matter where a GPU could use this NIC.
    let missing = if gpus && kind != DevKind::Software {
        Status::Warn
    } else {
        Status::Info
    };
    match t {
        MrTest::Registered => item("dma-buf", row, Status::Pass, "works")
            .detail("ibv_reg_dmabuf_mr of a host dma-buf (udmabuf) registered and deregistered: the device and driver take dma-buf MRs (for mlx5: on-demand paging and UMR are there)"),
        MrTest::Refused(e) if dmabuf_unsupported_errno(*e) => {
            let why = match kind {
                DevKind::Software => "soft RDMA (rxe, siw) has no dma-buf MRs: its kernel driver or its rdma-core provider has no dma-buf registration".to_string(),
                DevKind::Mlx5 => "mlx5_ib refuses dma-buf MRs with EOPNOTSUPP when the kernel is built without CONFIG_INFINIBAND_ON_DEMAND_PAGING or CONFIG_INFINIBAND_USER_MEM".to_string(),
                DevKind::Other => "the driver (or its rdma-core provider) implements no dma-buf registration, or ib_uverbs predates it (kernel < 5.12)".to_string(),
            };
            let it = item("dma-buf", row, missing, format!("no dma-buf MRs ({})", errno_name(*e)))
                .detail(format!("ibv_reg_dmabuf_mr of a host dma-buf: {why}; only the peer-memory path can register GPU memory on this device"));
            match kind {
                DevKind::Software => it,
                DevKind::Mlx5 => it.remedy("a kernel built with CONFIG_INFINIBAND_ON_DEMAND_PAGING=y, or a peer-memory client"),
                DevKind::Other => it.remedy("a peer-memory client, or a NIC whose driver takes dma-buf MRs"),
            }
        }
        MrTest::Refused(e) if *e == libc::EINVAL && kind == DevKind::Mlx5 => {
            item("dma-buf", row, missing, "no dma-buf MRs (EINVAL: no UMR)")
                .detail("ibv_reg_dmabuf_mr of a one-page host dma-buf: mlx5_ib refuses with EINVAL when the device cannot load the MR's page list by UMR (mlx5r_umr_can_load_pas: capability umr_modify_entity_size_disabled); the page is far below UMR's size limit, so the capability is missing")
                .remedy("a peer-memory client; or check `dmesg` and the firmware (UMR can be disabled for this function)")
        }
        MrTest::Refused(e) => item("dma-buf", row, Status::Warn, format!("failed ({})", errno_name(*e)))
            .detail(format!("ibv_reg_dmabuf_mr of a one-page host dma-buf failed with {}: the device has a dma-buf MR method but this registration did not go through", crate::verbs::errno_text(*e)))
            .remedy("`peermem-probe --verbose check` and `dmesg` for the driver's reason"),
        MrTest::NotRun(n) => {
            let (value, why, fix) = not_run_text(n);
            let it = item("dma-buf", row, Status::Info, value).detail(why);
            match fix {
                Some(f) => it.remedy(f),
                None => it,
            }
        }
    }
}

/// Value, cause and remedy of an untried registration.
fn not_run_text(n: &NotRun) -> (String, String, Option<String>) {
    let nt = "not tested".to_string();
    match n {
        NotRun::SavedTree => (nt, "reading a saved system tree: the registration is only tried on the live host".into(), None),
        NotRun::NoVerbs(e) => (nt, format!("libibverbs did not load: {e}"), Some("install rdma-core's libibverbs (libibverbs1 / rdma-core)".into())),
        NotRun::NoSymbol => (nt, "this libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than 34): no library on this host can register dma-buf memory".into(), Some("rdma-core 34 or newer".into())),
        NotRun::Device(e) => (nt, format!("could not open the device: {e}"), Some("`peermem-probe check` for the verbs diagnosis".into())),
        NotRun::Udmabuf(e) if e.step == "open /dev/udmabuf" && e.errno == libc::ENOENT => (nt, format!("no {DEV_UDMABUF} to make a host dma-buf (CONFIG_UDMABUF off, or the udmabuf module not loaded)"), Some("`modprobe udmabuf`, then run doctor again".into())),
        NotRun::Udmabuf(e) if e.errno == libc::EACCES || e.errno == libc::EPERM => (nt, format!("no permission to make a host dma-buf: {e}"), Some(format!("run doctor as root (or with access to {DEV_UDMABUF})"))),
        NotRun::Udmabuf(e) => (nt, format!("could not make a host dma-buf: {e}"), None),
    }
}

/// One row per RDMA device.
pub(super) fn items(root: &SysRoot, sys: &SysState, items: &mut Vec<Item>) {
    let gpus = !sys.gpus.is_empty();
    for d in &sys.rdma {
        let t = if root.is_live() {
            attempt(&d.name)
        } else {
            MrTest::NotRun(NotRun::SavedTree)
        };
        items.push(verdict(&d.name, dev_kind(d), gpus, &t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(kind: DevKind, gpus: bool, t: MrTest) -> Item {
        verdict("dev0", kind, gpus, &t)
    }

    #[test]
    fn registered_is_a_pass() {
        let it = v(DevKind::Mlx5, true, MrTest::Registered);
        assert_eq!((it.status, it.value.as_str()), (Status::Pass, "works"));
        assert_eq!(it.name, "MR on dev0");
    }

    #[test]
    fn eopnotsupp_on_rxe_is_no_dmabuf_mrs() {
        let it = v(DevKind::Software, false, MrTest::Refused(libc::EOPNOTSUPP));
        assert_eq!(it.status, Status::Info);
        assert_eq!(it.value, "no dma-buf MRs (EOPNOTSUPP)");
        assert!(it
            .detail
            .as_deref()
            .unwrap()
            .contains("soft RDMA (rxe, siw)"));
        assert!(it.remedy.is_none());
        // A GPU does not make a software device's missing MRs a warning.
        assert_eq!(
            v(DevKind::Software, true, MrTest::Refused(libc::EOPNOTSUPP)).status,
            Status::Info
        );
    }

    #[test]
    fn mlx5_refusals_name_odp_or_umr() {
        let odp = v(DevKind::Mlx5, true, MrTest::Refused(libc::EOPNOTSUPP));
        assert_eq!(odp.status, Status::Warn);
        assert!(odp
            .detail
            .as_deref()
            .unwrap()
            .contains("CONFIG_INFINIBAND_ON_DEMAND_PAGING"));
        assert!(odp
            .remedy
            .as_deref()
            .unwrap()
            .contains("ON_DEMAND_PAGING=y"));
        let umr = v(DevKind::Mlx5, true, MrTest::Refused(libc::EINVAL));
        assert_eq!(umr.value, "no dma-buf MRs (EINVAL: no UMR)");
        assert!(umr
            .detail
            .as_deref()
            .unwrap()
            .contains("mlx5r_umr_can_load_pas"));
        // Without a GPU nothing depends on it.
        assert_eq!(
            v(DevKind::Mlx5, false, MrTest::Refused(libc::EINVAL)).status,
            Status::Info
        );
    }

    #[test]
    fn other_errnos_fail_with_their_name() {
        for e in [libc::EPROTONOSUPPORT, libc::ENOSYS, 524] {
            assert!(
                v(DevKind::Other, true, MrTest::Refused(e))
                    .value
                    .starts_with("no dma-buf MRs ("),
                "{e}"
            );
        }
        // EINVAL is UMR only on mlx5.
        let it = v(DevKind::Other, true, MrTest::Refused(libc::EINVAL));
        assert_eq!(
            (it.status, it.value.as_str()),
            (Status::Warn, "failed (EINVAL)")
        );
        let it = v(DevKind::Mlx5, false, MrTest::Refused(libc::ENOMEM));
        assert_eq!(
            (it.status, it.value.as_str()),
            (Status::Warn, "failed (ENOMEM)")
        );
    }

    #[test]
    fn untried_registrations_say_why() {
        let enoent = UdmabufError {
            step: "open /dev/udmabuf",
            errno: libc::ENOENT,
        };
        let it = v(DevKind::Mlx5, true, MrTest::NotRun(NotRun::Udmabuf(enoent)));
        assert_eq!((it.status, it.value.as_str()), (Status::Info, "not tested"));
        assert!(it.detail.as_deref().unwrap().contains("no /dev/udmabuf"));
        assert!(it.remedy.as_deref().unwrap().contains("modprobe udmabuf"));
        let eacces = UdmabufError {
            step: "open /dev/udmabuf",
            errno: libc::EACCES,
        };
        let it = v(DevKind::Mlx5, true, MrTest::NotRun(NotRun::Udmabuf(eacces)));
        assert!(
            it.detail.as_deref().unwrap().contains("no permission"),
            "{it:?}"
        );
        let it = v(DevKind::Other, true, MrTest::NotRun(NotRun::NoSymbol));
        assert!(it
            .detail
            .as_deref()
            .unwrap()
            .contains("rdma-core older than 34"));
        let it = v(DevKind::Other, true, MrTest::NotRun(NotRun::SavedTree));
        assert!(it.detail.as_deref().unwrap().contains("saved system tree"));
    }

    #[test]
    fn device_kinds() {
        let mut d = RdmaDev {
            name: "rxe0".into(),
            pci: None,
            driver: None,
            ports: vec![],
        };
        assert_eq!(dev_kind(&d), DevKind::Software);
        d.pci = Some(crate::pci::PciDev {
            bdf: "0000:3b:00.0".into(),
            sysfs: String::new(),
            vendor: 0x15b3,
            device: 0x101b,
            class: 0x020700,
            numa_node: None,
        });
        d.driver = Some("mlx5_core".into());
        assert_eq!(dev_kind(&d), DevKind::Mlx5);
        d.driver = Some("bnxt_en".into());
        assert_eq!(dev_kind(&d), DevKind::Other);
    }
}
