//! The commands: what one statement of a script does.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::dev::{errno_name, errno_value, Devices, Sim};
use crate::num;
use crate::uapi::*;

/// Why a command failed.
#[derive(Debug)]
pub enum CmdError {
    /// The kernel refused: an errno.
    Os(i32, String),
    /// Bad command line.
    Usage(String),
    /// A `check` found counters other than expected.
    Check(String),
}

impl CmdError {
    /// The errno, for expected failures.
    pub fn errno(&self) -> Option<i32> {
        match self {
            CmdError::Os(e, _) => Some(*e),
            _ => None,
        }
    }
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::Os(e, what) => write!(
                f,
                "{what}: {} ({})",
                io::Error::from_raw_os_error(*e),
                errno_name(*e)
            ),
            CmdError::Usage(s) => write!(f, "usage: {s}"),
            CmdError::Check(s) => write!(f, "check failed: {s}"),
        }
    }
}

fn os(what: &str) -> impl Fn(io::Error) -> CmdError + '_ {
    move |e| CmdError::Os(e.raw_os_error().unwrap_or(5), what.to_string())
}

fn usage(s: &str) -> CmdError {
    CmdError::Usage(s.to_string())
}

fn number(s: Option<&String>, what: &str) -> Result<u64, CmdError> {
    let s = s.ok_or_else(|| usage(what))?;
    num::parse(s).ok_or_else(|| usage(&format!("{what}: not a number: {s}")))
}

/// The value a statement can capture (`NAME=...`): a VA or a handle.
pub type Captured = Option<u64>;

/// Runs one command; prints its result lines through `out`.
pub fn run(dev: &Devices, w: &[String], out: &dyn Fn(String)) -> Result<Captured, CmdError> {
    let word = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    match (word(0), word(1)) {
        ("gpu", sub) => gpu(dev, sub, &w[2.min(w.len())..], out),
        ("core", sub) => core(dev, sub, &w[2.min(w.len())..], out),
        ("data", sub) => crate::data::run(dev, sub, &w[2.min(w.len())..], out),
        ("open", s) => dev.open(sim(s)?).map(|()| None).map_err(os("open")),
        ("close", s) => {
            dev.close(sim(s)?);
            Ok(None)
        }
        ("check", _) => check(dev, &w[1..], out).map(|()| None),
        ("fork", _) => crate::proc::fork_run(dev, &w[1..], out).map(|()| None),
        ("handoff", s) => crate::proc::handoff(dev, sim(s)?).map(|()| None),
        ("exec", _) => crate::proc::exec(dev, &w[1..]).map(|()| None),
        ("adopt", s) => {
            let fd = number(w.get(2), "adopt gpu|core FD")?;
            let fd = i32::try_from(fd).map_err(|_| usage("adopt: FD out of range"))?;
            dev.adopt(sim(s)?, fd);
            Ok(None)
        }
        ("send-fd", s) => crate::proc::send_fd(dev, sim(s)?).map(|()| None),
        ("mlockall", _) => crate::proc::lock_memory().map(|()| None),
        ("write", path) => {
            let v = w.get(2).ok_or_else(|| usage("write PATH VALUE"))?;
            std::fs::write(path, v).map_err(os(path))?;
            Ok(None)
        }
        ("read", path) => {
            let s = std::fs::read_to_string(path).map_err(os(path))?;
            out(s.trim_end().to_string());
            Ok(None)
        }
        ("sleep", ms) => {
            std::thread::sleep(Duration::from_millis(
                num::parse(ms).ok_or_else(|| usage("sleep MS"))?,
            ));
            Ok(None)
        }
        ("echo", _) => {
            out(w[1..].join(" "));
            Ok(None)
        }
        _ => Err(usage(&format!("unknown command: {}", w.join(" ")))),
    }
}

fn sim(s: &str) -> Result<Sim, CmdError> {
    match s {
        "gpu" => Ok(Sim::Gpu),
        "core" => Ok(Sim::Core),
        _ => Err(usage("open|close gpu|core")),
    }
}

fn layout(s: &str) -> Result<(u32, u32), CmdError> {
    match s.split_once(':') {
        None if s == "contiguous" => Ok((LAYOUT_CONTIGUOUS, 0)),
        None if s == "shuffled" => Ok((LAYOUT_SHUFFLED, 0)),
        None if s == "fragmented" => Ok((LAYOUT_FRAGMENTED, 1)),
        None if s == "sparse" => Ok((LAYOUT_SPARSE, 0)),
        Some(("sparse", k)) => Ok((
            LAYOUT_SPARSE,
            num::parse(k).ok_or_else(|| usage("sparse:K"))? as u32,
        )),
        Some(("fragmented", k)) => Ok((
            LAYOUT_FRAGMENTED,
            num::parse(k).ok_or_else(|| usage("fragmented:K"))? as u32,
        )),
        _ => Err(usage(
            "LAYOUT: contiguous | fragmented:K | shuffled | sparse[:K]",
        )),
    }
}

fn layout_name(l: u32, k: u32) -> String {
    match l {
        LAYOUT_CONTIGUOUS => "contiguous".into(),
        LAYOUT_FRAGMENTED => format!("fragmented:{k}"),
        LAYOUT_SPARSE if k == 0 => "sparse".into(),
        LAYOUT_SPARSE => format!("sparse:{k}"),
        _ => "shuffled".into(),
    }
}

fn gpu(dev: &Devices, sub: &str, a: &[String], out: &dyn Fn(String)) -> Result<Captured, CmdError> {
    let g = Sim::Gpu;
    match sub {
        "alloc" => {
            let mut arg = NvsimAlloc {
                len: number(a.first(), "gpu alloc LEN [LAYOUT] [--at VA]")?,
                ..Default::default()
            };
            let mut i = 1;
            while let Some(x) = a.get(i) {
                if x == "--at" {
                    arg.va = number(a.get(i + 1), "--at VA")?;
                    i += 2;
                } else {
                    (arg.layout, arg.run_pages) = layout(x)?;
                    i += 1;
                }
            }
            dev.ioctl(g, NVSIM_IOC_ALLOC, &mut arg)
                .map_err(os("gpu alloc"))?;
            out(format!(
                "alloc va={:#x} len={:#x} layout={}",
                arg.va,
                arg.len,
                layout_name(arg.layout, arg.run_pages)
            ));
            Ok(Some(arg.va))
        }
        "free" => {
            let mut arg = NvsimFree {
                va: number(a.first(), "gpu free VA")?,
            };
            dev.ioctl(g, NVSIM_IOC_FREE, &mut arg)
                .map_err(os("gpu free"))?;
            out(format!("freed va={:#x}", arg.va));
            Ok(None)
        }
        "share" => {
            let mut arg = NvsimShare {
                va: number(a.first(), "gpu share VA PID")?,
                pid: number(a.get(1), "gpu share VA PID")? as u32,
                reserved: 0,
            };
            dev.ioctl(g, NVSIM_IOC_SHARE, &mut arg)
                .map_err(os("gpu share"))?;
            out(format!("shared va={:#x} pid={}", arg.va, arg.pid));
            Ok(None)
        }
        "fault" => {
            let site = match a.first().map(String::as_str) {
                Some("get_pages") => FAULT_GET_PAGES,
                Some("dma_map") | Some("dma_map_pages") => FAULT_DMA_MAP,
                Some("persistent") | Some("get_pages_persistent") => FAULT_PERSISTENT,
                Some("put") | Some("put_pages") => FAULT_PUT,
                Some("put_persistent") | Some("put_pages_persistent") => FAULT_PUT_PERSISTENT,
                Some("unmap") | Some("dma_unmap_pages") => FAULT_UNMAP,
                _ => return Err(usage(
                    "gpu fault get_pages|dma_map|persistent|put|put_persistent|unmap COUNT [ERRNO]",
                )),
            };
            let count = number(a.get(1), "gpu fault SITE COUNT [ERRNO]")? as u32;
            let err = match a.get(2) {
                Some(e) => errno_value(e).ok_or_else(|| usage("ERRNO: a name (EIO) or number"))?,
                None => 5,
            };
            let mut arg = NvsimFault {
                site,
                count,
                err,
                reserved: 0,
            };
            dev.ioctl(g, NVSIM_IOC_FAULT, &mut arg)
                .map_err(os("gpu fault"))?;
            Ok(None)
        }
        "delay" => {
            let mut arg = NvsimDelay {
                us_per_page: number(a.first(), "gpu delay US_PER_PAGE")? as u32,
                reserved: 0,
            };
            dev.ioctl(g, NVSIM_IOC_DELAY, &mut arg)
                .map_err(os("gpu delay"))?;
            Ok(None)
        }
        "hook" => {
            let u = "gpu hook map_prologue|map_epilogue|unmap|put|get_pages|get_pages_return|none [COUNT] [WAIT_MS]";
            let site = match a.first().map(String::as_str) {
                Some("map_prologue") => HOOK_MAP_PROLOGUE,
                Some("map_epilogue") => HOOK_MAP_EPILOGUE,
                Some("unmap") => HOOK_UNMAP,
                Some("put") => HOOK_PUT,
                Some("get_pages") => HOOK_GET_PAGES,
                Some("get_pages_return") => HOOK_GET_PAGES_RETURN,
                _ => return Err(usage(u)),
            };
            let mut arg = NvsimHook {
                site,
                count: a.get(1).map_or(Ok(1), |_| number(a.get(1), u))? as u32,
                wait_ms: a.get(2).map_or(Ok(0), |_| number(a.get(2), u))? as u32,
                reserved: 0,
            };
            dev.ioctl(g, NVSIM_IOC_HOOK, &mut arg)
                .map_err(os("gpu hook"))?;
            Ok(None)
        }
        "reset" => dev
            .ioctl_none(g, NVSIM_IOC_RESET)
            .map(|()| None)
            .map_err(os("gpu reset")),
        "stats" => stats(dev, g, None, out),
        "get" => stats(dev, g, a.first(), out),
        _ => Err(usage(
            "gpu alloc|free|share|fault|delay|hook|stats|get|reset",
        )),
    }
}

fn stats(
    dev: &Devices,
    sim: Sim,
    key: Option<&String>,
    out: &dyn Fn(String),
) -> Result<Captured, CmdError> {
    let s = dev.stats(sim).map_err(os("stats"))?;
    let Some(key) = key else {
        out(s.trim_end().to_string());
        return Ok(None);
    };
    let v = s
        .lines()
        .find_map(|l| l.strip_prefix(key.as_str())?.strip_prefix('='))
        .ok_or_else(|| usage(&format!("no stats key {key}")))?;
    out(v.to_string());
    Ok(num::parse(v))
}

fn access(s: &str) -> Result<u32, CmdError> {
    match s {
        "rw" => Ok(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ),
        "ro" => Ok(ACCESS_REMOTE_READ),
        _ => num::parse(s)
            .map(|v| v as u32)
            .ok_or_else(|| usage("--access rw|ro|FLAGS")),
    }
}

/// `STEP:ACTION[:MS[:VA]]`.
fn hook(s: &str, r: &mut PcsimReg) -> Result<(), CmdError> {
    let bad = || {
        usage("--hook after_acquire|after_get_pages|after_dma_map|in_dereg:free|delay[:MS[:VA]]")
    };
    let mut p = s.split(':');
    r.hook_step = match p.next() {
        Some("after_acquire") => STEP_AFTER_ACQUIRE,
        Some("after_get_pages") => STEP_AFTER_GET_PAGES,
        Some("after_dma_map") => STEP_AFTER_DMA_MAP,
        Some("in_dereg") => STEP_IN_DEREG,
        _ => return Err(bad()),
    };
    r.hook_action = match p.next() {
        Some("free") => ACTION_FREE,
        Some("delay") => ACTION_DELAY,
        _ => return Err(bad()),
    };
    if let Some(ms) = p.next() {
        r.hook_ms = num::parse(ms).ok_or_else(bad)? as u32;
    }
    if let Some(va) = p.next() {
        r.hook_va = num::parse(va).ok_or_else(bad)?;
    }
    Ok(())
}

/// Prints the first `max` SG entries, one line each, then one summary line
/// over all `count` entries (of which `sg` holds the first `sg.len()`):
/// `sgsum reg|query handle=H nents=N total=BYTES min=LEN max=LEN
/// sizes=LEN*COUNT,... [truncated=1]` (the most common lengths first), so
/// that a client with one entry per 64 KiB page (over a million for
/// 64 GiB) costs the shell one line, not one per entry.
fn print_sg(what: &str, handle: u32, sg: &[PcsimSge], count: u32, max: u32, out: &dyn Fn(String)) {
    for (i, e) in sg.iter().take(max as usize).enumerate() {
        out(format!(
            "sg handle={handle} idx={i} addr={:#x} len={:#x}",
            e.addr, e.len
        ));
    }
    out(sg_summary(what, handle, sg, count));
}

/// The summary line of `print_sg`.
pub fn sg_summary(what: &str, handle: u32, sg: &[PcsimSge], count: u32) -> String {
    let total: u64 = sg.iter().map(|e| e.len).sum();
    let min = sg.iter().map(|e| e.len).min().unwrap_or(0);
    let max = sg.iter().map(|e| e.len).max().unwrap_or(0);
    let mut lens: Vec<u64> = sg.iter().map(|e| e.len).collect();
    lens.sort_unstable();
    let mut hist: Vec<(u64, usize)> = Vec::new();
    for l in lens {
        match hist.last_mut() {
            Some((v, n)) if *v == l => *n += 1,
            _ => hist.push((l, 1)),
        }
    }
    hist.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let sizes: Vec<String> = hist
        .iter()
        .take(8)
        .map(|(l, n)| format!("{l:#x}*{n}"))
        .collect();
    let more = if hist.len() > 8 { ",..." } else { "" };
    let trunc = if (sg.len() as u64) < u64::from(count) {
        " truncated=1"
    } else {
        ""
    };
    format!(
        "sgsum {what} handle={handle} nents={count} total={total} min={min:#x} max={max:#x} sizes={}{more}{trunc}",
        sizes.join(",")
    )
}

/// How many SG entries to fetch for a registration of `len` bytes: every
/// entry of a client that emits one per 64 KiB page (plus the partial
/// pages at both ends), at least `max`, at most 4M (64 MiB of buffer).
fn sg_fetch(len: u64, max: u32) -> u32 {
    let per_page = (len >> 16).saturating_add(2).min(4 << 20) as u32;
    per_page.max(max)
}

fn core(
    dev: &Devices,
    sub: &str,
    a: &[String],
    out: &dyn Fn(String),
) -> Result<Captured, CmdError> {
    let c = Sim::Core;
    let handle = |what: &str| number(a.first(), what).map(|h| h as u32);
    match sub {
        "reg" => {
            let u = "core reg VA LEN [--access rw|ro|N] [--hook STEP:ACTION[:MS[:VA]]] [--sg-max N] [--qp]";
            let mut r = PcsimReg {
                va: number(a.first(), u)?,
                len: number(a.get(1), u)?,
                ..Default::default()
            };
            r.access = access("rw")?;
            let mut sg_max = 4096u32;
            let mut i = 2;
            while let Some(x) = a.get(i) {
                if x == "--qp" {
                    r.flags |= REG_QP_BUFFER;
                    i += 1;
                    continue;
                }
                let v = a.get(i + 1).ok_or_else(|| usage(u))?;
                match x.as_str() {
                    "--access" => r.access = access(v)?,
                    "--hook" => hook(v, &mut r)?,
                    "--sg-max" => sg_max = num::parse(v).ok_or_else(|| usage(u))? as u32,
                    _ => return Err(usage(u)),
                }
                i += 2;
            }
            let fetch = sg_fetch(r.len, sg_max);
            let mut sg = vec![PcsimSge::default(); fetch as usize];
            r.sg = sg.as_mut_ptr() as u64;
            r.sg_max = fetch;
            dev.ioctl(c, PCSIM_IOC_REG, &mut r)
                .map_err(os("core reg"))?;
            let name_end = r.client.iter().position(|&b| b == 0).unwrap_or(NAME_MAX);
            out(format!(
                "reg handle={} client={} core_context={} page_size={:#x} nents={}",
                r.handle,
                String::from_utf8_lossy(&r.client[..name_end]),
                r.core_context,
                r.page_size,
                r.sg_count
            ));
            sg.truncate(r.sg_count.min(fetch) as usize);
            print_sg("reg", r.handle, &sg, r.sg_count, sg_max, out);
            Ok(Some(u64::from(r.handle)))
        }
        "dereg" => {
            let mut h = PcsimHandle {
                handle: handle("core dereg HANDLE")?,
                reserved: 0,
            };
            dev.ioctl(c, PCSIM_IOC_DEREG, &mut h)
                .map_err(os("core dereg"))?;
            out(format!("dereg handle={}", h.handle));
            Ok(None)
        }
        "disassociate" => {
            let mut h = PcsimHandle {
                handle: handle("core disassociate HANDLE")?,
                reserved: 0,
            };
            dev.ioctl(c, PCSIM_IOC_DISASSOCIATE, &mut h)
                .map_err(os("core disassociate"))?;
            out(format!("disassociated handle={}", h.handle));
            Ok(None)
        }
        "dma-check" | "dma_check" => {
            let mut h = PcsimHandle {
                handle: handle("core dma-check HANDLE")?,
                reserved: 0,
            };
            dev.ioctl(c, PCSIM_IOC_DMA_CHECK, &mut h)
                .map_err(os("core dma-check"))?;
            out(format!("dma_check handle={} ok", h.handle));
            Ok(None)
        }
        "query" => {
            let h = handle("core query HANDLE")?;
            // First the count, then every entry (up to sg_fetch's bound).
            let mut q = PcsimQuery {
                handle: h,
                ..Default::default()
            };
            dev.ioctl(c, PCSIM_IOC_QUERY, &mut q)
                .map_err(os("core query"))?;
            let fetch = sg_fetch(u64::from(q.sg_count.saturating_sub(2)) << 16, 4096);
            let mut sg = vec![PcsimSge::default(); fetch as usize];
            let mut q = PcsimQuery {
                handle: h,
                sg: sg.as_mut_ptr() as u64,
                sg_max: fetch,
                ..Default::default()
            };
            dev.ioctl(c, PCSIM_IOC_QUERY, &mut q)
                .map_err(os("core query"))?;
            let state = match q.state {
                STATE_MAPPED => "mapped",
                STATE_INVALIDATED => "invalidated",
                STATE_UNMAPPED => "unmapped",
                _ => "other",
            };
            out(format!(
                "query handle={} state={} nents={}",
                q.handle, state, q.sg_count
            ));
            sg.truncate(q.sg_count.min(fetch) as usize);
            print_sg("query", q.handle, &sg, q.sg_count, 4096, out);
            Ok(None)
        }
        "reset" => dev
            .ioctl_none(c, PCSIM_IOC_RESET)
            .map(|()| None)
            .map_err(os("core reset")),
        "stats" => stats(dev, c, None, out),
        "get" => stats(dev, c, a.first(), out),
        _ => Err(usage(
            "core reg|dereg|disassociate|dma-check|query|stats|get|reset",
        )),
    }
}

/// `check [KIND=N | KIND+]...`: every `violation.*` counter of both
/// simulators is 0 except the named ones, which are exactly N (or >= 1).
fn check(dev: &Devices, a: &[String], out: &dyn Fn(String)) -> Result<(), CmdError> {
    let mut want: Vec<(String, Option<u64>, bool)> = Vec::new();
    for x in a {
        if let Some(k) = x.strip_suffix('+') {
            want.push((k.to_string(), None, false));
        } else if let Some((k, n)) = x.split_once('=') {
            want.push((
                k.to_string(),
                Some(num::parse(n).ok_or_else(|| usage("check KIND=N|KIND+"))?),
                false,
            ));
        } else {
            return Err(usage("check KIND=N|KIND+ ..."));
        }
    }
    let mut failures = Vec::new();
    let mut summary = Vec::new();
    for sim in [Sim::Gpu, Sim::Core] {
        let stats = match dev.stats(sim) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                summary.push(format!("{}=absent", sim.name()));
                continue;
            }
            Err(e) => return Err(os("check")(e)),
        };
        let mut total = 0;
        for line in stats.lines() {
            let Some((k, v)) = line
                .strip_prefix("violation.")
                .and_then(|l| l.split_once('='))
            else {
                continue;
            };
            let v: u64 = v.parse().unwrap_or(u64::MAX);
            total += v;
            let entry = want.iter_mut().find(|(w, _, _)| {
                w == k || w.strip_prefix(sim.name()).and_then(|w| w.strip_prefix('.')) == Some(k)
            });
            let ok = match entry {
                Some((_, Some(n), seen)) => {
                    *seen = true;
                    v == *n
                }
                Some((_, None, seen)) => {
                    *seen = true;
                    v >= 1
                }
                None => v == 0,
            };
            if !ok {
                failures.push(format!("{}.violation.{}={}", sim.name(), k, v));
            }
        }
        summary.push(format!("{}.violations={}", sim.name(), total));
    }
    for (k, _, seen) in &want {
        if !seen {
            failures.push(format!("{k}: no such counter (simulator not loaded?)"));
        }
    }
    if failures.is_empty() {
        out(format!("check ok {}", summary.join(" ")));
        Ok(())
    } else {
        let wanted: Vec<&str> = a.iter().map(String::as_str).collect();
        Err(CmdError::Check(format!(
            "{} (expected: {})",
            failures.join(" "),
            if wanted.is_empty() {
                "none".into()
            } else {
                wanted.join(" ")
            }
        )))
    }
}
