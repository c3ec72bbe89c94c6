//! `pair`: the write/verify test between two hosts over the RDMA CM.
//! The client writes a pattern into the server's buffer, the server
//! checks it and writes its own back, the client checks that and reports
//! its verdict, so both sides print both directions.

use crate::cm::{Channel, CmId, CmQp};
use crate::cuda::{self, CudaState, GpuCtx};
use crate::loopback::{rdma_stream, Op, Stream};
use crate::memory::{compare, pattern, Buffer, HostBuf};
use crate::remedy::{self, Diagnosis};
use crate::report::{Outcome, RunVerdict, Status};
use crate::verbs::{ffi, wc_status_name, Cq, Mr, PollError};
use serde::Serialize;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

pub const DEFAULT_PORT: u16 = 18515;
const MAGIC: u32 = 0x3150_4d50; // "PMP1"

#[derive(Debug, Clone)]
pub struct PairOptions {
    /// Server: the address to listen on; client: the server's address.
    pub addr: SocketAddr,
    /// Client only: local address to resolve from.
    pub bind: Option<SocketAddr>,
    pub size: usize,
    /// Server: the largest buffer a client may ask for.
    pub max_size: usize,
    pub gpu: Option<i32>,
    /// Register the GPU buffer through dma-buf instead of ibv_reg_mr.
    pub dmabuf: bool,
    pub timeout: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct PairRow {
    pub direction: &'static str,
    pub status: Status,
    pub bytes: u64,
    pub verified_bytes: u64,
    pub micros: Option<u64>,
    /// bytes * 8 / time of the write (one buffer, so a rough figure;
    /// `bench` measures properly).
    pub gbit_per_s: Option<f64>,
    pub error: Option<String>,
    pub cause: Option<String>,
    pub remedy: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PairReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub version: &'static str,
    pub role: &'static str,
    pub status: Status,
    pub exit_code: i32,
    pub verdict: RunVerdict,
    pub address: String,
    /// Server: the RDMA CM listened on `address` (false: it failed before).
    pub listening: bool,
    pub rdma_device: Option<String>,
    pub memory: String,
    pub size: u64,
    pub results: Vec<PairRow>,
}

/// The connection's private data: where and how to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
    pub seed: u64,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(32);
        v.extend_from_slice(&MAGIC.to_le_bytes());
        v.extend_from_slice(&self.rkey.to_le_bytes());
        v.extend_from_slice(&self.addr.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v.extend_from_slice(&self.seed.to_le_bytes());
        v
    }
    pub fn decode(b: &[u8]) -> Result<Hello, String> {
        let u32at = |o: usize| {
            b.get(o..o + 4)
                .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
        };
        let u64at = |o: usize| {
            b.get(o..o + 8)
                .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        };
        if u32at(0) != Some(MAGIC) {
            return Err("the peer is not a peermem-probe pair (bad private data)".into());
        }
        match (u32at(4), u64at(8), u64at(16), u64at(24)) {
            (Some(rkey), Some(addr), Some(len), Some(seed)) => Ok(Hello {
                addr,
                rkey,
                len,
                seed,
            }),
            _ => Err("short private data from the peer".into()),
        }
    }
}

// Control messages (SEND): kind, verdict, first differing offset.
const MSG_WRITTEN: u32 = 1;
const MSG_RESULT: u32 = 2;
const MSG_FINAL: u32 = 3;
const WR_RECV: u64 = 1 << 40;
const WR_SEND: u64 = 2 << 40;

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    t ^ ((std::process::id() as u64) << 32)
}

fn row(direction: &'static str, size: usize) -> PairRow {
    PairRow {
        direction,
        status: Status::Pass,
        bytes: size as u64,
        verified_bytes: 0,
        micros: None,
        gbit_per_s: None,
        error: None,
        cause: None,
        remedy: None,
    }
}

/// A failed row; without a specific diagnosis the generic one for the
/// message (every failure carries a cause and a remedy).
fn failed(mut r: PairRow, err: String, d: Option<Diagnosis>) -> PairRow {
    let d = d.unwrap_or_else(|| remedy::diagnose_pair(&err));
    r.status = Status::Fail;
    r.error = Some(err);
    r.cause = Some(d.cause);
    r.remedy = Some(d.remedy);
    r
}

/// The connected state both roles share.
struct Link {
    qp: CmQp,
    cq: std::rc::Rc<Cq>,
    ctrl: HostBuf,
    ctrl_mr: Mr,
    seen: HashSet<u64>,
    sends: u64,
    timeout: Duration,
}

impl Link {
    fn post_recvs(&mut self) -> Result<(), String> {
        for i in 0..2u64 {
            let mut sge = ffi::Sge {
                addr: self.ctrl.as_slice().as_ptr() as u64 + i * 64,
                length: 64,
                lkey: self.ctrl_mr.lkey(),
            };
            let mut wr = ffi::RecvWr {
                wr_id: WR_RECV + i,
                next: std::ptr::null_mut(),
                sg_list: &mut sge,
                num_sge: 1,
            };
            self.qp.post_recv(&mut wr).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
    fn wait_id(&mut self, id: u64) -> Result<(), String> {
        while !self.seen.contains(&id) {
            match self.cq.wait(1, self.timeout) {
                Ok(ids) => self.seen.extend(ids),
                Err(PollError::Timeout(_)) => {
                    return Err(format!(
                        "the peer did not answer within {} s",
                        self.timeout.as_secs()
                    ))
                }
                Err(PollError::Wc(w)) => {
                    return Err(format!(
                        "control message completed with {} (vendor_err 0x{:x}): {}",
                        wc_status_name(w.status),
                        w.vendor_err,
                        remedy::diagnose_wc(w.status, false).cause
                    ))
                }
                Err(PollError::Verbs(e)) => return Err(e.to_string()),
            }
        }
        Ok(())
    }
    fn send(&mut self, kind: u32, ok: bool, first_bad: u64) -> Result<(), String> {
        let off = 1024 + (self.sends % 8) * 64;
        let msg = [kind.to_le_bytes(), (ok as u32).to_le_bytes()].concat();
        let base = self.ctrl.as_mut_slice();
        base[off as usize..off as usize + 8].copy_from_slice(&msg);
        base[off as usize + 8..off as usize + 16].copy_from_slice(&first_bad.to_le_bytes());
        let mut sge = ffi::Sge {
            addr: base.as_ptr() as u64 + off,
            length: 16,
            lkey: self.ctrl_mr.lkey(),
        };
        let mut wr = ffi::SendWr::zeroed();
        wr.wr_id = WR_SEND + self.sends;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ffi::WR_SEND;
        wr.send_flags = ffi::SEND_SIGNALED;
        self.qp.post_send(&mut wr).map_err(|e| e.to_string())?;
        self.sends += 1;
        self.wait_id(wr.wr_id)
    }
    /// Waits for the i-th (0 or 1) control message: (kind, ok).
    fn recv(&mut self, i: u64) -> Result<(u32, bool), String> {
        self.wait_id(WR_RECV + i)?;
        let b = &self.ctrl.as_slice()[(i * 64) as usize..];
        let kind = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
        let ok = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")) == 1;
        Ok((kind, ok))
    }
}

/// A test buffer and the GPU context that must outlive it.
type Allocated = (Buffer, Option<std::rc::Rc<GpuCtx>>);

/// Memory for the test buffer: host, or GPU `n` (None when CUDA is missing).
fn alloc(gpu: Option<i32>, size: usize) -> Result<Allocated, (Status, String)> {
    let Some(n) = gpu else {
        return Ok((Buffer::Host(HostBuf::new(size)), None));
    };
    match cuda::state() {
        CudaState::Missing => Err((
            Status::Untested,
            "libcuda.so not found: cannot use GPU memory".into(),
        )),
        CudaState::Broken(e) => Err((Status::Untested, e.to_string())),
        CudaState::Ready { .. } => {
            let c = GpuCtx::open(n).map_err(|e| (Status::Untested, e.to_string()))?;
            let b = c.alloc(size).map_err(|e| (Status::Fail, e.to_string()))?;
            Ok((Buffer::Gpu(b), Some(c)))
        }
    }
}

fn new_report(role: &'static str, o: &PairOptions) -> PairReport {
    PairReport {
        schema_version: crate::report::SCHEMA_VERSION,
        command: "pair",
        version: env!("CARGO_PKG_VERSION"),
        role,
        status: Status::Pass,
        exit_code: 0,
        verdict: RunVerdict::from_rows(&[]),
        address: o.addr.to_string(),
        listening: false,
        rdma_device: None,
        memory: match (o.gpu, o.dmabuf) {
            (Some(g), true) => format!("gpu {g} (dma-buf)"),
            (Some(g), false) => format!("gpu {g}"),
            (None, _) => "host".into(),
        },
        size: o.size as u64,
        results: Vec::new(),
    }
}

fn finish(mut r: PairReport) -> PairReport {
    let rows: Vec<Outcome<'_>> = r
        .results
        .iter()
        .map(|x| Outcome {
            name: x.direction.to_string(),
            status: x.status,
            cause: x.cause.as_deref(),
        })
        .collect();
    r.verdict = RunVerdict::from_rows(&rows);
    r.exit_code = r.verdict.exit_code;
    r.status = r.verdict.status;
    r
}

/// Server side. `on_listen` is told once the listener is up.
pub fn serve(o: &PairOptions, on_listen: &mut dyn FnMut(&str)) -> PairReport {
    run_side("server", o, on_listen)
}

/// Client side.
pub fn connect(o: &PairOptions) -> PairReport {
    run_side("client", o, &mut |_| {})
}

fn run_side(role: &'static str, o: &PairOptions, on_listen: &mut dyn FnMut(&str)) -> PairReport {
    let mut rep = new_report(role, o);
    crate::trace!("pair: {role}: looking for a local RDMA device");
    if let Some((st, e, d)) = no_local_device() {
        // Nothing on this host can take part: say so, not "the hosts".
        let mut r = failed(row("setup", o.size), e, Some(d));
        r.status = st;
        rep.results.push(r);
        return finish(rep);
    }
    if let Err((st, e)) = run_role(o, role == "server", on_listen, &mut rep) {
        let d = remedy::diagnose_cm(&e);
        let mut r = failed(row("setup", o.size), e, d);
        r.status = st;
        rep.results.push(r);
    }
    finish(rep)
}

/// This host has no RDMA device libibverbs can use (or no libibverbs):
/// the status, the message and the local diagnosis.
fn no_local_device() -> Option<(Status, String, Diagnosis)> {
    let listed = crate::verbs::device_names();
    crate::trace!("pair: libibverbs lists {listed:?}");
    let sys = || crate::sysinfo::SysState::gather(&crate::root::SysRoot::live());
    match listed {
        Err(e) => Some((Status::Untested, e.clone(), remedy::no_libibverbs(&e))),
        Ok(n) if n.is_empty() => Some((
            Status::Untested,
            "ibv_get_device_list: no RDMA device on this host".into(),
            remedy::no_rdma_device(&sys()),
        )),
        Ok(_) => None,
    }
}

fn run_role(
    o: &PairOptions,
    server: bool,
    on_listen: &mut dyn FnMut(&str),
    rep: &mut PairReport,
) -> Result<(), (Status, String)> {
    let fail = |e: String| (Status::Fail, e);
    let ms = o.timeout.as_millis().min(i32::MAX as u128) as i32;
    // Declaration order is teardown order in reverse: channel, ids, then
    // verbs objects, buffers and MRs, and the QP last-declared.
    crate::trace!("pair: rdma_create_event_channel");
    let ch = Channel::new().map_err(|e| (Status::Untested, e))?;
    let listener;
    let id;
    let peer: Option<Hello>;
    if server {
        crate::trace!("pair: server: rdma_bind_addr {}", o.addr);
        listener = ch.create_id().map_err(|e| fail(e.to_string()))?;
        listener
            .bind(&o.addr)
            .map_err(|e| fail(format!("{e} on {}", o.addr)))?;
        listener.listen().map_err(|e| fail(e.to_string()))?;
        rep.listening = true;
        crate::trace!("pair: rdma_listen on {} returned", o.addr);
        on_listen(&o.addr.to_string());
        let ev = ch
            .expect(ffi::CM_CONNECT_REQUEST, o.timeout)
            .map_err(fail)?;
        crate::trace!("pair: server: connect request");
        id = CmId::from_event(ev.id, ch.cm());
        peer = Some(Hello::decode(&ev.private).map_err(fail)?);
    } else {
        crate::trace!("pair: client: resolving {}", o.addr);
        id = ch.create_id().map_err(|e| fail(e.to_string()))?;
        id.resolve_addr(o.bind.as_ref(), &o.addr, ms)
            .map_err(|e| fail(e.to_string()))?;
        ch.expect(ffi::CM_ADDR_RESOLVED, o.timeout)
            .map_err(|e| fail(format!("resolving {}: {e}", o.addr)))?;
        id.resolve_route(ms).map_err(|e| fail(e.to_string()))?;
        ch.expect(ffi::CM_ROUTE_RESOLVED, o.timeout)
            .map_err(|e| fail(format!("route to {}: {e}", o.addr)))?;
        crate::trace!("pair: client: route to {} resolved", o.addr);
        peer = None;
    }
    let ctx = id
        .context()
        .ok_or_else(|| fail("the RDMA CM bound no device".into()))?;
    rep.rdma_device = Some(ctx.device_name());
    let size = match peer {
        Some(h) if h.len == 0 || h.len > o.max_size as u64 => {
            rep.size = h.len;
            id.reject();
            return Err(fail(format!(
                "the client asked for a {} buffer; this server allows 1 byte to {} (--max-size)",
                crate::report::human_bytes(h.len),
                crate::report::human_bytes(o.max_size as u64)
            )));
        }
        Some(h) if h.len as usize != o.size => {
            rep.size = h.len;
            h.len as usize
        }
        _ => o.size,
    };
    let pd = ctx.alloc_pd().map_err(|e| fail(e.to_string()))?;
    let cq = ctx.create_cq(64).map_err(|e| fail(e.to_string()))?;
    let (mut buf, _gctx) = alloc(o.gpu, size)?;
    let dmabuf_fd = match &buf {
        Buffer::Gpu(g) if o.dmabuf => Some(g.export_dmabuf().map_err(|e| {
            let sys = crate::sysinfo::SysState::gather(&crate::root::SysRoot::live());
            let d = remedy::diagnose_cuda(e.code, "dma-buf export", &sys);
            fail(format!("{e}: {}; {}", d.cause, d.remedy))
        })?),
        _ => None,
    };
    let reg = match &dmabuf_fd {
        Some((fd, _)) => {
            use std::os::fd::AsRawFd;
            pd.reg_dmabuf_mr(fd.as_raw_fd(), buf.len(), buf.addr())
        }
        None => pd.reg_mr(buf.addr(), buf.len()),
    };
    let mr = reg.map_err(|e| {
        let step = match (buf.is_gpu(), dmabuf_fd.is_some()) {
            (true, true) => remedy::Step::RegDmabuf,
            (true, false) => remedy::Step::RegGpu,
            _ => remedy::Step::RegHost,
        };
        let sys = crate::sysinfo::SysState::gather(&crate::root::SysRoot::live());
        let d = remedy::diagnose(
            step,
            e.errno,
            &remedy::Context {
                sys: &sys,
                size: size as u64,
                bar1: None,
            },
        );
        fail(format!("{e}: {}; {}", d.cause, d.remedy))
    })?;
    let ctrl = HostBuf::new(4096);
    let ctrl_mr = pd
        .reg_mr(ctrl.as_slice().as_ptr() as u64, 4096)
        .map_err(|e| fail(e.to_string()))?;
    let qp = CmQp::create(&id, &pd, &cq, 64).map_err(|e| fail(e.to_string()))?;
    let mut link = Link {
        qp,
        cq: cq.clone(),
        ctrl,
        ctrl_mr,
        seen: HashSet::new(),
        sends: 0,
        timeout: o.timeout,
    };
    link.post_recvs().map_err(fail)?;
    let me = Hello {
        addr: buf.addr(),
        rkey: mr.rkey(),
        len: size as u64,
        seed: seed(),
    };
    let peer = if server {
        id.accept(&me.encode()).map_err(|e| fail(e.to_string()))?;
        ch.expect(ffi::CM_ESTABLISHED, o.timeout).map_err(fail)?;
        peer.expect("server has the client's hello")
    } else {
        id.connect(&me.encode()).map_err(|e| fail(e.to_string()))?;
        let ev = ch
            .expect(ffi::CM_ESTABLISHED, o.timeout)
            .map_err(|e| fail(format!("connecting to {}: {e}", o.addr)))?;
        Hello::decode(&ev.private).map_err(fail)?
    };
    let gpu = buf.is_gpu();
    // One direction: write my pattern into the peer's buffer.
    let write = |link: &mut Link, buf: &mut Buffer, dir: &'static str| -> PairRow {
        let r = row(dir, size);
        let want = pattern(me.seed, size);
        if let Err(e) = buf.store(&want) {
            return failed(r, e.to_string(), None);
        }
        let post = |wr: &mut ffi::SendWr| link.qp.post_send(wr);
        let stream = Stream {
            op: Op::Write,
            local: (buf.addr(), mr.lkey()),
            remote: (peer.addr, peer.rkey),
            len: size,
            count: 1,
            max_msg: 1 << 30,
            depth: 16,
            timeout: o.timeout,
        };
        match rdma_stream(&[&post], &cq, stream) {
            Ok(t) => PairRow {
                micros: Some(t.as_micros() as u64),
                gbit_per_s: Some(size as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9),
                ..r
            },
            Err(e) => {
                let d = match &e {
                    crate::loopback::XferError::Poll(PollError::Wc(w)) => {
                        remedy::diagnose_wc(w.status, gpu)
                    }
                    crate::loopback::XferError::Poll(PollError::Timeout(_)) => {
                        remedy::diagnose_timeout(gpu)
                    }
                    _ => remedy::diagnose_pair(&e.to_string()),
                };
                failed(r, e.to_string(), Some(d))
            }
        }
    };
    // The other: check what the peer wrote into mine.
    let verify = |buf: &Buffer, r: PairRow| -> PairRow {
        let want = pattern(peer.seed, size);
        match buf.load(size) {
            Err(e) => failed(r, e.to_string(), None),
            Ok(got) => match compare(&want, &got) {
                None => PairRow {
                    verified_bytes: size as u64,
                    ..r
                },
                Some((first, n)) => failed(
                    PairRow {
                        verified_bytes: first as u64,
                        ..r
                    },
                    format!("{n} of {size} bytes differ, first at offset {first}"),
                    Some(remedy::diagnose_mismatch(gpu)),
                ),
            },
        }
    };
    if server {
        let (kind, _) = link.recv(0).map_err(fail)?;
        if kind != MSG_WRITTEN {
            return Err(fail(format!("unexpected control message {kind}")));
        }
        let mine = verify(&buf, row("client->server", size));
        let mine_ok = mine.status == Status::Pass;
        rep.results.push(mine);
        let w = write(&mut link, &mut buf, "server->client");
        let wrote = w.status == Status::Pass;
        link.send(MSG_RESULT, mine_ok, 0).map_err(fail)?;
        let (kind, ok) = link.recv(1).map_err(fail)?;
        let mut r = w;
        if kind != MSG_FINAL || (wrote && !ok) {
            r = failed(
                r,
                "the client found the bytes wrong".into(),
                Some(remedy::diagnose_mismatch(gpu)),
            );
        } else if wrote {
            r.verified_bytes = size as u64;
        }
        rep.results.push(r);
        let _ = ch.next(Duration::from_secs(5));
    } else {
        let w = write(&mut link, &mut buf, "client->server");
        if w.status != Status::Pass {
            rep.results.push(w);
            return Ok(());
        }
        link.send(MSG_WRITTEN, true, 0).map_err(fail)?;
        let (kind, ok) = link.recv(0).map_err(fail)?;
        let mut r = w;
        if kind != MSG_RESULT || !ok {
            r = failed(
                r,
                "the server found the bytes wrong".into(),
                Some(remedy::diagnose_mismatch(gpu)),
            );
        } else {
            r.verified_bytes = size as u64;
        }
        rep.results.push(r);
        let mine = verify(&buf, row("server->client", size));
        let mine_ok = mine.status == Status::Pass;
        rep.results.push(mine);
        link.send(MSG_FINAL, mine_ok, 0).map_err(fail)?;
        id.disconnect();
        let _ = ch.next(Duration::from_secs(5));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_rejects() {
        let h = Hello {
            addr: 0x7f00_1234_0000,
            rkey: 0xabcd,
            len: 1 << 20,
            seed: 42,
        };
        let b = h.encode();
        assert!(b.len() <= 56, "fits RC private data");
        assert_eq!(Hello::decode(&b), Ok(h));
        assert!(Hello::decode(&b[..20]).is_err());
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert!(Hello::decode(&bad)
            .unwrap_err()
            .contains("not a peermem-probe"));
    }
}
