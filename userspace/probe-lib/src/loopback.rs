//! Two RC QPs on one device connected to each other: a fresh pair (with
//! its own CQ) for every test, so one failed path never poisons the next.

use crate::memory::HostBuf;
pub use crate::rdma::{gid_string, parse_gid};
use crate::root::SysRoot;
pub use crate::stream::{rdma_stream, Op, PostFn, Stream, XferError};
use crate::verbs::ffi::{self, Gid};
use crate::verbs::{Context, Cq, Mr, Pd, Qp, Step, VerbsError};
use serde::Serialize;
use std::rc::Rc;
use std::time::Duration;

/// The port, GID and MTU a QP is connected through.
#[derive(Debug, Clone, Serialize)]
pub struct PortChoice {
    pub port: u8,
    /// "InfiniBand" or "Ethernet" (RoCE).
    pub link_layer: &'static str,
    /// GID table index used for RoCE (None on InfiniBand: LID routing).
    pub gid_index: Option<u32>,
    pub gid: String,
    pub lid: u16,
    #[serde(skip)]
    pub gid_raw: Gid,
    #[serde(skip)]
    pub mtu: u32,
    #[serde(skip)]
    pub max_msg: u32,
}

/// Picks the GID index for RoCE from (index, gid, type) entries: an
/// IPv4-mapped RoCE v2 GID first (routable, what rdma_cm uses for IPv4),
/// then any RoCE v2 GID, then any non-zero one.
pub fn pick_gid(entries: &[(u32, String, String)]) -> Option<u32> {
    let nonzero = |g: &str| parse_gid(g).is_some_and(|x| x.0 != [0u8; 16]);
    let v2 = |t: &str| t.trim().eq_ignore_ascii_case("RoCE v2");
    let v4 = |g: &str| g.starts_with("0000:0000:0000:0000:0000:ffff:");
    entries
        .iter()
        .find(|(_, g, t)| v2(t) && v4(g) && nonzero(g))
        .or_else(|| entries.iter().find(|(_, g, t)| v2(t) && nonzero(g)))
        .or_else(|| entries.iter().find(|(_, g, _)| nonzero(g)))
        .map(|(i, _, _)| *i)
}

/// GID entries of a port from sysfs.
fn gid_entries(root: &SysRoot, dev: &str, port: u8) -> Vec<(u32, String, String)> {
    let base = format!("/sys/class/infiniband/{dev}/ports/{port}");
    let mut out = Vec::new();
    for name in root.list(&format!("{base}/gids")) {
        let Ok(i) = name.parse::<u32>() else { continue };
        let Some(gid) = root.read_trim(&format!("{base}/gids/{i}")) else {
            continue;
        };
        let typ = root
            .read_trim(&format!("{base}/gid_attrs/types/{i}"))
            .unwrap_or_default();
        out.push((i, gid, typ));
    }
    out.sort();
    out
}

/// `ibv_port_state` by name.
pub fn port_state_name(s: u32) -> &'static str {
    match s {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "in an unknown state",
    }
}

/// The first active port of the device and how to address it.
pub fn choose_port(root: &SysRoot, ctx: &Context) -> Result<PortChoice, String> {
    let mut ports: Vec<u8> = root
        .list(&format!("/sys/class/infiniband/{}/ports", ctx.name))
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    if ports.is_empty() {
        ports = vec![1];
    }
    let mut states = Vec::new();
    for port in ports {
        let info = ctx.query_port(port).map_err(|e| e.to_string())?;
        if info.state != ffi::PORT_ACTIVE {
            states.push(format!("port {port} {}", port_state_name(info.state)));
            continue;
        }
        let eth = info.link_layer == ffi::LINK_LAYER_ETHERNET;
        let gid_index = if eth {
            let entries = gid_entries(root, &ctx.name, port);
            let idx = pick_gid(&entries).or_else(|| {
                (0..16u32).find(|i| ctx.query_gid(port, *i).is_ok_and(|g| g.0 != [0u8; 16]))
            });
            match idx {
                Some(i) => Some(i),
                None => {
                    return Err(format!(
                        "{} port {port} has no usable GID (the netdev needs an IP address)",
                        ctx.name
                    ))
                }
            }
        } else {
            None
        };
        let gid = ctx
            .query_gid(port, gid_index.unwrap_or(0))
            .map_err(|e| e.to_string())?;
        return Ok(PortChoice {
            port,
            link_layer: if eth { "Ethernet" } else { "InfiniBand" },
            gid_index,
            gid: gid_string(&gid),
            lid: info.lid,
            gid_raw: gid,
            mtu: info.active_mtu.clamp(1, 5),
            max_msg: if info.max_msg_sz == 0 {
                1 << 30
            } else {
                info.max_msg_sz
            },
        });
    }
    Err(format!(
        "{} has no ACTIVE port ({}): check the cable/link or, for RoCE, that the netdev is up",
        ctx.name,
        states.join(", ")
    ))
}

/// Moves `qp` through INIT, RTR and RTS towards `remote_qpn` reached via
/// `remote` (the same port for a loopback pair), allowing `rd_atomic`
/// RDMA READs in flight each way.
pub fn connect_qp(
    qp: &Qp,
    local: &PortChoice,
    remote: &PortChoice,
    remote_qpn: u32,
    psn: u32,
    rd_atomic: u8,
) -> Result<(), VerbsError> {
    let mut a = ffi::QpAttr {
        qp_state: ffi::QPS_INIT,
        port_num: local.port,
        qp_access_flags: crate::verbs::MR_ACCESS as u32,
        ..Default::default()
    };
    qp.modify(
        &mut a,
        ffi::QP_STATE | ffi::QP_PKEY_INDEX | ffi::QP_PORT | ffi::QP_ACCESS_FLAGS,
    )?;
    let mut a = ffi::QpAttr {
        qp_state: ffi::QPS_RTR,
        path_mtu: local.mtu,
        dest_qp_num: remote_qpn,
        rq_psn: psn,
        max_dest_rd_atomic: rd_atomic,
        min_rnr_timer: 12,
        ..Default::default()
    };
    a.ah_attr.port_num = local.port;
    if let Some(idx) = local.gid_index {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = remote.gid_raw;
        a.ah_attr.grh.sgid_index = idx as u8;
        a.ah_attr.grh.hop_limit = 64;
    } else {
        a.ah_attr.dlid = remote.lid;
    }
    qp.modify(
        &mut a,
        ffi::QP_STATE
            | ffi::QP_AV
            | ffi::QP_PATH_MTU
            | ffi::QP_DEST_QPN
            | ffi::QP_RQ_PSN
            | ffi::QP_MAX_DEST_RD_ATOMIC
            | ffi::QP_MIN_RNR_TIMER,
    )?;
    let mut a = ffi::QpAttr {
        qp_state: ffi::QPS_RTS,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: psn,
        max_rd_atomic: rd_atomic,
        ..Default::default()
    };
    qp.modify(
        &mut a,
        ffi::QP_STATE
            | ffi::QP_TIMEOUT
            | ffi::QP_RETRY_CNT
            | ffi::QP_RNR_RETRY
            | ffi::QP_SQ_PSN
            | ffi::QP_MAX_QP_RD_ATOMIC,
    )
}

/// A device opened for loopback tests: its port and a protection domain.
/// Every test gets fresh QPs from [`Loopback::pair`], so a QP that an
/// earlier path drove into the error state never serves the next one.
pub struct Loopback {
    pub ctx: Context,
    pub pd: Rc<Pd>,
    pub port: PortChoice,
}

/// A loopback set-up failure: the step and the verbs error.
#[derive(Debug, Clone)]
pub enum SetupError {
    Port(String),
    Verbs(Step, VerbsError),
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Port(e) => write!(f, "{e}"),
            SetupError::Verbs(_, e) => write!(f, "{e}"),
        }
    }
}

/// Work requests each QP may have outstanding.
pub const DEPTH: u32 = 64;

impl Loopback {
    pub fn new(root: &SysRoot, ctx: &Context) -> Result<Loopback, SetupError> {
        let port = choose_port(root, ctx).map_err(SetupError::Port)?;
        crate::trace!(
            "{}: port {} {} gid_index {:?} mtu enum {}",
            ctx.name,
            port.port,
            port.link_layer,
            port.gid_index,
            port.mtu
        );
        let pd = ctx
            .alloc_pd()
            .map_err(|e| SetupError::Verbs(Step::CreateQp, e))?;
        Ok(Loopback {
            ctx: ctx.clone(),
            pd,
            port,
        })
    }

    /// `n` fresh connected QP pairs on a fresh CQ.
    pub fn pairs(&self, n: usize) -> Result<QpPairs, SetupError> {
        let n = n.max(1);
        let v = |s: Step| move |e| SetupError::Verbs(s, e);
        let cq = self
            .ctx
            .create_cq((2 * DEPTH as usize * n + 8) as i32)
            .map_err(v(Step::CreateQp))?;
        let scratch = HostBuf::new(4096);
        let scratch_mr = self
            .pd
            .reg_mr(scratch.as_slice().as_ptr() as u64, 4096)
            .map_err(v(Step::RegHost))?;
        let mut senders = Vec::with_capacity(n);
        let mut receivers = Vec::with_capacity(n);
        for _ in 0..n {
            let a = Qp::create_rc(&self.pd, &cq, DEPTH).map_err(v(Step::CreateQp))?;
            let b = Qp::create_rc(&self.pd, &cq, DEPTH).map_err(v(Step::CreateQp))?;
            // As many READs in flight as the device allows: 16, else 1.
            let mut last = None;
            for rd in [16u8, 1] {
                let r = connect_qp(&a, &self.port, &self.port, b.qp_num(), 0x1000, rd)
                    .and_then(|_| connect_qp(&b, &self.port, &self.port, a.qp_num(), 0x1000, rd));
                match r {
                    Ok(()) => {
                        last = None;
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            if let Some(e) = last {
                return Err(SetupError::Verbs(Step::ConnectQp, e));
            }
            crate::trace!(
                "{}: fresh QP pair {} <-> {}",
                self.ctx.name,
                a.qp_num(),
                b.qp_num()
            );
            senders.push(a);
            receivers.push(b);
        }
        Ok(QpPairs {
            cq,
            senders,
            _receivers: receivers,
            scratch,
            scratch_mr,
            max_msg: self.port.max_msg,
        })
    }
}

/// Connected loopback QP pairs sharing one CQ of their own.
pub struct QpPairs {
    cq: Rc<Cq>,
    senders: Vec<Qp>,
    _receivers: Vec<Qp>,
    scratch: HostBuf,
    scratch_mr: Mr,
    max_msg: u32,
}

impl QpPairs {
    /// `count` RDMA operations of `len` bytes each between `local` and
    /// `remote`, spread over the QPs. Returns the elapsed time.
    pub fn run(
        &self,
        op: Op,
        local: (u64, u32),
        remote: (u64, u32),
        len: usize,
        count: usize,
        timeout: Duration,
    ) -> Result<Duration, XferError> {
        let posts: Vec<_> = self
            .senders
            .iter()
            .map(|q| move |wr: &mut ffi::SendWr| q.post_send(wr))
            .collect();
        let posts: Vec<PostFn> = posts.iter().map(|f| f as PostFn).collect();
        rdma_stream(
            &posts,
            &self.cq,
            Stream {
                op,
                local,
                remote,
                len,
                count,
                max_msg: self.max_msg,
                depth: DEPTH as usize / 2,
                timeout,
            },
        )
    }

    /// RDMA-WRITE `len` bytes, then make sure they landed: a READ of the
    /// destination (what NCCL calls a flush) cannot complete before the
    /// writes ahead of it reached the memory, whatever path they took.
    pub fn write_flushed(
        &self,
        src: (u64, u32),
        dst: (u64, u32),
        len: usize,
        timeout: Duration,
    ) -> Result<Duration, XferError> {
        let t = self.run(Op::Write, src, dst, len, 1, timeout)?;
        let scratch = (
            self.scratch.as_slice().as_ptr() as u64,
            self.scratch_mr.lkey(),
        );
        self.run(Op::Read, scratch, dst, len.clamp(1, 4), 1, timeout)?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(i: u32, g: &str, t: &str) -> (u32, String, String) {
        (i, g.to_string(), t.to_string())
    }

    #[test]
    fn gid_choice_prefers_ipv4_roce_v2() {
        let z = "0000:0000:0000:0000:0000:0000:0000:0000";
        let ll = "fe80:0000:0000:0000:5054:00ff:fe12:3456";
        let v4 = "0000:0000:0000:0000:0000:ffff:c000:0201";
        let entries = vec![
            e(0, ll, "IB/RoCE v1"),
            e(1, ll, "RoCE v2"),
            e(2, v4, "IB/RoCE v1"),
            e(3, v4, "RoCE v2"),
            e(4, z, ""),
        ];
        assert_eq!(pick_gid(&entries), Some(3));
        assert_eq!(pick_gid(&entries[..3]), Some(1));
        assert_eq!(pick_gid(&[e(0, ll, "IB/RoCE v1")]), Some(0));
        assert_eq!(pick_gid(&[e(0, z, "RoCE v2")]), None);
    }
}
