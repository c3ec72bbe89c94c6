//! RDMA devices and ports from sysfs (`/sys/class/infiniband`), names
//! decoded: port state, physical state, link layer, GID table with each
//! entry's type and netdev, LID and subnet manager; and the device files
//! user space needs (`/dev/infiniband`).

use crate::pci::PciDev;
use crate::root::SysRoot;
use crate::verbs::ffi::Gid;
use serde::Serialize;

/// One GID table entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidEntry {
    pub index: u32,
    pub gid: String,
    /// "RoCE v2", "IB/RoCE v1"; None on InfiniBand.
    pub gid_type: Option<String>,
    pub netdev: Option<String>,
    /// The IPv4 address inside an IPv4-mapped GID.
    pub ipv4: Option<String>,
}

/// One port of an RDMA device.
#[derive(Debug, Clone, Serialize)]
pub struct RdmaPort {
    pub port: u8,
    /// "ACTIVE", "DOWN", "INIT", "ARMED", ...
    pub state: Option<String>,
    /// "LinkUp", "Polling", "Disabled", ...
    pub phys_state: Option<String>,
    /// "InfiniBand" or "Ethernet".
    pub link_layer: Option<String>,
    pub rate: Option<String>,
    pub lid: Option<u16>,
    /// The subnet manager's LID (InfiniBand; 0: no SM answered).
    pub sm_lid: Option<u16>,
    pub gids: Vec<GidEntry>,
    /// The netdev of the first GID that has one (RoCE).
    pub netdev: Option<String>,
}

impl RdmaPort {
    pub fn is_active(&self) -> bool {
        self.state.as_deref() == Some("ACTIVE")
    }
    pub fn is_infiniband(&self) -> bool {
        self.link_layer.as_deref() == Some("InfiniBand")
    }
}

/// An RDMA device.
#[derive(Debug, Clone)]
pub struct RdmaDev {
    pub name: String,
    /// None for software devices (rxe, siw).
    pub pci: Option<PciDev>,
    /// The kernel driver bound to the PCI function (mlx5_core, ...).
    pub driver: Option<String>,
    pub ports: Vec<RdmaPort>,
}

/// `4: ACTIVE` -> `ACTIVE`.
pub fn decode_state(s: &str) -> String {
    match s.split_once(':') {
        Some((_, name)) => name.trim().to_string(),
        None => s.trim().to_string(),
    }
}

fn hex16(s: &str) -> Option<u16> {
    u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// Parses a sysfs GID (`fe80:0000:...`, eight groups) into bytes.
pub fn parse_gid(s: &str) -> Option<Gid> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut g = Gid::default();
    for (i, grp) in groups.iter().enumerate() {
        let v = u16::from_str_radix(grp, 16).ok()?;
        g.0[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(g)
}

/// The sysfs form of a GID: eight groups of four hex digits.
pub fn gid_string(g: &Gid) -> String {
    g.0.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The IPv4 address of an IPv4-mapped GID (`...:0000:ffff:c000:0201`).
pub fn gid_ipv4(gid: &str) -> Option<String> {
    let g = parse_gid(gid)?;
    (g.0[..10] == [0u8; 10] && g.0[10..12] == [0xff, 0xff])
        .then(|| format!("{}.{}.{}.{}", g.0[12], g.0[13], g.0[14], g.0[15]))
}

pub fn ports(root: &SysRoot, dev: &str) -> Vec<RdmaPort> {
    let base = format!("/sys/class/infiniband/{dev}/ports");
    let mut out = Vec::new();
    let mut nums: Vec<u8> = root
        .list(&base)
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    nums.sort();
    for port in nums {
        let p = format!("{base}/{port}");
        let rd = |f: &str| root.read_trim(&format!("{p}/{f}"));
        let mut gids = Vec::new();
        let mut idx: Vec<u32> = root
            .list(&format!("{p}/gids"))
            .iter()
            .filter_map(|i| i.parse().ok())
            .collect();
        idx.sort();
        for i in idx {
            let Some(gid) = rd(&format!("gids/{i}")) else {
                continue;
            };
            if parse_gid(&gid).is_none_or(|g| g.0 == [0u8; 16]) {
                continue;
            }
            gids.push(GidEntry {
                index: i,
                ipv4: gid_ipv4(&gid),
                gid,
                gid_type: rd(&format!("gid_attrs/types/{i}")).filter(|t| !t.is_empty()),
                netdev: rd(&format!("gid_attrs/ndevs/{i}")).filter(|t| !t.is_empty()),
            });
        }
        let link_layer = rd("link_layer");
        let ib = link_layer.as_deref() == Some("InfiniBand");
        out.push(RdmaPort {
            port,
            state: rd("state").map(|s| decode_state(&s)),
            phys_state: rd("phys_state").map(|s| decode_state(&s)),
            rate: rd("rate"),
            lid: if ib {
                rd("lid").and_then(|s| hex16(&s))
            } else {
                None
            },
            sm_lid: if ib {
                rd("sm_lid").and_then(|s| hex16(&s))
            } else {
                None
            },
            netdev: gids.iter().find_map(|g| g.netdev.clone()),
            gids,
            link_layer,
        });
    }
    out
}

pub fn devices(root: &SysRoot) -> Vec<RdmaDev> {
    root.list("/sys/class/infiniband")
        .into_iter()
        .map(|name| {
            let pci = root
                .resolve(&format!("/sys/class/infiniband/{name}/device"))
                .and_then(|p| PciDev::load_at(root, &p));
            let driver = pci.as_ref().and_then(|p| {
                root.resolve(&format!("{}/driver", p.sysfs))
                    .and_then(|d| d.rsplit('/').next().map(str::to_string))
            });
            RdmaDev {
                ports: ports(root, &name),
                driver,
                pci,
                name,
            }
        })
        .collect()
}

/// A device file under /dev/infiniband and whether this user may use it.
#[derive(Debug, Clone, Serialize)]
pub struct DevFile {
    pub path: String,
    /// Permission bits, e.g. "0666".
    pub mode: Option<String>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// access(R_OK | W_OK) for this process.
    pub read_write: bool,
}

pub fn dev_files(root: &SysRoot) -> Vec<DevFile> {
    use std::os::unix::fs::MetadataExt;
    root.list("/dev/infiniband")
        .into_iter()
        .filter(|n| n.starts_with("uverbs") || n == "rdma_cm")
        .map(|n| {
            let path = format!("/dev/infiniband/{n}");
            let host = root.path(&path);
            let meta = std::fs::metadata(&host).ok();
            DevFile {
                mode: meta.as_ref().map(|m| format!("{:04o}", m.mode() & 0o7777)),
                uid: meta.as_ref().map(|m| m.uid()),
                gid: meta.as_ref().map(|m| m.gid()),
                read_write: access_rw(&host),
                path,
            }
        })
        .collect()
}

fn access_rw(p: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path; access() only reads it.
    unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_decode() {
        assert_eq!(decode_state("4: ACTIVE"), "ACTIVE");
        assert_eq!(decode_state("5: LinkUp"), "LinkUp");
        assert_eq!(decode_state("DOWN"), "DOWN");
        assert_eq!(
            gid_ipv4("0000:0000:0000:0000:0000:ffff:c000:0201").as_deref(),
            Some("192.0.2.1")
        );
        assert_eq!(gid_ipv4("fe80:0000:0000:0000:5054:00ff:fe12:3456"), None);
    }

    #[test]
    fn fixture_ports() {
        let root = crate::fixture("switch");
        let d = devices(&root);
        let m = d.iter().find(|d| d.name == "mlx5_0").expect("mlx5_0");
        assert_eq!(m.driver.as_deref(), Some("mlx5_core"));
        let p = &m.ports[0];
        assert_eq!(p.state.as_deref(), Some("ACTIVE"));
        assert_eq!(p.phys_state.as_deref(), Some("LinkUp"));
        assert_eq!(p.link_layer.as_deref(), Some("Ethernet"));
        assert_eq!(p.netdev.as_deref(), Some("ens1f0np0"));
        assert_eq!(p.gids.len(), 2);
        assert_eq!(p.gids[1].gid_type.as_deref(), Some("RoCE v2"));
        assert_eq!(p.gids[1].ipv4.as_deref(), Some("10.0.0.11"));
    }

    #[test]
    fn gid_round_trip() {
        let s = "0000:0000:0000:0000:0000:ffff:c000:0201";
        let g = parse_gid(s).unwrap();
        assert_eq!(&g.0[10..], &[0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(gid_string(&g), s);
        assert!(parse_gid("fe80::1").is_none());
    }
}
