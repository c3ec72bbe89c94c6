//! `simctl bench-gda`: what GPU-initiated networking asks of a client
//! (NCCL GIN, UCX GDA, DOCA GPUNetIO register queues and doorbells in GPU
//! memory: many small registrations that live as long as the job).
//!
//! ```text
//! simctl bench-gda [--procs P] [--regs N] [--exit-regs M] [--label TEXT] [--seed S]
//! ```
//! P holder processes (this program again, `bench-gda-peer`) register N
//! small buffers between them, one after the other, and keep them: each
//! registration's time (measured by the simulated core) is filed by the
//! number of registrations live when it was made.  Then one more process
//! registers M and exits without deregistering: the exit's time, from
//! its "exit" to the parent's `wait` returning, is what the core's cleanup
//! of M registrations cost (the client's puts from an exiting process).
//! Sizes are 4 to 64 KiB in 4 KiB steps, one per GPU page (64 KiB), drawn
//! from the seed.  One JSON object on stdout.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::bench::{alloc, dist, epoch_ns, reg};
use crate::dev::Devices;
use crate::num;
use crate::rng::Rng;
use crate::uapi::*;

const USAGE: &str =
    "simctl bench-gda [--procs P] [--regs N] [--exit-regs M] [--label TEXT] [--seed S]";

/// The GPU page: one registration each.
const SLOT: u64 = 64 << 10;

/// Buckets of the live count the registration times are filed by.
const BUCKETS: u64 = 5;

/// `simctl bench-gda-peer COUNT LIVE0 SEED`: registers COUNT small buffers,
/// printing "R LIVE NS" for each (LIVE: LIVE0 + its index), then READY; on
/// a line "exit" on stdin exits at once, its registrations still live.
pub fn peer_main(a: &[String]) -> i32 {
    let p = |i: usize| a.get(i).and_then(|s| num::parse(s));
    let (Some(count), Some(live0), Some(seed)) = (p(0), p(1), p(2)) else {
        println!("E usage: simctl bench-gda-peer COUNT LIVE0 SEED");
        return 2;
    };
    let dev = Devices::default();
    let mut rng = Rng::derive(seed, &[live0]);
    let mut run = || -> Result<(), String> {
        let va = alloc(&dev, count * SLOT, (LAYOUT_SPARSE, 0))?;
        let mut out = String::new();
        for i in 0..count {
            let len = rng.range(1, SLOT >> 12) << 12;
            let (_, r, _) = reg(&dev, va + i * SLOT, len)?;
            let _ = writeln!(out, "R {} {}", live0 + i, r.times.total_ns);
        }
        println!("{out}READY");
        let _ = std::io::stdout().flush();
        Ok(())
    };
    if let Err(e) = run() {
        println!("E {e}");
        return 1;
    }
    // Held until told to exit: the registrations go with the process.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    std::process::exit(0)
}

/// One holder: its process, its stdin (a line there makes it exit).
struct Holder {
    child: Child,
    stdin: ChildStdin,
}

/// Starts a holder of `count` registrations made with `live0` live, and
/// collects its times into `times` (live, ns) once it is ready.
fn hold(count: u64, live0: u64, seed: u64, times: &mut Vec<(u64, u64)>) -> Result<Holder, String> {
    let exe = std::env::current_exe().unwrap_or_else(|_| "simctl".into());
    let mut child = Command::new(exe)
        .args([
            "bench-gda-peer",
            &count.to_string(),
            &live0.to_string(),
            &seed.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("bench-gda-peer: {e}"))?;
    let stdin = child.stdin.take().ok_or("no peer stdin")?;
    let stdout = child.stdout.take().ok_or("no peer stdout")?;
    let mut holder = Holder { child, stdin };
    for l in BufReader::new(stdout).lines().map_while(Result::ok) {
        if l == "READY" {
            return Ok(holder);
        }
        if let Some(v) = l.strip_prefix("R ") {
            let mut p = v.split_whitespace().map(|x| x.parse().unwrap_or(0));
            times.push((p.next().unwrap_or(0), p.next().unwrap_or(0)));
        } else if let Some(e) = l.strip_prefix("E ") {
            holder.exit();
            return Err(format!("bench-gda-peer: {e}"));
        }
    }
    holder.exit();
    Err("bench-gda-peer ended before it was ready".into())
}

impl Holder {
    /// Tells the holder to exit and waits for it: ns until `wait` returned.
    fn exit(&mut self) -> u64 {
        let t0 = epoch_ns();
        let _ = writeln!(self.stdin, "exit");
        let _ = self.child.wait();
        epoch_ns().saturating_sub(t0)
    }
}

/// `simctl bench-gda ARGS`.
pub fn main(a: &[String]) -> i32 {
    match gda(a) {
        Ok(json) => {
            println!("{json}");
            0
        }
        Err(e) => {
            eprintln!("simctl bench-gda: {e}");
            1
        }
    }
}

fn gda(a: &[String]) -> Result<String, String> {
    let (mut procs, mut regs, mut exit_regs, mut seed) = (4u64, 10_000u64, 10_000u64, 1u64);
    let mut label = String::new();
    let mut i = 0;
    while let Some(x) = a.get(i) {
        let v = a.get(i + 1).ok_or(USAGE)?;
        let n = || num::parse(v).ok_or(USAGE);
        match x.as_str() {
            "--procs" => procs = n()?,
            "--regs" => regs = n()?,
            "--exit-regs" => exit_regs = n()?,
            "--seed" => seed = n()?,
            "--label" => label = v.replace(['"', '\\'], ""),
            _ => return Err(USAGE.into()),
        }
        i += 2;
    }
    if procs == 0 || regs < procs || exit_regs == 0 {
        return Err(USAGE.into());
    }
    let mut times = Vec::new();
    let mut holders = Vec::new();
    let mut live = 0;
    let mut result = Ok(());
    for p in 0..procs {
        let count = regs / procs + u64::from(p < regs % procs);
        match hold(count, live, seed, &mut times) {
            Ok(h) => holders.push(h),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        live += count;
    }
    let mut exit_ns = None;
    if result.is_ok() {
        match hold(exit_regs, live, seed, &mut times) {
            Ok(mut h) => exit_ns = Some(h.exit()),
            Err(e) => result = Err(e),
        }
    }
    let t0 = epoch_ns();
    for h in &mut holders {
        h.exit();
    }
    let holders_exit_ns = epoch_ns().saturating_sub(t0);
    result?;
    let total = regs + exit_regs;
    let width = total.div_ceil(BUCKETS);
    let mut json = String::new();
    let _ = write!(
        json,
        "{{\"label\": \"{label}\", \"procs\": {procs}, \"regs\": {regs}, \"exit_regs\": {exit_regs}, \"by_live\": ["
    );
    for b in 0..BUCKETS {
        let (lo, hi) = (b * width, ((b + 1) * width).min(total));
        let mut v: Vec<u64> = times
            .iter()
            .filter(|(l, _)| (lo..hi).contains(l))
            .map(|&(_, ns)| ns)
            .collect();
        let _ = write!(
            json,
            "{}{{\"live_from\": {lo}, \"live_to\": {hi}, \"reg_ns\": {}}}",
            if b == 0 { "" } else { ", " },
            dist(&mut v)
        );
    }
    let mut all: Vec<u64> = times.iter().map(|&(_, ns)| ns).collect();
    let _ = write!(
        json,
        "], \"reg_ns\": {}, \"exit_ns\": {}, \"holders_exit_ns\": {holders_exit_ns}, \"errors\": 0}}",
        dist(&mut all),
        exit_ns.unwrap_or(0)
    );
    Ok(json)
}
