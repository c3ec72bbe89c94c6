//! `bench`: ibv_reg_mr / ibv_dereg_mr latency by size on host and GPU
//! memory, and RDMA-write bandwidth over a loopback pair. Numbers only:
//! a slow result never fails.

use crate::cuda::{self, CudaState, GpuCtx};
use crate::loopback::{Loopback, Op};
use crate::memory::{Buffer, HostBuf};
use crate::remedy::{self, Context as RCtx, Step};
use crate::report::{Outcome, RunVerdict, Status};
use crate::root::SysRoot;
use crate::sysinfo::SysState;
use crate::verbs;
use serde::Serialize;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub device: Option<String>,
    pub gpu: i32,
    pub host_only: bool,
    pub sizes: Vec<usize>,
    pub iters: usize,
    /// Message sizes of the bandwidth sweep.
    pub bw_sizes: Vec<usize>,
    /// Messages per size and operation.
    pub bw_iters: usize,
    /// QPs the messages are spread over (perftest -q).
    pub qps: usize,
    /// Register the GPU memory through dma-buf instead of ibv_reg_mr.
    pub dmabuf: bool,
    /// How GPU memory is allocated.
    pub alloc: crate::cuda::Allocation,
    pub timeout: Duration,
}

/// GPU memory as `--alloc` asks (cuMemCreate: GPUDirect-RDMA capable).
fn gpu_alloc(
    c: &std::rc::Rc<GpuCtx>,
    a: crate::cuda::Allocation,
    size: usize,
) -> Result<crate::cuda::GpuBuf, crate::cuda::CudaError> {
    match a {
        crate::cuda::Allocation::CuMemAlloc => c.alloc(size),
        crate::cuda::Allocation::CuMemCreate => c.alloc_vmm(size, true),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RegRow {
    pub memory: &'static str,
    /// "ibv_reg_mr" or "dma-buf".
    pub registration: &'static str,
    pub size: u64,
    pub status: Status,
    /// Registrations measured (null: none ran).
    pub iterations: Option<usize>,
    pub reg_p50_us: Option<f64>,
    pub reg_p99_us: Option<f64>,
    pub dereg_p50_us: Option<f64>,
    pub dereg_p99_us: Option<f64>,
    pub error: Option<String>,
    pub cause: Option<String>,
    pub remedy: Option<String>,
}

/// One bandwidth measurement, in perftest's terms (ib_write_bw /
/// ib_read_bw with -s size -n iterations -q qps).
#[derive(Debug, Clone, Serialize)]
pub struct BwRow {
    pub path: &'static str,
    /// "write" or "read".
    pub op: &'static str,
    pub size: u64,
    pub qps: usize,
    pub status: Status,
    /// Messages measured (null: none ran).
    pub iterations: Option<usize>,
    pub gbit_per_s: Option<f64>,
    pub mb_per_s: Option<f64>,
    pub msg_rate_mpps: Option<f64>,
    /// GPU rows: this bandwidth over the host->host one at the same
    /// operation and size.
    pub gpu_vs_host: Option<f64>,
    pub error: Option<String>,
}

/// Why nothing could be measured: no libibverbs, no such RDMA device, the
/// device does not open.
#[derive(Debug, Clone, Serialize)]
pub struct SetupFailure {
    pub status: Status,
    pub error: Option<String>,
    pub cause: Option<String>,
    pub remedy: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub schema_version: u32,
    pub command: &'static str,
    pub version: &'static str,
    pub status: Status,
    pub exit_code: i32,
    pub verdict: RunVerdict,
    pub rdma_device: Option<String>,
    pub gpu: Option<String>,
    /// How the GPU rows' memory was allocated (None: host only).
    pub gpu_allocation: Option<crate::cuda::Allocation>,
    /// Set when nothing could be measured (then both tables are empty).
    pub setup: Option<SetupFailure>,
    pub registration: Vec<RegRow>,
    pub bandwidth: Vec<BwRow>,
}

/// The overall answer from the setup and every row.
fn verdict(r: &BenchReport) -> RunVerdict {
    let mut rows: Vec<Outcome<'_>> = Vec::new();
    if let Some(s) = &r.setup {
        rows.push(Outcome {
            name: "setup".into(),
            status: s.status,
            cause: s.cause.as_deref().or(s.error.as_deref()),
        });
    }
    for g in &r.registration {
        rows.push(Outcome {
            name: format!(
                "{} {} {}",
                g.memory,
                g.registration,
                crate::report::human_bytes(g.size)
            ),
            status: g.status,
            cause: g.cause.as_deref().or(g.error.as_deref()),
        });
    }
    for b in &r.bandwidth {
        rows.push(Outcome {
            name: format!("{} {} {}", b.path, b.op, crate::report::human_bytes(b.size)),
            status: b.status,
            cause: b.error.as_deref(),
        });
    }
    RunVerdict::from_rows(&rows)
}

/// Progress: the total number of steps once, then one tick per step.
pub trait Progress {
    fn start(&mut self, total: u64);
    fn tick(&mut self, msg: &str);
}

/// The p-th percentile (0..=100) of sorted samples, in microseconds.
pub fn percentile(sorted: &[Duration], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    Some(sorted[rank.min(sorted.len() - 1)].as_secs_f64() * 1e6)
}

fn reg_row(memory: &'static str, size: usize) -> RegRow {
    RegRow {
        memory,
        registration: "ibv_reg_mr",
        size: size as u64,
        status: Status::Pass,
        iterations: None,
        reg_p50_us: None,
        reg_p99_us: None,
        dereg_p50_us: None,
        dereg_p99_us: None,
        error: None,
        cause: None,
        remedy: None,
    }
}

fn untested(mut r: RegRow, err: &str, d: remedy::Diagnosis) -> RegRow {
    r.status = Status::Untested;
    r.error = Some(err.to_string());
    r.cause = Some(d.cause);
    r.remedy = Some(d.remedy);
    r
}

fn bw_row(path: &'static str, op: Op, size: usize, o: &BenchOptions) -> BwRow {
    BwRow {
        path,
        op: match op {
            Op::Write => "write",
            Op::Read => "read",
        },
        size: size as u64,
        qps: o.qps.max(1),
        status: Status::Pass,
        iterations: None,
        gbit_per_s: None,
        mb_per_s: None,
        msg_rate_mpps: None,
        gpu_vs_host: None,
        error: None,
    }
}

pub fn run(o: &BenchOptions, progress: &mut dyn Progress) -> BenchReport {
    let root = SysRoot::live();
    let sys = SysState::gather(&root);
    let mut rep = BenchReport {
        schema_version: crate::report::SCHEMA_VERSION,
        command: "bench",
        version: env!("CARGO_PKG_VERSION"),
        status: Status::Pass,
        exit_code: 0,
        verdict: RunVerdict::from_rows(&[]),
        rdma_device: None,
        gpu: None,
        gpu_allocation: (!o.host_only).then_some(o.alloc),
        setup: None,
        registration: Vec::new(),
        bandwidth: Vec::new(),
    };
    let finish = |mut rep: BenchReport| {
        rep.verdict = verdict(&rep);
        rep.exit_code = rep.verdict.exit_code;
        rep.status = rep.verdict.status;
        rep
    };
    let setup = |status: Status, e: String, d: Option<remedy::Diagnosis>| {
        crate::trace!("bench: setup failed: {e}");
        SetupFailure {
            status,
            error: Some(e),
            cause: d.as_ref().map(|d| d.cause.clone()),
            remedy: d.map(|d| d.remedy),
        }
    };
    crate::trace!("bench: listing RDMA devices");
    let dev = match verbs::device_names() {
        Err(e) => {
            let d = remedy::no_libibverbs(&e);
            rep.setup = Some(setup(Status::Untested, e, Some(d)));
            return finish(rep);
        }
        Ok(names) => match &o.device {
            Some(d) if names.contains(d) => d.clone(),
            Some(d) => {
                rep.setup = Some(setup(
                    Status::Untested,
                    format!(
                        "no RDMA device '{d}' (devices: {})",
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    ),
                    Some(remedy::no_rdma_device(&sys)),
                ));
                return finish(rep);
            }
            None => match names.first() {
                Some(n) => n.clone(),
                None => {
                    rep.setup = Some(setup(
                        Status::Untested,
                        "no RDMA devices".into(),
                        Some(remedy::no_rdma_device(&sys)),
                    ));
                    return finish(rep);
                }
            },
        },
    };
    rep.rdma_device = Some(dev.clone());
    crate::trace!("bench: opening {dev} and a loopback pair");
    let lb = match verbs::Context::open(&dev)
        .map_err(|e| e.to_string())
        .and_then(|c| Loopback::new(&root, &c).map_err(|e| e.to_string()))
    {
        Ok(l) => l,
        Err(e) => {
            rep.setup = Some(setup(Status::Fail, e, None));
            return finish(rep);
        }
    };
    // GPU: a context, or the reason there is none.
    let mut gpu_err: Option<(String, remedy::Diagnosis)> = None;
    let mut gctx = None;
    if !o.host_only {
        match cuda::state() {
            CudaState::Missing => {
                gpu_err = Some(("libcuda.so not found".into(), remedy::no_libcuda()))
            }
            CudaState::Broken(e) => {
                gpu_err = Some((e.to_string(), remedy::diagnose_cuda(e.code, e.call, &sys)))
            }
            CudaState::Ready { gpus, .. } => match gpus.iter().find(|g| g.ordinal == o.gpu) {
                None => {
                    gpu_err = Some((
                        format!("no GPU {}", o.gpu),
                        remedy::diagnose_cuda(100, "cuDeviceGet", &sys),
                    ))
                }
                Some(g) => match GpuCtx::open(g.ordinal) {
                    Ok(c) => {
                        rep.gpu = Some(format!("{} ({}, {})", g.ordinal, g.name, g.pci_bus_id));
                        gctx = Some((
                            c,
                            sys.gpu_by_bdf(&g.pci_bus_id)
                                .and_then(|p| p.bar1_bytes(&root)),
                        ));
                    }
                    Err(e) => {
                        gpu_err = Some((e.to_string(), remedy::diagnose_cuda(e.code, e.call, &sys)))
                    }
                },
            },
        }
    }
    let mems: Vec<&'static str> = if o.host_only {
        vec!["host"]
    } else {
        vec!["host", "gpu"]
    };
    let runs = mems
        .iter()
        .filter(|m| **m == "host" || gctx.is_some())
        .count();
    progress
        .start((runs * o.sizes.len() * o.iters + 2 * o.bw_iters * o.bw_sizes.len() * runs) as u64);
    for mem in &mems {
        for &size in &o.sizes {
            crate::trace!(
                "bench: ibv_reg_mr x{} on {mem} memory, {size} bytes",
                o.iters
            );
            let row = reg_row(mem, size);
            if *mem == "gpu" {
                if let Some((e, d)) = &gpu_err {
                    rep.registration.push(untested(row, e, d.clone()));
                    continue;
                }
            }
            let buf = if *mem == "host" {
                Ok(Buffer::Host(HostBuf::new(size)))
            } else {
                gctx.as_ref()
                    .map(|(c, _)| gpu_alloc(c, o.alloc, size).map(Buffer::Gpu))
                    .expect("GPU context checked above")
            };
            let bar1 = gctx.as_ref().and_then(|(_, b)| *b);
            let rc = RCtx {
                sys: &sys,
                size: size as u64,
                bar1: if *mem == "gpu" { bar1 } else { None },
            };
            let row = match buf {
                Err(e) => {
                    let d = remedy::diagnose_cuda(e.code, "cuMemAlloc", &sys);
                    let mut r = untested(row, &e.to_string(), d);
                    r.status = Status::Fail;
                    r
                }
                Ok(b) => measure_reg(&lb, &b, row, o.iters, o.dmabuf, &rc, progress),
            };
            rep.registration.push(row);
        }
    }
    bandwidth(
        &lb,
        o,
        gctx.as_ref().map(|(c, _)| c),
        gpu_err.as_ref(),
        &mut rep,
        progress,
    );
    finish(rep)
}

fn measure_reg(
    lb: &Loopback,
    b: &Buffer,
    mut row: RegRow,
    iters: usize,
    dmabuf: bool,
    rc: &RCtx,
    progress: &mut dyn Progress,
) -> RegRow {
    let dmabuf = dmabuf && b.is_gpu();
    let step = match (b.is_gpu(), dmabuf) {
        (true, true) => Step::RegDmabuf,
        (true, false) => Step::RegGpu,
        _ => Step::RegHost,
    };
    // dma-buf: one export, then registrations of it (what NCCL repeats).
    let fd = match b {
        Buffer::Gpu(g) if dmabuf => match g.export_dmabuf() {
            Ok((fd, _)) => Some(fd),
            Err(e) => {
                let d = remedy::diagnose_cuda(e.code, "dma-buf export", rc.sys);
                row.status = Status::Fail;
                row.error = Some(e.to_string());
                row.cause = Some(d.cause);
                row.remedy = Some(d.remedy);
                return row;
            }
        },
        _ => None,
    };
    row.registration = if dmabuf { "dma-buf" } else { "ibv_reg_mr" };
    let (mut reg, mut dereg) = (Vec::with_capacity(iters), Vec::with_capacity(iters));
    for _ in 0..iters {
        let t0 = Instant::now();
        let r = match &fd {
            Some(fd) => {
                use std::os::fd::AsRawFd;
                lb.pd.reg_dmabuf_mr(fd.as_raw_fd(), b.len(), b.addr())
            }
            None => lb.pd.reg_mr(b.addr(), b.len()),
        };
        let mr = match r {
            Ok(m) => m,
            Err(e) => {
                let d = remedy::diagnose(step, e.errno, rc);
                row.status = Status::Fail;
                row.error = Some(e.to_string());
                row.cause = Some(d.cause);
                row.remedy = Some(d.remedy);
                return row;
            }
        };
        let t1 = Instant::now();
        let r = mr.dereg();
        let t2 = Instant::now();
        if let Err(e) = r {
            row.status = Status::Fail;
            row.error = Some(e.to_string());
            return row;
        }
        reg.push(t1 - t0);
        dereg.push(t2 - t1);
        progress.tick(&format!(
            "reg {} {}",
            row.memory,
            crate::report::human_bytes(row.size)
        ));
    }
    reg.sort();
    dereg.sort();
    row.iterations = Some(reg.len());
    row.reg_p50_us = percentile(&reg, 50.0);
    row.reg_p99_us = percentile(&reg, 99.0);
    row.dereg_p50_us = percentile(&dereg, 50.0);
    row.dereg_p99_us = percentile(&dereg, 99.0);
    row
}

/// Registers `b` for the bandwidth test: ibv_reg_mr, or dma-buf export +
/// ibv_reg_dmabuf_mr for GPU memory with `--dmabuf`.
fn reg_for_bw(lb: &Loopback, b: &Buffer, dmabuf: bool) -> Result<crate::verbs::Mr, String> {
    match b {
        Buffer::Gpu(g) if dmabuf => {
            use std::os::fd::AsRawFd;
            let (fd, _) = g.export_dmabuf().map_err(|e| e.to_string())?;
            lb.pd
                .reg_dmabuf_mr(fd.as_raw_fd(), b.len(), b.addr())
                .map_err(|e| e.to_string())
        }
        _ => lb.pd.reg_mr(b.addr(), b.len()).map_err(|e| e.to_string()),
    }
}

fn bandwidth(
    lb: &Loopback,
    o: &BenchOptions,
    gctx: Option<&std::rc::Rc<GpuCtx>>,
    gpu_err: Option<&(String, remedy::Diagnosis)>,
    rep: &mut BenchReport,
    progress: &mut dyn Progress,
) {
    let mut paths: Vec<&'static str> = vec!["host->host"];
    if !o.host_only {
        paths.push("gpu->gpu");
    }
    let biggest = o.bw_sizes.iter().copied().max().unwrap_or(4096);
    for path in paths {
        let bufs = if path == "host->host" {
            Ok((
                Buffer::Host(HostBuf::new(biggest)),
                Buffer::Host(HostBuf::new(biggest)),
            ))
        } else if let Some(c) = gctx {
            gpu_alloc(c, o.alloc, biggest)
                .and_then(|a| Ok((Buffer::Gpu(a), Buffer::Gpu(gpu_alloc(c, o.alloc, biggest)?))))
                .map_err(|e| e.to_string())
        } else {
            Err(gpu_err.map(|(e, _)| e.clone()).unwrap_or_default())
        };
        let untested = path != "host->host" && gctx.is_none();
        let mrs = bufs.and_then(|(a, b)| {
            let dmabuf = o.dmabuf && path != "host->host";
            let ma = reg_for_bw(lb, &a, dmabuf)?;
            let mb = reg_for_bw(lb, &b, dmabuf)?;
            Ok(((a, ma), (b, mb)))
        });
        for op in [Op::Write, Op::Read] {
            for &size in &o.bw_sizes {
                let mut row = bw_row(path, op, size, o);
                match &mrs {
                    Err(e) => {
                        row.status = if untested {
                            Status::Untested
                        } else {
                            Status::Fail
                        };
                        row.error = Some(e.clone());
                    }
                    Ok(((a, ma), (b, mb))) => {
                        crate::trace!(
                            "bench: {path} {} {size} bytes x{} on {} QP(s)",
                            op.name(),
                            o.bw_iters,
                            o.qps
                        );
                        let r = lb.pairs(o.qps).map_err(|e| e.to_string()).and_then(|p| {
                            p.run(
                                op,
                                (a.addr(), ma.lkey()),
                                (b.addr(), mb.rkey()),
                                size,
                                o.bw_iters,
                                o.timeout,
                            )
                            .map_err(|e| e.to_string())
                        });
                        match r {
                            Ok(t) => {
                                let secs = t.as_secs_f64().max(1e-9);
                                let bytes = (size * o.bw_iters) as f64;
                                row.gbit_per_s = Some(bytes * 8.0 / secs / 1e9);
                                row.mb_per_s = Some(bytes / secs / 1e6);
                                row.msg_rate_mpps = Some(o.bw_iters as f64 / secs / 1e6);
                                row.iterations = Some(o.bw_iters);
                            }
                            Err(e) => {
                                row.status = Status::Fail;
                                row.error = Some(e);
                            }
                        }
                    }
                }
                for _ in 0..o.bw_iters {
                    progress.tick(&format!("{} {path}", op.name()));
                }
                rep.bandwidth.push(row);
            }
        }
    }
    // GPU vs host at the same operation and size.
    let host: Vec<(&'static str, u64, f64)> = rep
        .bandwidth
        .iter()
        .filter(|r| r.path == "host->host")
        .filter_map(|r| Some((r.op, r.size, r.gbit_per_s?)))
        .collect();
    for r in rep.bandwidth.iter_mut().filter(|r| r.path != "host->host") {
        r.gpu_vs_host = host
            .iter()
            .find(|(op, size, _)| *op == r.op && *size == r.size)
            .and_then(|(_, _, h)| Some(r.gbit_per_s? / h.max(1e-12)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&v, 50.0), Some(51.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[Duration::from_micros(7)], 99.0), Some(7.0));
    }
}
