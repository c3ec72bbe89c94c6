//! The system facts that doctor judges and that check uses to explain a
//! failure: loaded modules, peer-memory clients, IOMMU, NVIDIA driver,
//! kernel configuration, locked-memory limit, GPUs and RDMA devices.

use crate::pci::{self, PciDev};
use crate::root::SysRoot;
use serde::Serialize;
use std::collections::BTreeMap;

/// The modules doctor reports on, in display order.
pub const MODULES_OF_INTEREST: [&str; 7] = [
    "peermem_rs",
    "nvidia_peermem",
    "nv_peer_mem",
    "nvidia",
    "ib_uverbs",
    "rdma_ucm",
    "mlx5_ib",
];

/// Modules that register a peer-memory client for NVIDIA GPU memory.
pub const PEER_CLIENT_MODULES: [&str; 3] = ["peermem_rs", "nvidia_peermem", "nv_peer_mem"];

#[derive(Debug, Clone, Serialize)]
pub struct LoadedModule {
    pub name: String,
    /// Modules that use this one.
    pub used_by: Vec<String>,
    /// Taint flags in parentheses, e.g. `OE`.
    pub flags: String,
}

/// A registered client under /sys/kernel/mm/memory_peers.
#[derive(Debug, Clone, Serialize)]
pub struct PeerClient {
    pub name: String,
    pub version: Option<String>,
    pub counters: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverFlavour {
    Open,
    Proprietary,
}

#[derive(Debug, Clone, Serialize)]
pub struct NvidiaDriver {
    pub flavour: DriverFlavour,
    pub version: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Iommu {
    /// IOMMU units registered (/sys/class/iommu).
    pub units: Vec<String>,
    /// iommu-related kernel command-line options.
    pub cmdline: Vec<String>,
}

/// RLIMIT_MEMLOCK as seen in /proc/self/limits (None = unlimited).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Memlock {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
    /// CAP_IPC_LOCK is effective: the limit does not apply.
    pub cap_ipc_lock: bool,
}

pub use crate::rdma::RdmaDev;

/// Who built a loaded peer-memory client module. The module name alone
/// does not tell: peermem-rs is installed as `nvidia_peermem` too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientOrigin {
    /// peermem-rs: module parameters `mode` and `peer_client_name`.
    PeermemRs,
    /// NVIDIA's nvidia-peermem: parameters `persistent_api_support` /
    /// `peerdirect_support`.
    Nvidia,
    /// Mellanox's old `nv_peer_mem`.
    Mellanox,
    /// None of the above could be told from /sys/module.
    Unknown,
}

impl ClientOrigin {
    pub fn label(self) -> &'static str {
        match self {
            ClientOrigin::PeermemRs => "peermem-rs",
            ClientOrigin::Nvidia => "NVIDIA's nvidia-peermem",
            ClientOrigin::Mellanox => "Mellanox's nv_peer_mem",
            ClientOrigin::Unknown => "unknown origin",
        }
    }
}

/// A loaded peer-memory client module and who built it.
#[derive(Debug, Clone, Serialize)]
pub struct ClientModule {
    pub module: String,
    pub origin: ClientOrigin,
    /// /sys/module/<module>/version (MODULE_VERSION).
    pub version: Option<String>,
    /// peermem-rs: its `mode` parameter.
    pub mode: Option<String>,
    /// What the origin was read from.
    pub evidence: String,
}

/// Which loaded module `module` is, from /sys/module/<module>/parameters:
/// peermem-rs has `mode` and `peer_client_name`, NVIDIA's nvidia-peermem
/// `persistent_api_support` and `peerdirect_support`
/// (docs/facts/peer-memory-core.md, section 1). The same test is made by
/// tests/hw/validate.sh.
pub fn client_identity(root: &SysRoot, module: &str) -> ClientModule {
    let dir = format!("/sys/module/{module}/parameters");
    let params = root.list(&dir);
    let has = |p: &str| params.iter().any(|x| x == p);
    let (origin, evidence) = if has("peer_client_name") && has("mode") {
        (
            ClientOrigin::PeermemRs,
            format!("{dir}/mode and peer_client_name exist (peermem-rs)"),
        )
    } else if has("persistent_api_support") || has("peerdirect_support") {
        (
            ClientOrigin::Nvidia,
            format!("{dir}/persistent_api_support or peerdirect_support exist (NVIDIA)"),
        )
    } else if module == "nv_peer_mem" {
        (
            ClientOrigin::Mellanox,
            "module name nv_peer_mem".to_string(),
        )
    } else if params.is_empty() {
        (
            ClientOrigin::Unknown,
            format!("{dir} is empty or unreadable"),
        )
    } else {
        (
            ClientOrigin::Unknown,
            format!(
                "{dir} has {} (neither peermem-rs nor NVIDIA)",
                params.join(", ")
            ),
        )
    };
    ClientModule {
        module: module.to_string(),
        origin,
        version: root.read_trim(&format!("/sys/module/{module}/version")),
        mode: (origin == ClientOrigin::PeermemRs)
            .then(|| root.read_trim(&format!("{dir}/mode")))
            .flatten(),
        evidence,
    }
}

/// The RDMA stack's version: MLNX_OFED/DOCA-OFED, or unknown (the kernel's
/// own stack has no version of its own).
#[derive(Debug, Clone, Serialize)]
pub struct RdmaStack {
    /// e.g. "25.10-1.2.8"; None: unknown.
    pub version: Option<String>,
    /// Where it was read (a sysfs file, or `ofed_info -s`).
    pub source: Option<String>,
}

/// Reads the OFED version from the modules MLNX_OFED/DOCA-OFED version
/// (mainline's mlx5_core and ib_core have no `version` file; mlx_compat
/// exists only with OFED), else from `ofed_info -s` on the live system.
pub fn rdma_stack(root: &SysRoot) -> RdmaStack {
    for m in ["mlx5_core", "mlx_compat", "ib_core", "ib_uverbs"] {
        let f = format!("/sys/module/{m}/version");
        if let Some(v) = root.read_trim(&f).filter(|v| !v.is_empty()) {
            return RdmaStack {
                version: Some(v),
                source: Some(f),
            };
        }
    }
    if root.is_live() {
        crate::trace!("running ofed_info -s");
        if let Ok(o) = std::process::Command::new("ofed_info")
            .arg("-s")
            .stderr(std::process::Stdio::null())
            .output()
        {
            let v = String::from_utf8_lossy(&o.stdout)
                .trim()
                .trim_end_matches(':')
                .to_string();
            if o.status.success() && !v.is_empty() {
                return RdmaStack {
                    version: Some(v),
                    source: Some("ofed_info -s".into()),
                };
            }
        }
    }
    RdmaStack {
        version: None,
        source: None,
    }
}

#[derive(Debug, Clone)]
pub struct SysState {
    pub kernel: String,
    pub modules: Vec<LoadedModule>,
    /// Modules built into the running kernel (`modules.builtin`).
    pub builtin: Vec<String>,
    pub peers: Vec<PeerClient>,
    /// Whether the kernel offers ib_register_peer_memory_client (None: could not tell).
    pub peer_interface: Option<bool>,
    pub iommu: Iommu,
    pub nvidia: Option<NvidiaDriver>,
    /// CONFIG_RUST and the file it was read from.
    pub config_rust: Option<(bool, String)>,
    /// The running kernel's configuration (None: no config file, no
    /// /proc/config.gz).
    pub kconfig: Option<KernelConfig>,
    /// A Tegra SoC (its GPU shares the CPU's memory: no PCIe GPU BAR for a
    /// NIC to reach), from the device tree.
    pub tegra: bool,
    pub memlock: Option<Memlock>,
    pub gpus: Vec<PciDev>,
    pub rdma: Vec<RdmaDev>,
    /// Modules installed for the running kernel (`modules.dep`), named
    /// like loaded ones (`nvidia_peermem`).
    pub installed: Vec<String>,
    /// Network interfaces and their operstate (`up`, `down`, ...).
    pub netdevs: Vec<(String, String)>,
    /// Whether /sys/kernel/mm/memory_peers exists (created by the core
    /// only on some cores).
    pub memory_peers_dir: bool,
}

impl SysState {
    pub fn gather(root: &SysRoot) -> SysState {
        let kernel = root
            .read_trim("/proc/sys/kernel/osrelease")
            .unwrap_or_default();
        SysState {
            modules: parse_modules(&root.read("/proc/modules").unwrap_or_default()),
            builtin: parse_builtin(
                &root
                    .read(&format!("/lib/modules/{kernel}/modules.builtin"))
                    .unwrap_or_default(),
            ),
            peers: peer_clients(root),
            peer_interface: peer_interface(root, &kernel),
            iommu: iommu(root),
            nvidia: root
                .read("/proc/driver/nvidia/version")
                .and_then(|s| parse_nvidia_version(&s)),
            kconfig: kernel_config(root, &kernel),
            config_rust: None,
            tegra: root
                .read("/proc/device-tree/compatible")
                .is_some_and(|c| c.contains("nvidia,tegra")),
            memlock: memlock(root),
            gpus: pci::nvidia_gpus(root),
            rdma: crate::rdma::devices(root),
            installed: parse_builtin(
                &root
                    .read(&format!("/lib/modules/{kernel}/modules.dep"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.split(':').next())
                    .map(|m| {
                        m.trim_end_matches(".xz")
                            .trim_end_matches(".zst")
                            .trim_end_matches(".gz")
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            netdevs: root
                .list("/sys/class/net")
                .into_iter()
                .map(|n| {
                    let st = root
                        .read_trim(&format!("/sys/class/net/{n}/operstate"))
                        .unwrap_or_default();
                    (n, st)
                })
                .collect(),
            memory_peers_dir: root.exists("/sys/kernel/mm/memory_peers"),
            kernel,
        }
        .with_config_rust()
    }

    fn with_config_rust(mut self) -> SysState {
        self.config_rust = self
            .kconfig
            .as_ref()
            .map(|c| (c.get("CONFIG_RUST") == Some("y"), c.source.clone()));
        self
    }

    pub fn module(&self, name: &str) -> Option<&LoadedModule> {
        self.modules.iter().find(|m| m.name == name)
    }

    /// Whether `name` is built into the kernel (so never in /proc/modules).
    pub fn is_builtin(&self, name: &str) -> bool {
        self.builtin.iter().any(|m| m == name)
    }

    /// Whether module `name` is installed for this kernel (loadable).
    pub fn is_installed(&self, name: &str) -> bool {
        self.installed.iter().any(|m| m == name)
    }

    /// Peer-client modules currently loaded.
    pub fn peer_modules(&self) -> Vec<&str> {
        PEER_CLIENT_MODULES
            .iter()
            .copied()
            .filter(|m| self.module(m).is_some())
            .collect()
    }

    /// True when some peer-memory client is registered or loaded.
    pub fn has_peer_client(&self) -> bool {
        !self.peers.is_empty() || !self.peer_modules().is_empty()
    }

    pub fn gpu_by_bdf(&self, bdf: &str) -> Option<&PciDev> {
        let want = bdf.to_ascii_lowercase();
        self.gpus.iter().find(|g| g.bdf == want)
    }
}

/// Module names from modules.builtin lines (`kernel/drivers/.../ib_uverbs.ko`).
pub fn parse_builtin(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.rsplit('/').next()?.strip_suffix(".ko"))
        .map(|n| n.replace('-', "_"))
        .collect()
}

/// Parses /proc/modules lines: `name size refs users, state addr (flags)`.
pub fn parse_modules(text: &str) -> Vec<LoadedModule> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?.to_string();
            let _size = f.next()?;
            let _refs = f.next()?;
            let users = f.next().unwrap_or("-");
            let used_by = users
                .split(',')
                .filter(|u| !u.is_empty() && *u != "-")
                .map(str::to_string)
                .collect();
            let flags = l
                .rfind('(')
                .and_then(|i| l[i + 1..].strip_suffix(')'))
                .unwrap_or("")
                .to_string();
            Some(LoadedModule {
                name,
                used_by,
                flags,
            })
        })
        .collect()
}

fn peer_clients(root: &SysRoot) -> Vec<PeerClient> {
    let base = "/sys/kernel/mm/memory_peers";
    root.list(base)
        .into_iter()
        .map(|name| {
            let dir = format!("{base}/{name}");
            let mut counters = BTreeMap::new();
            for f in root.list(&dir) {
                if f == "version" {
                    continue;
                }
                if let Some(v) = root
                    .read_trim(&format!("{dir}/{f}"))
                    .and_then(|s| s.parse().ok())
                {
                    counters.insert(f, v);
                }
            }
            PeerClient {
                version: root.read_trim(&format!("{dir}/version")),
                counters,
                name,
            }
        })
        .collect()
}

const PEER_SYMBOL: &str = "ib_register_peer_memory_client";

/// The peer-memory interface is exported by ib_uverbs (or ib_core on old
/// stacks): visible in kallsyms once loaded, else in modules.symbols.
fn peer_interface(root: &SysRoot, kernel: &str) -> Option<bool> {
    let has = |text: &str| {
        text.lines().any(|l| {
            l.split_whitespace()
                .any(|w| w == PEER_SYMBOL || w == format!("symbol:{PEER_SYMBOL}"))
        })
    };
    if let Some(k) = root.read("/proc/kallsyms") {
        if has(&k) {
            return Some(true);
        }
    }
    if let Some(s) = root.read(&format!("/lib/modules/{kernel}/modules.symbols")) {
        return Some(has(&s));
    }
    None
}

fn iommu(root: &SysRoot) -> Iommu {
    let cmdline = root.read("/proc/cmdline").unwrap_or_default();
    Iommu {
        units: root.list("/sys/class/iommu"),
        cmdline: cmdline
            .split_whitespace()
            .filter(|w| w.contains("iommu") || w.starts_with("pci=") || w == &"iommu.passthrough=1")
            .map(str::to_string)
            .collect(),
    }
}

/// The IOMMU domain type of a PCI device's group: `identity` (passthrough),
/// `DMA`/`DMA-FQ` (translated), `blocked`; None without an IOMMU.
pub fn iommu_group_type(root: &SysRoot, dev: &PciDev) -> Option<String> {
    root.read_trim(&format!("{}/iommu_group/type", dev.sysfs))
}

/// Parses /proc/driver/nvidia/version.
pub fn parse_nvidia_version(text: &str) -> Option<NvidiaDriver> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let flavour = if line.contains("Open Kernel Module") {
        DriverFlavour::Open
    } else {
        DriverFlavour::Proprietary
    };
    let version = line
        .split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.split('.')
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })?
        .to_string();
    Some(NvidiaDriver { flavour, version })
}

/// The running kernel's configuration and the file it came from.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    pub source: String,
    text: String,
}

impl KernelConfig {
    pub fn new(source: impl Into<String>, text: impl Into<String>) -> KernelConfig {
        KernelConfig {
            source: source.into(),
            text: text.into(),
        }
    }

    /// The option's value (`y`, `m`, a number, a string), or None when it
    /// is not set.
    pub fn get(&self, option: &str) -> Option<&str> {
        self.text
            .lines()
            .find_map(|l| l.trim().strip_prefix(option)?.strip_prefix('='))
    }

    /// The option is `y` or `m`.
    pub fn enabled(&self, option: &str) -> bool {
        matches!(self.get(option), Some("y" | "m"))
    }
}

/// The configuration of kernel `kernel`: a config file in /boot or beside
/// its modules, else /proc/config.gz (CONFIG_IKCONFIG_PROC; decompressed
/// with gzip).
fn kernel_config(root: &SysRoot, kernel: &str) -> Option<KernelConfig> {
    let candidates = [
        format!("/boot/config-{kernel}"),
        format!("/lib/modules/{kernel}/build/.config"),
        format!("/usr/src/linux-headers-{kernel}/.config"),
        format!("/lib/modules/{kernel}/config"),
    ];
    for c in candidates {
        if let Some(text) = root.read(&c) {
            return Some(KernelConfig::new(c, text));
        }
    }
    let gz = root.read_bytes("/proc/config.gz").ok()?;
    gunzip(&gz).map(|text| KernelConfig::new("/proc/config.gz", text))
}

/// Decompresses gzip data with the gzip program (None: no gzip, bad data).
fn gunzip(data: &[u8]) -> Option<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    // Written from a thread: gzip's output may fill its pipe before it
    // has read all of its input.
    let out = std::thread::scope(|s| {
        s.spawn(move || {
            let _ = stdin.write_all(data);
        });
        child.wait_with_output()
    })
    .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The kernel release's major and minor numbers (`6.12.0-test` -> (6, 12)).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn parse_limit(s: &str) -> Option<Option<u64>> {
    if s == "unlimited" {
        Some(None)
    } else {
        s.parse().ok().map(Some)
    }
}

fn memlock(root: &SysRoot) -> Option<Memlock> {
    let text = root.read("/proc/self/limits")?;
    let line = text.lines().find(|l| l.starts_with("Max locked memory"))?;
    let mut f = line["Max locked memory".len()..].split_whitespace();
    let soft = parse_limit(f.next()?)?;
    let hard = parse_limit(f.next()?)?;
    let cap_ipc_lock = root
        .read("/proc/self/status")
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("CapEff:"))?.to_string();
            u64::from_str_radix(l["CapEff:".len()..].trim(), 16).ok()
        })
        .map(|caps| caps & (1 << 14) != 0)
        .unwrap_or(false);
    Some(Memlock {
        soft,
        hard,
        cap_ipc_lock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_modules_from_modules_dep() {
        let s = SysState::gather(&crate::fixture("peermem-loaded"));
        assert!(s.is_installed("nvidia_peermem"), "{:?}", s.installed);
        assert!(!s.is_installed("peermem_rs"));
        assert!(!s.memory_peers_dir);
    }

    #[test]
    fn builtin_modules_are_named_like_loaded_ones() {
        let text = "kernel/drivers/infiniband/core/ib_uverbs.ko\nkernel/net/9p/9pnet-virtio.ko\n";
        assert_eq!(parse_builtin(text), ["ib_uverbs", "9pnet_virtio"]);
        assert!(parse_builtin("").is_empty());
    }

    #[test]
    fn modules_parse() {
        let m = parse_modules(
            "nvidia 9850880 3 nvidia_peermem,peermem_rs, Live 0x0 (POE)\nib_core 1 0 - Live 0x0\n",
        );
        assert_eq!(m[0].name, "nvidia");
        assert_eq!(m[0].used_by, vec!["nvidia_peermem", "peermem_rs"]);
        assert_eq!(m[0].flags, "POE");
        assert!(m[1].used_by.is_empty());
        assert_eq!(m[1].flags, "");
    }

    #[test]
    fn nvidia_version_flavours() {
        let o = parse_nvidia_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.45.04  Release Build\n",
        )
        .unwrap();
        assert_eq!(o.flavour, DriverFlavour::Open);
        assert_eq!(o.version, "595.45.04");
        let p = parse_nvidia_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May\n",
        )
        .unwrap();
        assert_eq!(p.flavour, DriverFlavour::Proprietary);
        assert_eq!(p.version, "535.183.01");
        assert!(parse_nvidia_version("garbage").is_none());
    }
}
