//! The GPU rows of `check`: each allocation kind (cuMemAlloc, cuMemCreate)
//! through each mechanism (peer memory, dma-buf) along each path, and the
//! transfer-and-verify step every row shares.

use super::{CheckOptions, CheckReport, PathResult, PATHS_GPU};
use crate::cuda::{Allocation, CudaError, Gpu, GpuCtx};
use crate::loopback::{Loopback, XferError};
use crate::memory::{compare, pattern, Buffer};
use crate::remedy::{self, Context as RCtx, Diagnosis, Step};
use crate::report::Status;
use crate::root::SysRoot;
use crate::sysinfo::SysState;
use crate::verbs::{wc_status_name, Mr, PollError, VerbsError};
use crate::verdict::Mechanism;
use std::os::fd::AsRawFd;
use std::rc::Rc;

/// Finishes a row template as failed or not available.
type RowFinish = Box<dyn Fn(PathResult) -> PathResult>;

/// Registers two GPU buffers through `mech`. Err: a finished row template
/// (failed or not available) for every path of this mechanism.
fn register(
    lb: &Loopback,
    sys: &SysState,
    g: &Gpu,
    mech: Mechanism,
    bufs: (&Buffer, &Buffer),
    rc: &RCtx,
) -> Result<((Mr, Mr), Option<&'static str>), RowFinish> {
    let gpu_limited = g.gpu_direct_rdma_supported == Some(false);
    let verbs_fail = move |e: VerbsError, d: Diagnosis| -> RowFinish {
        Box::new(move |r: PathResult| {
            if gpu_limited {
                return r.not_available(remedy::no_gdr_on_gpu());
            }
            r.fail(
                Status::Fail,
                e.call,
                e.to_string(),
                Some(e.errno),
                d.clone(),
            )
        })
    };
    match mech {
        Mechanism::PeerMemory => {
            let r1 = lb.pd.reg_mr(bufs.0.addr(), bufs.0.len());
            let r2 = lb.pd.reg_mr(bufs.1.addr(), bufs.1.len());
            match (r1, r2) {
                (Ok(a), Ok(b)) => Ok(((a, b), None)),
                (Err(e), _) | (_, Err(e)) => {
                    crate::trace!("ibv_reg_mr on GPU memory: {e}");
                    // EFAULT with no client anywhere: the mechanism is not set up.
                    if e.errno == libc::EFAULT && !sys.has_peer_client() && !gpu_limited {
                        let d = remedy::diagnose(Step::RegGpu, e.errno, rc);
                        return Err(Box::new(move |r: PathResult| r.not_available(d.clone())));
                    }
                    Err(verbs_fail(
                        e.clone(),
                        remedy::diagnose(Step::RegGpu, e.errno, rc),
                    ))
                }
            }
        }
        _ => {
            let export = |b: &Buffer| match b {
                Buffer::Gpu(gb) => gb.export_dmabuf(),
                Buffer::Host(_) => Err(CudaError {
                    call: "cuMemGetHandleForAddressRange",
                    code: 1,
                    name: "not GPU memory".into(),
                }),
            };
            let ((f1, pcie), (f2, _)) = match (export(bufs.0), export(bufs.1)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => {
                    crate::trace!("dma-buf export: {e}");
                    let d = remedy::diagnose_cuda(e.code, "dma-buf export", sys);
                    if e.code == 801 || !g.dma_buf_supported {
                        return Err(Box::new(move |r: PathResult| r.not_available(d.clone())));
                    }
                    return Err(Box::new(move |r: PathResult| {
                        r.fail(Status::Fail, e.call, e.to_string(), None, d.clone())
                    }));
                }
            };
            let r1 = lb
                .pd
                .reg_dmabuf_mr(f1.as_raw_fd(), bufs.0.len(), bufs.0.addr());
            let r2 = lb
                .pd
                .reg_dmabuf_mr(f2.as_raw_fd(), bufs.1.len(), bufs.1.addr());
            match (r1, r2) {
                (Ok(a), Ok(b)) => Ok(((a, b), Some(if pcie { "pcie" } else { "default" }))),
                (Err(e), _) | (_, Err(e)) => {
                    crate::trace!("ibv_reg_dmabuf_mr: {e}");
                    Err(verbs_fail(
                        e.clone(),
                        remedy::diagnose(Step::RegDmabuf, e.errno, rc),
                    ))
                }
            }
        }
    }
}

/// All rows of one GPU on one device.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_gpu(
    sys: &SysState,
    opts: &CheckOptions,
    lb: &Loopback,
    g: &Gpu,
    mechs: &[Mechanism],
    blocked: &dyn Fn(Mechanism) -> Option<Diagnosis>,
    host: &mut Buffer,
    report: &mut CheckReport,
) {
    let dev = lb.ctx.name.clone();
    let size = opts.size;
    let bar1 = sys
        .gpu_by_bdf(&g.pci_bus_id)
        .and_then(|p| p.bar1_bytes(&SysRoot::live()));
    let rc = RCtx {
        sys,
        size: size as u64,
        bar1,
    };
    let new = |m: Mechanism, a: Option<Allocation>| {
        PathResult::new(Some(&dev), Some(g.ordinal), m, size).alloc(a)
    };
    // Blocked mechanisms: one row each, nothing allocated.
    let mut run: Vec<Mechanism> = Vec::new();
    for m in mechs {
        match blocked(*m) {
            Some(d) => report.results.push(new(*m, None).not_available(d)),
            None => run.push(*m),
        }
    }
    if run.is_empty() {
        return;
    }
    let gctx = match GpuCtx::open(g.ordinal) {
        Ok(c) => c,
        Err(e) => {
            for m in &run {
                let d = remedy::diagnose_cuda(e.code, "context creation", sys);
                report.results.push(new(*m, None).fail(
                    Status::Fail,
                    e.call,
                    e.to_string(),
                    None,
                    d,
                ));
            }
            return;
        }
    };
    let host_mr = match lb.pd.reg_mr(host.addr(), size) {
        Ok(m) => m,
        Err(e) => {
            let d = remedy::diagnose(Step::RegHost, e.errno, &rc);
            for m in &run {
                report.results.push(new(*m, None).fail(
                    Status::Fail,
                    e.call,
                    e.to_string(),
                    Some(e.errno),
                    d.clone(),
                ));
            }
            return;
        }
    };
    for alloc in &opts.allocations {
        // The driver says cuMemCreate memory cannot be registered: nothing
        // to try (NCCL then falls back or disables GPUDirect RDMA too).
        if *alloc == Allocation::CuMemCreate && g.gpu_direct_rdma_with_vmm == Some(false) {
            for m in &run {
                let r = new(*m, Some(*alloc)).not_available(remedy::no_gdr_with_vmm());
                report.results.push(r);
            }
            continue;
        }
        let bufs = alloc_pair(&gctx, *alloc, size);
        let (mut g1, mut g2) = match bufs {
            Ok(b) => b,
            Err(e) => {
                for m in &run {
                    let r = new(*m, Some(*alloc));
                    let d = remedy::diagnose_cuda(e.code, alloc.label(), sys);
                    report
                        .results
                        .push(r.fail(Status::Fail, e.call, e.to_string(), None, d));
                }
                continue;
            }
        };
        for m in &run {
            let ((m1, m2), mapping) = match register(lb, sys, g, *m, (&g1, &g2), &rc) {
                Ok(x) => x,
                Err(finish) => {
                    report.results.push(finish(new(*m, Some(*alloc))));
                    continue;
                }
            };
            for (i, p) in PATHS_GPU.iter().enumerate() {
                let mut row = new(*m, Some(*alloc)).path(p);
                row.dma_buf_mapping = mapping;
                let seed = (i as u64 + 1) * 0x9e37_79b9
                    + if *m == Mechanism::DmaBuf { 7 } else { 0 }
                    + if *alloc == Allocation::CuMemCreate {
                        13
                    } else {
                        0
                    };
                let r = match *p {
                    "host->gpu" => {
                        transfer(lb, opts, row, (host, &host_mr), (&mut g1, &m1), &rc, seed)
                    }
                    "gpu->host" => {
                        transfer(lb, opts, row, (&mut g1, &m1), (host, &host_mr), &rc, seed)
                    }
                    _ => transfer(lb, opts, row, (&mut g1, &m1), (&mut g2, &m2), &rc, seed),
                };
                report.results.push(r);
            }
        }
    }
}

fn alloc_pair(
    gctx: &Rc<GpuCtx>,
    alloc: Allocation,
    size: usize,
) -> Result<(Buffer, Buffer), CudaError> {
    let one = || match alloc {
        Allocation::CuMemAlloc => gctx.alloc(size),
        Allocation::CuMemCreate => gctx.alloc_vmm(size, true),
    };
    Ok((Buffer::Gpu(one()?), Buffer::Gpu(one()?)))
}

/// Fills `src`, poisons `dst`, RDMA-writes over a fresh QP pair, flushes
/// (an RDMA READ of the destination), reads back and compares every byte.
pub(super) fn transfer(
    lb: &Loopback,
    opts: &CheckOptions,
    row: PathResult,
    src: (&mut Buffer, &Mr),
    dst: (&mut Buffer, &Mr),
    ctx: &RCtx,
    salt: u64,
) -> PathResult {
    transfer_keyed(lb, opts, row, src, dst, ctx, salt, 0)
}

/// [`transfer`] with the destination's rkey XORed by `rkey_xor` (a test
/// hook: non-zero makes the write fail at the responder).
#[allow(clippy::too_many_arguments)]
pub(super) fn transfer_keyed(
    lb: &Loopback,
    opts: &CheckOptions,
    row: PathResult,
    (src, smr): (&mut Buffer, &Mr),
    (dst, dmr): (&mut Buffer, &Mr),
    ctx: &RCtx,
    salt: u64,
    rkey_xor: u32,
) -> PathResult {
    let size = opts.size;
    let gpu = src.is_gpu() || dst.is_gpu();
    let want = pattern(opts.seed ^ salt, size);
    let poison = pattern(!(opts.seed ^ salt), size);
    if let Err(e) = src.store(&want).and_then(|_| dst.store(&poison)) {
        let d = remedy::diagnose_cuda(e.code, "a copy to GPU memory", ctx.sys);
        return row.fail(Status::Fail, e.call, e.to_string(), None, d);
    }
    // A fresh pair per attempt: an earlier path's error state stays there.
    let pairs = match lb.pairs(1) {
        Ok(p) => p,
        Err(crate::loopback::SetupError::Verbs(step, e)) => {
            let d = remedy::diagnose(step, e.errno, ctx);
            return row.fail(Status::Fail, e.call, e.to_string(), Some(e.errno), d);
        }
        Err(e) => {
            let d = remedy::port_down(ctx.sys, &lb.ctx.name);
            return row.fail(Status::Fail, "port", e.to_string(), None, d);
        }
    };
    let dst_key = (dst.addr(), dmr.rkey() ^ rkey_xor);
    let t = match pairs.write_flushed((src.addr(), smr.lkey()), dst_key, size, opts.timeout) {
        Ok(t) => t,
        Err(e) => {
            let mut row = row;
            let (errno, d) = match &e {
                XferError::Post(v) | XferError::Poll(PollError::Verbs(v)) => (
                    Some(v.errno),
                    remedy::diagnose(Step::ConnectQp, v.errno, ctx),
                ),
                XferError::Poll(PollError::Wc(w)) => {
                    row.wc_status = Some(wc_status_name(w.status));
                    row.vendor_err = Some(w.vendor_err);
                    (None, remedy::diagnose_wc(w.status, gpu))
                }
                XferError::Poll(PollError::Timeout(_)) => (None, remedy::diagnose_timeout(gpu)),
                XferError::Stray(_) => (None, remedy::stray_completion()),
            };
            return row.fail(Status::Fail, "rdma write", e.to_string(), errno, d);
        }
    };
    let got = match dst.load(size) {
        Ok(g) => g,
        Err(e) => {
            let d = remedy::diagnose_cuda(e.code, "a copy from GPU memory", ctx.sys);
            return row.fail(Status::Fail, e.call, e.to_string(), None, d);
        }
    };
    let mut row = row;
    row.micros = Some(t.as_micros() as u64);
    match compare(&want, &got) {
        None => {
            row.verified_bytes = size as u64;
            row
        }
        Some((first, n)) => {
            row.verified_bytes = first as u64;
            let e = format!("{n} of {size} bytes differ, first at offset {first}");
            row.fail(
                Status::Fail,
                "verify",
                e,
                None,
                remedy::diagnose_mismatch(gpu),
            )
        }
    }
}
