//! `simctl bench`: what registrations cost, measured by the simulated core
//! (its CLOCK_MONOTONIC timing of each ibv_reg_mr / ibv_dereg_mr) and by the
//! caller (the ioctl's wall time), with T threads of one process or P
//! processes registering concurrently.  One JSON object on stdout.
//!
//! ```text
//! simctl bench LEN [--iters N] [--threads T | --procs P] [--layout L]
//!                  [--ideal] [--mem K] [--inval M] [--label TEXT]
//! ```
//! Every worker allocates its own GPU memory of LEN (sparse by default) and
//! registers and deregisters it N times.  `--ideal`: the simulated driver's
//! own cost of one pin + one DMA map of LEN (its latency model, measured).
//! `--mem K`: kernel memory per registration, from MemFree with K
//! registrations of LEN held.  `--inval M`: M times alloc, register, then
//! the time `gpu free` takes to return (the free callback and the core's
//! invalidation run inside it).  A benchmark never fails on speed: the exit
//! status is non-zero only if a registration failed.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::dev::{Devices, Sim};
use crate::num;
use crate::uapi::*;

/// One registration + deregistration, as measured.
#[derive(Default, Clone, Copy)]
struct Sample {
    reg_wall: u64,
    t: PcsimTimes,
    dereg: PcsimDereg,
    dereg_wall: u64,
    nents: u32,
    /// Time spent inside the simulated driver's functions during the
    /// registration (single-threaded runs only, else 0).
    driver_ns: u64,
}

impl Sample {
    fn to_line(self) -> String {
        format!(
            "S {} {} {} {} {} {} {} {} {} {} {} {} {}",
            self.reg_wall,
            self.t.acquire_wait_ns,
            self.t.acquire_ns,
            self.t.get_pages_ns,
            self.t.dma_map_ns,
            self.t.total_ns,
            self.dereg.dma_unmap_ns,
            self.dereg.put_pages_ns,
            self.dereg.release_ns,
            self.dereg.total_ns,
            self.dereg_wall,
            self.nents,
            self.driver_ns
        )
    }

    fn from_line(l: &str) -> Option<Self> {
        let v: Vec<u64> = l
            .strip_prefix("S ")?
            .split_whitespace()
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        if v.len() != 13 {
            return None;
        }
        Some(Sample {
            reg_wall: v[0],
            t: PcsimTimes {
                acquire_wait_ns: v[1],
                acquire_ns: v[2],
                get_pages_ns: v[3],
                dma_map_ns: v[4],
                total_ns: v[5],
            },
            dereg: PcsimDereg {
                dma_unmap_ns: v[6],
                put_pages_ns: v[7],
                release_ns: v[8],
                total_ns: v[9],
                ..Default::default()
            },
            dereg_wall: v[10],
            nents: u32::try_from(v[11]).ok()?,
            driver_ns: v[12],
        })
    }
}

/// What one worker (thread or process) measured.
#[derive(Default)]
struct Run {
    samples: Vec<Sample>,
    /// Wall-clock start and end (ns since the epoch: comparable across
    /// processes).
    start: u64,
    end: u64,
    error: Option<String>,
}

pub(crate) fn epoch_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn os_err(what: &str, e: io::Error) -> String {
    format!("{what}: {e}")
}

pub(crate) fn alloc(dev: &Devices, len: u64, layout: (u32, u32)) -> Result<u64, String> {
    let mut a = NvsimAlloc {
        len,
        va: 0,
        layout: layout.0,
        run_pages: layout.1,
    };
    dev.ioctl(Sim::Gpu, NVSIM_IOC_ALLOC, &mut a)
        .map_err(|e| os_err("gpu alloc", e))?;
    Ok(a.va)
}

pub(crate) fn free(dev: &Devices, va: u64) -> Result<(), String> {
    let mut f = NvsimFree { va };
    dev.ioctl(Sim::Gpu, NVSIM_IOC_FREE, &mut f)
        .map_err(|e| os_err("gpu free", e))
}

/// Registers `[va, va + len)` (no SG copy); (handle, nents, times, wall ns).
pub(crate) fn reg(dev: &Devices, va: u64, len: u64) -> Result<(u32, PcsimReg, u64), String> {
    let mut r = PcsimReg {
        va,
        len,
        access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
        ..Default::default()
    };
    let t0 = Instant::now();
    dev.ioctl(Sim::Core, PCSIM_IOC_REG, &mut r)
        .map_err(|e| os_err("core reg", e))?;
    Ok((r.handle, r, t0.elapsed().as_nanos() as u64))
}

pub(crate) fn dereg(dev: &Devices, handle: u32) -> Result<(PcsimDereg, u64), String> {
    let mut d = PcsimDereg {
        handle,
        ..Default::default()
    };
    let t0 = Instant::now();
    dev.ioctl(Sim::Core, PCSIM_IOC_DEREG_TIMED, &mut d)
        .map_err(|e| os_err("core dereg", e))?;
    Ok((d, t0.elapsed().as_nanos() as u64))
}

/// One worker: its own allocation, `iters` registration cycles.
fn worker(dev: &Devices, o: &Opts, start: Option<&Barrier>) -> Run {
    let mut run = Run::default();
    let va = match alloc(dev, o.len, o.layout) {
        Ok(va) => va,
        Err(e) => {
            run.error = Some(e);
            return run;
        }
    };
    if let Some(b) = start {
        b.wait();
    }
    // Processes start together at an agreed time (threads: the barrier).
    let now = epoch_ns();
    if o.start_at > now {
        std::thread::sleep(std::time::Duration::from_nanos(o.start_at - now));
    }
    run.start = epoch_ns();
    // One registrant: the driver's time during each registration (read
    // outside the registration; with several, their calls would mix).
    let alone = o.threads == 1 && o.procs == 0;
    for _ in 0..o.iters {
        let drv0 = if alone { driver_ns(dev) } else { 0 };
        let step = reg(dev, va, o.len).and_then(|(h, r, reg_wall)| {
            let drv = if alone {
                driver_ns(dev).saturating_sub(drv0)
            } else {
                0
            };
            let (d, dereg_wall) = dereg(dev, h)?;
            Ok(Sample {
                reg_wall,
                t: r.times,
                dereg: d,
                dereg_wall,
                nents: r.sg_count,
                driver_ns: drv,
            })
        });
        match step {
            Ok(s) => run.samples.push(s),
            Err(e) => {
                run.error = Some(e);
                break;
            }
        }
    }
    run.end = epoch_ns();
    if let Err(e) = free(dev, va) {
        run.error.get_or_insert(e);
    }
    run
}

/// The command line.
struct Opts {
    len: u64,
    iters: u32,
    threads: u32,
    procs: u32,
    layout: (u32, u32),
    ideal: bool,
    mem: u32,
    inval: u32,
    label: String,
    /// Workers of `--procs` wait until then (ns since the epoch).
    start_at: u64,
}

fn parse(a: &[String]) -> Result<Opts, String> {
    let u = "simctl bench LEN [--iters N] [--threads T | --procs P] [--layout sparse|contiguous|sparse:K] [--ideal] [--mem K] [--inval M] [--label TEXT]";
    let mut o = Opts {
        len: a.first().and_then(|s| num::parse(s)).ok_or(u)?,
        iters: 10,
        threads: 1,
        procs: 0,
        layout: (LAYOUT_SPARSE, 0),
        ideal: false,
        mem: 0,
        inval: 0,
        label: String::new(),
        start_at: 0,
    };
    let mut i = 1;
    while let Some(x) = a.get(i) {
        let v = a.get(i + 1);
        let n = || -> Result<u32, String> {
            v.and_then(|s| num::parse(s))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("{x}: a number\nusage: {u}"))
        };
        match x.as_str() {
            "--ideal" => {
                o.ideal = true;
                i += 1;
                continue;
            }
            "--iters" => o.iters = n()?,
            "--threads" => o.threads = n()?,
            "--procs" => o.procs = n()?,
            "--mem" => o.mem = n()?,
            "--inval" => o.inval = n()?,
            "--label" => o.label = v.cloned().ok_or(u)?,
            "--start-at" => o.start_at = v.and_then(|s| s.parse().ok()).ok_or(u)?,
            "--layout" => {
                o.layout = match v.map(String::as_str) {
                    Some("sparse") => (LAYOUT_SPARSE, 0),
                    Some("contiguous") => (LAYOUT_CONTIGUOUS, 0),
                    Some(s) => match s.strip_prefix("sparse:").and_then(num::parse) {
                        Some(k) => (LAYOUT_SPARSE, k as u32),
                        None => return Err(u.into()),
                    },
                    None => return Err(u.into()),
                }
            }
            _ => return Err(u.into()),
        }
        i += 2;
    }
    if o.len == 0 || o.len % (64 << 10) != 0 || o.iters == 0 || o.threads == 0 {
        return Err(format!(
            "LEN a non-zero multiple of 64K, N and T >= 1\nusage: {u}"
        ));
    }
    Ok(o)
}

/// Percentiles of `v` (nearest rank).
pub(crate) fn dist(v: &mut [u64]) -> String {
    if v.is_empty() {
        return "null".into();
    }
    v.sort_unstable();
    let rank = |p: usize| v[((v.len() * p).div_ceil(100)).max(1) - 1];
    let mean = v.iter().map(|&x| u128::from(x)).sum::<u128>() / v.len() as u128;
    format!(
        "{{\"p50\": {}, \"p99\": {}, \"min\": {}, \"max\": {}, \"mean\": {}}}",
        rank(50),
        rank(99),
        v[0],
        v[v.len() - 1],
        mean
    )
}

/// The simulated driver's time inside its functions so far (`driver_ns`).
fn driver_ns(dev: &Devices) -> u64 {
    let s = dev.stats(Sim::Gpu).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("driver_ns=")?.parse().ok())
        .unwrap_or(0)
}

fn gpu_calls(dev: &Devices) -> u64 {
    let s = dev.stats(Sim::Gpu).unwrap_or_default();
    s.lines()
        .filter_map(|l| {
            l.strip_prefix("calls.get_pages=")
                .or_else(|| l.strip_prefix("calls.get_pages_persistent="))
        })
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

fn mem_free_kib() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemFree:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Kernel memory per registration: MemFree with `k` registrations held.
fn mem_per_reg(dev: &Devices, o: &Opts) -> Result<(u32, i64), String> {
    let k = o
        .mem
        .min(u32::try_from((256u64 << 30) / o.len).unwrap_or(u32::MAX))
        .max(1);
    let va = alloc(dev, o.len * u64::from(k), o.layout)?;
    let mut handles = Vec::new();
    let before = mem_free_kib();
    let mut err = None;
    for i in 0..u64::from(k) {
        match reg(dev, va + i * o.len, o.len) {
            Ok((h, _, _)) => handles.push(h),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let after = mem_free_kib();
    for h in handles {
        if let Err(e) = dereg(dev, h) {
            err.get_or_insert(e);
        }
    }
    free(dev, va)?;
    match err {
        Some(e) => Err(e),
        None => Ok((k, (before - after) * 1024 / i64::from(k))),
    }
}

/// Invalidation latency: `gpu free` of a registered allocation, M times.
fn inval(dev: &Devices, o: &Opts) -> Result<Vec<u64>, String> {
    let mut v = Vec::new();
    for _ in 0..o.inval {
        let va = alloc(dev, o.len, o.layout)?;
        let (h, _, _) = reg(dev, va, o.len)?;
        let t0 = Instant::now();
        free(dev, va)?;
        v.push(t0.elapsed().as_nanos() as u64);
        dereg(dev, h)?;
    }
    Ok(v)
}

/// The workers as processes: this program again, `bench-worker`.
fn run_procs(o: &Opts, args: &[String]) -> Vec<Run> {
    let exe = std::env::current_exe().unwrap_or_else(|_| "simctl".into());
    // Time for every child to start and allocate (generous: TCG is slow).
    let start_at = epoch_ns() + 300_000_000 + 100_000_000 * u64::from(o.procs);
    let children: Vec<_> = (0..o.procs)
        .map(|_| {
            Command::new(&exe)
                .arg("bench-worker")
                .args(args)
                .arg("--start-at")
                .arg(start_at.to_string())
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let mut run = Run::default();
            match c.and_then(|c| c.wait_with_output()) {
                Ok(out) => {
                    for l in String::from_utf8_lossy(&out.stdout).lines() {
                        if let Some(s) = Sample::from_line(l) {
                            run.samples.push(s);
                        } else if let Some(t) = l.strip_prefix("T ") {
                            let mut p = t.split_whitespace().map(|x| x.parse().unwrap_or(0));
                            run.start = p.next().unwrap_or(0);
                            run.end = p.next().unwrap_or(0);
                        } else if let Some(e) = l.strip_prefix("E ") {
                            run.error = Some(e.to_string());
                        }
                    }
                    if !out.status.success() && run.error.is_none() {
                        run.error = Some(format!("worker exited with {}", out.status));
                    }
                }
                Err(e) => run.error = Some(os_err("bench worker", e)),
            }
            run
        })
        .collect()
}

/// `simctl bench-worker ARGS`: one process's worker; samples on stdout.
pub fn worker_main(a: &[String]) -> i32 {
    let o = match parse(a) {
        Ok(o) => o,
        Err(e) => {
            println!("E {e}");
            return 2;
        }
    };
    let dev = Devices::default();
    let run = worker(&dev, &o, None);
    let mut out = String::new();
    for s in &run.samples {
        let _ = writeln!(out, "{}", s.to_line());
    }
    let _ = writeln!(out, "T {} {}", run.start, run.end);
    if let Some(e) = &run.error {
        let _ = writeln!(out, "E {e}");
    }
    let _ = io::stdout().write_all(out.as_bytes());
    i32::from(run.error.is_some())
}

/// `simctl bench ARGS`.
pub fn main(a: &[String]) -> i32 {
    let o = match parse(a) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("simctl bench: {e}");
            return 2;
        }
    };
    let dev = Devices::default();
    let pages = o.len / (64 << 10);
    let mut json = String::new();
    let mut errors = Vec::new();
    let calls0 = gpu_calls(&dev);
    let runs = if o.procs > 0 {
        run_procs(&o, a)
    } else {
        let barrier = Barrier::new(o.threads as usize);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..o.threads)
                .map(|_| s.spawn(|| worker(&dev, &o, Some(&barrier))))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        })
    };
    let calls = gpu_calls(&dev).saturating_sub(calls0);
    let samples: Vec<Sample> = runs
        .iter()
        .flat_map(|r| r.samples.iter().copied())
        .collect();
    errors.extend(runs.iter().filter_map(|r| r.error.clone()));
    let start = runs
        .iter()
        .map(|r| r.start)
        .filter(|&t| t > 0)
        .min()
        .unwrap_or(0);
    let end = runs.iter().map(|r| r.end).max().unwrap_or(0);
    let wall_s = end.saturating_sub(start) as f64 / 1e9;
    let n = samples.len();
    let pick = |f: fn(&Sample) -> u64| -> Vec<u64> { samples.iter().map(f).collect() };
    let mut reg_ns = pick(|s| s.t.total_ns);
    let _ = write!(
        json,
        "{{\"label\": \"{}\", \"size\": {}, \"pages\": {}, \"threads\": {}, \"procs\": {}, \"iters\": {}, \"regs\": {}, \"wall_s\": {:.6}, \"regs_per_s\": {:.3}",
        o.label.replace(['"', '\\'], ""),
        o.len,
        pages,
        if o.procs > 0 { 1 } else { o.threads },
        o.procs,
        o.iters,
        n,
        wall_s,
        if wall_s > 0.0 { n as f64 / wall_s } else { 0.0 }
    );
    let _ = write!(json, ", \"reg_ns\": {}", dist(&mut reg_ns));
    // dist() sorted it: the same nearest-rank median.
    let reg_p50 = reg_ns
        .get((reg_ns.len() * 50).div_ceil(100).max(1) - 1)
        .copied()
        .unwrap_or(0);
    for (k, f) in [
        (
            "reg_wall_ns",
            (|s: &Sample| s.reg_wall) as fn(&Sample) -> u64,
        ),
        ("acquire_wait_ns", |s| s.t.acquire_wait_ns),
        ("acquire_ns", |s| s.t.acquire_ns),
        ("get_pages_ns", |s| s.t.get_pages_ns),
        ("dma_map_ns", |s| s.t.dma_map_ns),
        ("dereg_ns", |s| s.dereg.total_ns),
        ("dereg_wall_ns", |s| s.dereg_wall),
        ("dma_unmap_ns", |s| s.dereg.dma_unmap_ns),
        ("put_pages_ns", |s| s.dereg.put_pages_ns),
    ] {
        let _ = write!(json, ", \"{k}\": {}", dist(&mut pick(f)));
    }
    // The client's own share of a registration: its callbacks' time (as
    // the core measured it) minus the driver's time inside them.
    if samples.iter().any(|s| s.driver_ns > 0) {
        let own = |s: &Sample| {
            (s.t.acquire_ns + s.t.get_pages_ns + s.t.dma_map_ns).saturating_sub(s.driver_ns)
        };
        let mut share: Vec<u64> = samples
            .iter()
            .map(|s| own(s) * 1_000_000 / s.t.total_ns.max(1))
            .collect();
        let _ = write!(
            json,
            ", \"driver_ns\": {}, \"client_own_ns\": {}, \"client_share_ppm\": {}",
            dist(&mut pick(|s| s.driver_ns)),
            dist(&mut pick(own)),
            dist(&mut share)
        );
    }
    let _ = write!(
        json,
        ", \"pin_calls_per_reg\": {:.3}, \"sg_entries\": {}",
        if n > 0 { calls as f64 / n as f64 } else { 0.0 },
        samples.last().map_or(0, |s| s.nents)
    );
    if o.ideal {
        let mut best: Option<NvsimCost> = None;
        for _ in 0..3 {
            let mut c = NvsimCost {
                pages,
                ..Default::default()
            };
            match dev.ioctl(Sim::Gpu, NVSIM_IOC_COST, &mut c) {
                Ok(()) => {
                    if best.is_none_or(|b| c.pin_ns + c.map_ns < b.pin_ns + b.map_ns) {
                        best = Some(c);
                    }
                }
                Err(e) => errors.push(os_err("gpu cost", e)),
            }
        }
        if let Some(c) = best {
            let ideal = c.pin_ns + c.map_ns;
            let _ = write!(
                json,
                ", \"ideal_reg_ns\": {}, \"ideal_dereg_ns\": {}, \"ratio_p50\": {:.3}",
                ideal,
                c.unmap_ns + c.unpin_ns,
                if ideal > 0 {
                    reg_p50 as f64 / ideal as f64
                } else {
                    0.0
                }
            );
        }
    }
    if o.mem > 0 {
        match mem_per_reg(&dev, &o) {
            Ok((k, b)) => {
                let _ = write!(json, ", \"mem_regs_held\": {k}, \"mem_per_reg_bytes\": {b}");
            }
            Err(e) => errors.push(e),
        }
    }
    if o.inval > 0 {
        match inval(&dev, &o) {
            Ok(mut v) => {
                let _ = write!(json, ", \"inval_ns\": {}", dist(&mut v));
            }
            Err(e) => errors.push(e),
        }
    }
    let _ = write!(json, ", \"errors\": {}}}", errors.len());
    println!("{json}");
    for e in &errors {
        eprintln!("simctl bench: {e}");
    }
    i32::from(!errors.is_empty())
}
