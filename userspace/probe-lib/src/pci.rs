//! PCI devices from sysfs: where a GPU and an RDMA NIC sit relative to each
//! other, and whether the bridges between them redirect peer-to-peer
//! traffic (ACS).

use crate::bdf::is_bdf;
use crate::root::SysRoot;
use serde::Serialize;

pub const VENDOR_NVIDIA: u64 = 0x10de;

/// Port types from the PCI Express capability (Device/Port Type field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PortType {
    Endpoint,
    RootPort,
    SwitchUpstream,
    SwitchDownstream,
    PcieToPciBridge,
    Other,
    /// No PCIe capability readable (conventional PCI, or config space not
    /// readable without root).
    Unknown,
}

/// ACS state of one bridge, read from its extended configuration space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Acs {
    /// The bridge has no ACS capability: nothing redirects P2P.
    Absent,
    /// ACS capability present; `redirect` is true when P2P Request
    /// Redirect, Completion Redirect or Egress Control is enabled.
    Present { control: u16, redirect: bool },
    /// The extended config space could not be read (needs root).
    Unknown,
}

const ACS_RR: u16 = 1 << 2;
const ACS_CR: u16 = 1 << 3;
const ACS_EC: u16 = 1 << 5;

/// Parsed facts from a device's configuration space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigInfo {
    pub port_type: PortType,
    pub acs: Acs,
}

fn rd16(c: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*c.get(off)?, *c.get(off + 1)?]))
}
fn rd32(c: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *c.get(off)?,
        *c.get(off + 1)?,
        *c.get(off + 2)?,
        *c.get(off + 3)?,
    ]))
}

/// Parses a `config` file's bytes. Unprivileged readers see only the
/// first 64 bytes; then both facts are unknown.
pub fn parse_config(c: &[u8]) -> ConfigInfo {
    let mut port_type = PortType::Unknown;
    // Standard capability list: status bit 4, pointer at 0x34.
    if c.len() >= 0x100 && rd16(c, 0x06).unwrap_or(0) & 0x10 != 0 {
        let mut ptr = (c[0x34] & 0xfc) as usize;
        let mut guard = 0;
        while (0x40..0x100).contains(&ptr) && guard < 48 {
            let id = c[ptr];
            if id == 0x10 {
                let caps = rd16(c, ptr + 2).unwrap_or(0);
                port_type = match (caps >> 4) & 0xf {
                    0 | 1 => PortType::Endpoint,
                    4 => PortType::RootPort,
                    5 => PortType::SwitchUpstream,
                    6 => PortType::SwitchDownstream,
                    7 => PortType::PcieToPciBridge,
                    _ => PortType::Other,
                };
                break;
            }
            ptr = (c[ptr + 1] & 0xfc) as usize;
            guard += 1;
        }
    }
    let acs = if c.len() < 0x108 {
        Acs::Unknown
    } else {
        let mut off = 0x100usize;
        let mut found = Acs::Absent;
        let mut guard = 0;
        while off >= 0x100 && guard < 96 {
            let Some(hdr) = rd32(c, off) else { break };
            if hdr == 0 || hdr == 0xffff_ffff {
                break;
            }
            if hdr & 0xffff == 0x000d {
                let control = rd16(c, off + 6).unwrap_or(0);
                found = Acs::Present {
                    control,
                    redirect: control & (ACS_RR | ACS_CR | ACS_EC) != 0,
                };
                break;
            }
            off = (hdr >> 20) as usize & 0xffc;
            guard += 1;
        }
        found
    };
    ConfigInfo { port_type, acs }
}

/// One PCI function as seen in sysfs.
#[derive(Debug, Clone)]
pub struct PciDev {
    pub bdf: String,
    /// The resolved sysfs path, `/sys/devices/pci0000:00/0000:00:01.0/...`.
    pub sysfs: String,
    pub vendor: u64,
    pub device: u64,
    pub class: u64,
    pub numa_node: Option<i64>,
}

impl PciDev {
    pub fn load(root: &SysRoot, bdf: &str) -> Option<PciDev> {
        let link = format!("/sys/bus/pci/devices/{bdf}");
        let sysfs = root.resolve(&link)?;
        Self::load_at(root, &sysfs)
    }

    /// Loads the device whose resolved sysfs directory is `sysfs`.
    pub fn load_at(root: &SysRoot, sysfs: &str) -> Option<PciDev> {
        let bdf = sysfs.rsplit('/').next()?.to_string();
        if !is_bdf(&bdf) {
            return None;
        }
        Some(PciDev {
            vendor: root.read_hex(&format!("{sysfs}/vendor")).unwrap_or(0),
            device: root.read_hex(&format!("{sysfs}/device")).unwrap_or(0),
            class: root.read_hex(&format!("{sysfs}/class")).unwrap_or(0),
            numa_node: root
                .read_trim(&format!("{sysfs}/numa_node"))
                .and_then(|s| s.parse::<i64>().ok())
                .filter(|n| *n >= 0),
            sysfs: sysfs.to_string(),
            bdf,
        })
    }

    /// The chain from the host bridge down: `["pci0000:00", "0000:00:01.0", ..., bdf]`.
    pub fn chain(&self) -> Vec<String> {
        let inner = self.sysfs.trim_start_matches("/sys/devices/");
        let mut out = Vec::new();
        for part in inner.split('/') {
            if part.starts_with("pci") || is_bdf(part) {
                out.push(part.to_string());
            }
        }
        out
    }

    pub fn config(&self, root: &SysRoot) -> ConfigInfo {
        match root.read_bytes(&format!("{}/config", self.sysfs)) {
            Ok(c) => parse_config(&c),
            Err(_) => ConfigInfo {
                port_type: PortType::Unknown,
                acs: Acs::Unknown,
            },
        }
    }

    pub fn is_nvidia_gpu(&self) -> bool {
        self.vendor == VENDOR_NVIDIA && matches!(self.class >> 8, 0x0300 | 0x0302)
    }

    /// Size of BAR1 (the window through which peers reach GPU memory).
    pub fn bar1_bytes(&self, root: &SysRoot) -> Option<u64> {
        bar1_size(&root.read(&format!("{}/resource", self.sysfs))?)
    }
}

/// `IORESOURCE_MEM_64` (include/linux/ioport.h): a 64-bit memory BAR, which
/// takes two BAR registers, so sysfs lists an empty line for its upper half.
const IORESOURCE_MEM_64: u64 = 0x0010_0000;

/// The size of a GPU's BAR1 from its sysfs `resource` file (one line per
/// BAR register: start, end, flags).  BAR1 follows BAR0, the register
/// window; when BAR0 is 64 bits wide (Hopper and later, and GPUs passed to
/// a VM) it takes registers 0 and 1 and BAR1 is listed third, else second.
/// `None` when unreadable or unassigned (all zero).
fn bar1_size(resource: &str) -> Option<u64> {
    let field = |line: &str, i: usize| {
        let f = line.split_whitespace().nth(i)?;
        u64::from_str_radix(f.trim_start_matches("0x"), 16).ok()
    };
    let mut lines = resource.lines();
    let bar0 = lines.next()?;
    let skip = usize::from(field(bar0, 2)? & IORESOURCE_MEM_64 != 0);
    let line = lines.nth(skip)?;
    let (start, end) = (field(line, 0)?, field(line, 1)?);
    (end > start).then(|| end - start + 1)
}

/// All PCI functions, sorted by address.
pub fn all_devices(root: &SysRoot) -> Vec<PciDev> {
    root.list("/sys/bus/pci/devices")
        .iter()
        .filter_map(|bdf| PciDev::load(root, bdf))
        .collect()
}

pub fn nvidia_gpus(root: &SysRoot) -> Vec<PciDev> {
    all_devices(root)
        .into_iter()
        .filter(|d| d.is_nvidia_gpu())
        .collect()
}

/// How a GPU and a NIC reach each other, from best to worst for P2P.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathVerdict {
    /// Both below one PCIe switch: P2P never leaves the switch (PIX/PXB).
    SameSwitch,
    /// Their nearest common bridge is a root port.
    SameRootPort,
    /// Different root ports or host bridges on one CPU socket (PHB/NODE):
    /// P2P crosses the CPU's root complex.
    AcrossHostBridge,
    /// Different NUMA nodes (SYS): P2P crosses the inter-socket link.
    AcrossSockets,
    /// At least one side is not a PCI device (e.g. soft-RoCE).
    NotPci,
}

impl PathVerdict {
    pub fn label(self) -> &'static str {
        match self {
            Self::SameSwitch => "same PCIe switch",
            Self::SameRootPort => "same root port",
            Self::AcrossHostBridge => "across the host bridge",
            Self::AcrossSockets => "across CPU sockets",
            Self::NotPci => "not a PCI path",
        }
    }
}

/// A bridge between the two devices and its ACS state.
#[derive(Debug, Clone, Serialize)]
pub struct BridgeAcs {
    pub bdf: String,
    pub port_type: PortType,
    pub acs: Acs,
}

/// The PCIe relation of one GPU and one RDMA device.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    pub verdict: PathVerdict,
    /// nvidia-smi topo's short name for the same relation.
    pub nvsmi: &'static str,
    /// Bridges between the two devices (below their common ancestor, or
    /// up to the root ports when there is none).
    pub bridges: Vec<BridgeAcs>,
    /// Bridges on the path whose ACS redirects P2P traffic upstream.
    pub acs_redirecting: Vec<String>,
    /// True when some bridge's ACS state could not be read.
    pub acs_unknown: bool,
    pub detail: String,
}

/// Works out the path between `a` (GPU) and `b` (NIC).
pub fn topology(root: &SysRoot, a: &PciDev, b: &PciDev) -> Topology {
    let ca = a.chain();
    let cb = b.chain();
    let common = ca.iter().zip(cb.iter()).take_while(|(x, y)| x == y).count();
    // Bridges strictly between the common ancestor and each endpoint.
    let start = common.max(1);
    let mut bridge_bdfs: Vec<&String> = Vec::new();
    for chain in [&ca, &cb] {
        if chain.len() > 1 {
            for bdf in &chain[start.min(chain.len() - 1)..chain.len() - 1] {
                if !bridge_bdfs.contains(&bdf) {
                    bridge_bdfs.push(bdf);
                }
            }
        }
    }
    let bridges: Vec<BridgeAcs> = bridge_bdfs
        .iter()
        .map(|bdf| {
            let cfg = PciDev::load(root, bdf)
                .map(|d| d.config(root))
                .unwrap_or(ConfigInfo {
                    port_type: PortType::Unknown,
                    acs: Acs::Unknown,
                });
            BridgeAcs {
                bdf: bdf.to_string(),
                port_type: cfg.port_type,
                acs: cfg.acs,
            }
        })
        .collect();
    let acs_redirecting: Vec<String> = bridges
        .iter()
        .filter(|b| matches!(b.acs, Acs::Present { redirect: true, .. }))
        .map(|b| b.bdf.clone())
        .collect();
    let acs_unknown = bridges.iter().any(|b| b.acs == Acs::Unknown);

    let (verdict, nvsmi, detail) = if common == 0 {
        match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x != y => (
                PathVerdict::AcrossSockets,
                "SYS",
                format!("host bridges {} (NUMA {x}) and {} (NUMA {y})", ca[0], cb[0]),
            ),
            _ => (
                PathVerdict::AcrossHostBridge,
                "NODE",
                format!("different host bridges {} and {}", ca[0], cb[0]),
            ),
        }
    } else if common == 1 {
        (
            PathVerdict::AcrossHostBridge,
            "PHB",
            format!("different root ports of host bridge {}", ca[0]),
        )
    } else {
        let anc = &ca[common - 1];
        let anc_type = PciDev::load(root, anc)
            .map(|d| d.config(root).port_type)
            .unwrap_or(PortType::Unknown);
        let is_root_port =
            anc_type == PortType::RootPort || (anc_type == PortType::Unknown && common == 2);
        if is_root_port {
            (
                PathVerdict::SameRootPort,
                "PHB",
                format!("common root port {anc}"),
            )
        } else {
            let hops = bridges.len();
            (
                PathVerdict::SameSwitch,
                if hops <= 2 { "PIX" } else { "PXB" },
                format!("common switch port {anc}"),
            )
        }
    };
    Topology {
        verdict,
        nvsmi,
        bridges,
        acs_redirecting,
        acs_unknown,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H200 (driver 580.159.04, in a VM), read on a real host: BAR0 is
    /// 64-bit, so BAR1 (256 GiB) is the third line, BAR3 (32 MiB) the fifth.
    #[test]
    fn bar1_after_a_64_bit_bar0() {
        let h200 = "0x0000104002000000 0x0000104002ffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000100000000000 0x0000103fffffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000104000000000 0x0000104001ffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000000000000000 0x0000000000000000 0x0000000000000000
";
        assert_eq!(bar1_size(h200), Some(256 << 30));
    }

    /// A GPU with a 32-bit BAR0: BAR1 is the second line; unassigned is None.
    #[test]
    fn bar1_after_a_32_bit_bar0() {
        let a = "0x00000000fa000000 0x00000000faffffff 0x0000000000040200
0x0000038000000000 0x0000038fffffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000039000000000 0x0000039001ffffff 0x000000000014220c
";
        assert_eq!(bar1_size(a), Some(64 << 30));
        let unassigned = "0x00000000fa000000 0x00000000faffffff 0x0000000000040200
0x0000000000000000 0x0000000000000000 0x0000000000000000
";
        assert_eq!(bar1_size(unassigned), None);
        assert_eq!(bar1_size(""), None);
    }

    fn cfg(port_type: u16, acs_control: Option<u16>, len: usize) -> Vec<u8> {
        let mut c = vec![0u8; len];
        c[0x06] = 0x10;
        c[0x34] = 0x40;
        c[0x40] = 0x10;
        c[0x42..0x44].copy_from_slice(&((port_type << 4) | 2).to_le_bytes());
        if let Some(ctl) = acs_control {
            // An AER capability first, then ACS, to exercise the chain.
            c[0x100..0x104].copy_from_slice(&(0x0001u32 | (1 << 16) | (0x148 << 20)).to_le_bytes());
            c[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
            c[0x14e..0x150].copy_from_slice(&ctl.to_le_bytes());
        }
        c
    }

    #[test]
    fn config_port_types_and_acs() {
        let i = parse_config(&cfg(6, Some(0x1d), 4096));
        assert_eq!(i.port_type, PortType::SwitchDownstream);
        assert_eq!(
            i.acs,
            Acs::Present {
                control: 0x1d,
                redirect: true
            }
        );
        let i = parse_config(&cfg(4, Some(0x01), 4096));
        assert_eq!(i.port_type, PortType::RootPort);
        assert_eq!(
            i.acs,
            Acs::Present {
                control: 0x01,
                redirect: false
            }
        );
        let i = parse_config(&cfg(5, None, 4096));
        assert_eq!(i.port_type, PortType::SwitchUpstream);
        assert_eq!(i.acs, Acs::Absent);
        // What an unprivileged reader gets: 64 bytes.
        let i = parse_config(&cfg(6, Some(0x1d), 4096)[..64]);
        assert_eq!(i.port_type, PortType::Unknown);
        assert_eq!(i.acs, Acs::Unknown);
    }
}
