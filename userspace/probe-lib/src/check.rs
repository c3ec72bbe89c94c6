//! `check`: for each RDMA device (and GPU), register memory, connect a
//! loopback RC pair, RDMA-WRITE along every path and verify every byte;
//! then the same over dma-buf registrations.

use crate::cuda::{self, CudaState, Gpu, GpuCtx};
use crate::loopback::{Loopback, PortChoice, SetupError, XferError};
use crate::memory::{compare, pattern, Buffer, HostBuf};
use crate::remedy::{self, Context as RCtx, Diagnosis, Step};
use crate::report::{exit_code, overall, Status};
use crate::root::SysRoot;
use crate::sysinfo::SysState;
use crate::verbs::{self, Mr, PollError};
use serde::Serialize;
use std::time::Duration;

/// Which registration paths to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    All,
    PeerMem,
    DmaBuf,
}

#[derive(Debug, Clone)]
pub struct CheckOptions {
    pub size: usize,
    pub host_only: bool,
    pub devices: Vec<String>,
    pub gpus: Vec<i32>,
    pub only: Only,
    pub timeout: Duration,
    pub seed: u64,
}

/// One path's outcome: a JSON row and a table row.
#[derive(Debug, Clone, Serialize)]
pub struct PathResult {
    pub rdma_device: String,
    pub gpu: Option<i32>,
    pub path: String,
    pub registration: String,
    pub status: Status,
    pub bytes: u64,
    pub verified_bytes: u64,
    pub micros: Option<u64>,
    pub failed_step: Option<String>,
    pub error: Option<String>,
    pub errno: Option<i32>,
    pub cause: Option<String>,
    pub remedy: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CudaSummary {
    pub available: bool,
    pub driver_version: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceSummary {
    pub name: String,
    pub port: Option<PortChoice>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub command: &'static str,
    pub version: &'static str,
    pub status: Status,
    pub exit_code: i32,
    pub host_only: bool,
    pub size: u64,
    pub cuda: CudaSummary,
    pub gpus: Vec<Gpu>,
    pub rdma_devices: Vec<DeviceSummary>,
    pub results: Vec<PathResult>,
}

pub const PATHS_GPU: [&str; 3] = ["host->gpu", "gpu->host", "gpu->gpu"];

impl PathResult {
    fn new(dev: &str, gpu: Option<i32>, path: &str, reg: &str, bytes: usize) -> PathResult {
        PathResult {
            rdma_device: dev.to_string(),
            gpu,
            path: path.to_string(),
            registration: reg.to_string(),
            status: Status::Pass,
            bytes: bytes as u64,
            verified_bytes: 0,
            micros: None,
            failed_step: None,
            error: None,
            errno: None,
            cause: None,
            remedy: None,
        }
    }
    fn fail(
        mut self,
        status: Status,
        step: &str,
        error: String,
        errno: Option<i32>,
        d: Diagnosis,
    ) -> PathResult {
        self.status = status;
        self.failed_step = Some(step.to_string());
        self.error = Some(error);
        self.errno = errno;
        self.cause = Some(d.cause);
        self.remedy = Some(d.remedy);
        self
    }
}

fn driver_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Runs `check` on the live system.
pub fn run(opts: &CheckOptions) -> CheckReport {
    let root = SysRoot::live();
    let sys = SysState::gather(&root);
    let mut report = CheckReport {
        command: "check",
        version: env!("CARGO_PKG_VERSION"),
        status: Status::Pass,
        exit_code: 0,
        host_only: opts.host_only,
        size: opts.size as u64,
        cuda: CudaSummary {
            available: false,
            driver_version: None,
            error: None,
        },
        gpus: Vec::new(),
        rdma_devices: Vec::new(),
        results: Vec::new(),
    };
    // CUDA first: its absence is reported on every GPU path.
    let mut cuda_err: Option<(String, Diagnosis)> = None;
    if !opts.host_only {
        match cuda::state() {
            CudaState::Missing => {
                report.cuda.error = Some("libcuda.so not found".into());
                cuda_err = Some(("libcuda.so not found".into(), remedy::no_libcuda()));
            }
            CudaState::Broken(e) => {
                report.cuda.error = Some(e.to_string());
                cuda_err = Some((e.to_string(), remedy::diagnose_cuda(e.code, e.call, &sys)));
            }
            CudaState::Ready {
                driver_version: v,
                gpus,
            } => {
                report.cuda.available = true;
                report.cuda.driver_version = Some(driver_version(*v));
                report.gpus = gpus
                    .iter()
                    .filter(|g| opts.gpus.is_empty() || opts.gpus.contains(&g.ordinal))
                    .cloned()
                    .collect();
                if report.gpus.is_empty() {
                    let msg = if gpus.is_empty() {
                        "CUDA reports no GPU"
                    } else {
                        "no GPU matches --gpu"
                    };
                    cuda_err = Some((
                        msg.into(),
                        remedy::diagnose_cuda(100, "cuDeviceGetCount", &sys),
                    ));
                }
            }
        }
    }
    let devices = match verbs::device_names() {
        Err(e) => {
            let d = remedy::no_libibverbs(&e);
            let r = PathResult::new("-", None, "all", "-", opts.size).fail(
                Status::Untested,
                "load libibverbs",
                e,
                None,
                d,
            );
            report.results.push(r);
            Vec::new()
        }
        Ok(names) if names.is_empty() => {
            let r = PathResult::new("-", None, "all", "-", opts.size).fail(
                Status::Untested,
                "ibv_get_device_list",
                "no RDMA devices".into(),
                None,
                remedy::no_rdma_device(),
            );
            report.results.push(r);
            Vec::new()
        }
        Ok(names) => names
            .into_iter()
            .filter(|n| opts.devices.is_empty() || opts.devices.contains(n))
            .collect(),
    };
    if devices.is_empty() && !opts.devices.is_empty() {
        let r = PathResult::new(&opts.devices.join(","), None, "all", "-", opts.size).fail(
            Status::Untested,
            "ibv_get_device_list",
            "no such RDMA device".into(),
            None,
            remedy::no_rdma_device(),
        );
        report.results.push(r);
    }
    for dev in &devices {
        check_device(
            &root,
            &sys,
            opts,
            dev,
            &report.gpus.clone(),
            cuda_err.as_ref(),
            &mut report,
        );
    }
    let code = exit_code(report.results.iter().map(|r| r.status));
    report.exit_code = code;
    report.status = overall(code);
    report
}

fn gpu_rows(only: Only) -> Vec<(&'static str, &'static str)> {
    let mut rows = Vec::new();
    if only != Only::DmaBuf {
        rows.extend(PATHS_GPU.iter().map(|p| (*p, "ibv_reg_mr")));
    }
    if only != Only::PeerMem {
        rows.extend(PATHS_GPU.iter().map(|p| (*p, "dma-buf")));
    }
    rows
}

fn check_device(
    root: &SysRoot,
    sys: &SysState,
    opts: &CheckOptions,
    dev: &str,
    gpus: &[Gpu],
    cuda_err: Option<&(String, Diagnosis)>,
    report: &mut CheckReport,
) {
    let size = opts.size;
    let ctx_r = RCtx {
        sys,
        size: size as u64,
        bar1: None,
    };
    // Every row this device would get if nothing could run.
    let mut planned: Vec<(Option<i32>, &str, &str)> = vec![(None, "host->host", "ibv_reg_mr")];
    if !opts.host_only {
        if gpus.is_empty() {
            planned.extend(gpu_rows(opts.only).into_iter().map(|(p, r)| (None, p, r)));
        }
        for g in gpus {
            planned.extend(
                gpu_rows(opts.only)
                    .into_iter()
                    .map(|(p, r)| (Some(g.ordinal), p, r)),
            );
        }
    }
    let fail_all =
        |report: &mut CheckReport, step: &str, err: String, errno: Option<i32>, d: Diagnosis| {
            for (g, p, r) in &planned {
                let row = PathResult::new(dev, *g, p, r, size).fail(
                    Status::Fail,
                    step,
                    err.clone(),
                    errno,
                    d.clone(),
                );
                report.results.push(row);
            }
        };
    let ctx = match verbs::Context::open(dev) {
        Ok(c) => c,
        Err(e) => {
            report.rdma_devices.push(DeviceSummary {
                name: dev.into(),
                port: None,
                error: Some(e.clone()),
            });
            let d = remedy::diagnose(Step::CreateQp, libc::ENODEV, &ctx_r);
            return fail_all(report, "ibv_open_device", e, None, d);
        }
    };
    let lb = match Loopback::new(root, &ctx) {
        Ok(l) => l,
        Err(SetupError::Port(e)) => {
            report.rdma_devices.push(DeviceSummary {
                name: dev.into(),
                port: None,
                error: Some(e.clone()),
            });
            let d = Diagnosis {
                cause: "no usable port".into(),
                remedy: "bring the link up (`ibv_devinfo` must show PORT_ACTIVE); for RoCE give the netdev an IP address".into(),
            };
            return fail_all(report, "port", e, None, d);
        }
        Err(SetupError::Verbs(step, e)) => {
            report.rdma_devices.push(DeviceSummary {
                name: dev.into(),
                port: None,
                error: Some(e.to_string()),
            });
            let d = remedy::diagnose(step, e.errno, &ctx_r);
            return fail_all(report, e.call, e.to_string(), Some(e.errno), d);
        }
    };
    report.rdma_devices.push(DeviceSummary {
        name: dev.into(),
        port: Some(lb.port.clone()),
        error: None,
    });

    // Host baseline: proves the RDMA device itself moves and lands data.
    let mut h1 = Buffer::Host(HostBuf::new(size));
    let mut h2 = Buffer::Host(HostBuf::new(size));
    let base = PathResult::new(dev, None, "host->host", "ibv_reg_mr", size);
    let row = match (lb.pd.reg_mr(h1.addr(), size), lb.pd.reg_mr(h2.addr(), size)) {
        (Ok(m1), Ok(m2)) => transfer(&lb, opts, base, (&mut h1, &m1), (&mut h2, &m2), &ctx_r, 0),
        (Err(e), _) | (_, Err(e)) => base.fail(
            Status::Fail,
            e.call,
            e.to_string(),
            Some(e.errno),
            remedy::diagnose(Step::RegHost, e.errno, &ctx_r),
        ),
    };
    report.results.push(row);
    if opts.host_only {
        return;
    }
    if let Some((err, d)) = cuda_err {
        for (g, p, r) in planned.iter().skip(1) {
            let row = PathResult::new(dev, *g, p, r, size).fail(
                Status::Untested,
                "CUDA",
                err.clone(),
                None,
                d.clone(),
            );
            report.results.push(row);
        }
        return;
    }
    for g in gpus {
        check_gpu(sys, opts, &lb, g, &mut h1, report);
    }
}

fn check_gpu(
    sys: &SysState,
    opts: &CheckOptions,
    lb: &Loopback,
    g: &Gpu,
    host: &mut Buffer,
    report: &mut CheckReport,
) {
    let dev = lb.ctx.name.as_str();
    let size = opts.size;
    let bar1 = sys
        .gpu_by_bdf(&g.pci_bus_id)
        .and_then(|p| p.bar1_bytes(&SysRoot::live()));
    let ctx_r = RCtx {
        sys,
        size: size as u64,
        bar1,
    };
    let rows = gpu_rows(opts.only);
    let new = |p: &str, r: &str| PathResult::new(dev, Some(g.ordinal), p, r, size);
    let cuda_fail =
        |report: &mut CheckReport, reg: Option<&str>, e: &cuda::CudaError, what: &str| {
            for (p, r) in rows.iter().filter(|(_, r)| reg.is_none_or(|x| x == *r)) {
                let d = remedy::diagnose_cuda(e.code, what, sys);
                report
                    .results
                    .push(new(p, r).fail(Status::Fail, e.call, e.to_string(), None, d));
            }
        };
    let gctx = match GpuCtx::open(g.ordinal) {
        Ok(c) => c,
        Err(e) => return cuda_fail(report, None, &e, "context creation"),
    };
    let (mut g1, mut g2) = match (gctx.alloc(size), gctx.alloc(size)) {
        (Ok(a), Ok(b)) => (Buffer::Gpu(a), Buffer::Gpu(b)),
        (Err(e), _) | (_, Err(e)) => return cuda_fail(report, None, &e, "cuMemAlloc"),
    };
    let host_mr = match lb.pd.reg_mr(host.addr(), size) {
        Ok(m) => m,
        Err(e) => {
            for (p, r) in &rows {
                let d = remedy::diagnose(Step::RegHost, e.errno, &ctx_r);
                report.results.push(new(p, r).fail(
                    Status::Fail,
                    e.call,
                    e.to_string(),
                    Some(e.errno),
                    d,
                ));
            }
            return;
        }
    };
    for reg in ["ibv_reg_mr", "dma-buf"] {
        if !rows.iter().any(|(_, r)| *r == reg) {
            continue;
        }
        let mrs = if reg == "ibv_reg_mr" {
            let step = Step::RegGpu;
            match (
                lb.pd.reg_mr(g1.addr(), g1.len()),
                lb.pd.reg_mr(g2.addr(), g2.len()),
            ) {
                (Ok(a), Ok(b)) => Ok((a, b)),
                (Err(e), _) | (_, Err(e)) => {
                    Err((e.clone(), remedy::diagnose(step, e.errno, &ctx_r)))
                }
            }
        } else {
            let export = |b: &Buffer| match b {
                Buffer::Gpu(gb) => gb.export_dmabuf(),
                Buffer::Host(_) => unreachable!("GPU buffers only"),
            };
            match (export(&g1), export(&g2)) {
                (Ok(f1), Ok(f2)) => {
                    use std::os::fd::AsRawFd;
                    let step = Step::RegDmabuf;
                    let r1 = lb.pd.reg_dmabuf_mr(f1.as_raw_fd(), g1.len(), g1.addr());
                    let r2 = lb.pd.reg_dmabuf_mr(f2.as_raw_fd(), g2.len(), g2.addr());
                    match (r1, r2) {
                        (Ok(a), Ok(b)) => Ok((a, b)),
                        (Err(e), _) | (_, Err(e)) => {
                            Err((e.clone(), remedy::diagnose(step, e.errno, &ctx_r)))
                        }
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    cuda_fail(report, Some("dma-buf"), &e, "dma-buf export");
                    continue;
                }
            }
        };
        let (m1, m2) = match mrs {
            Ok(m) => m,
            Err((e, d)) => {
                for (p, _) in rows.iter().filter(|(_, r)| *r == reg) {
                    report.results.push(new(p, reg).fail(
                        Status::Fail,
                        e.call,
                        e.to_string(),
                        Some(e.errno),
                        d.clone(),
                    ));
                }
                continue;
            }
        };
        for (i, p) in PATHS_GPU.iter().enumerate() {
            let row = new(p, reg);
            let seed = (i as u64 + 1) * 0x9e37_79b9 + if reg == "dma-buf" { 7 } else { 0 };
            let r = match *p {
                "host->gpu" => transfer(
                    lb,
                    opts,
                    row,
                    (host, &host_mr),
                    (&mut g1, &m1),
                    &ctx_r,
                    seed,
                ),
                "gpu->host" => transfer(
                    lb,
                    opts,
                    row,
                    (&mut g1, &m1),
                    (host, &host_mr),
                    &ctx_r,
                    seed,
                ),
                _ => transfer(lb, opts, row, (&mut g1, &m1), (&mut g2, &m2), &ctx_r, seed),
            };
            report.results.push(r);
        }
    }
}

/// Fills `src`, poisons `dst`, RDMA-writes and compares every byte.
fn transfer(
    lb: &Loopback,
    opts: &CheckOptions,
    row: PathResult,
    (src, smr): (&mut Buffer, &Mr),
    (dst, dmr): (&mut Buffer, &Mr),
    ctx: &RCtx,
    salt: u64,
) -> PathResult {
    let size = opts.size;
    let gpu = src.is_gpu() || dst.is_gpu();
    let want = pattern(opts.seed ^ salt, size);
    let poison = pattern(!(opts.seed ^ salt), size);
    let prep = src.store(&want).and_then(|_| dst.store(&poison));
    if let Err(e) = prep {
        let d = remedy::diagnose_cuda(e.code, "a copy to GPU memory", ctx.sys);
        return row.fail(Status::Fail, e.call, e.to_string(), None, d);
    }
    let t = match lb.write(
        (src.addr(), smr.lkey()),
        (dst.addr(), dmr.rkey()),
        size,
        1,
        opts.timeout,
    ) {
        Ok(t) => t,
        Err(e) => {
            let (errno, d) = match &e {
                XferError::Post(v) | XferError::Poll(PollError::Verbs(v)) => (
                    Some(v.errno),
                    remedy::diagnose(Step::ConnectQp, v.errno, ctx),
                ),
                XferError::Poll(PollError::Wc(w)) => (None, remedy::diagnose_wc(w.status, gpu)),
                XferError::Poll(PollError::Timeout(_)) => (None, remedy::diagnose_wc(12, gpu)),
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
