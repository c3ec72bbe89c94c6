//! `simctl bench-mixed`: a mixed load.  One process (this one) registers
//! and deregisters LEN, first alone, then while another process (this
//! program again, `bench-mixed-peer`) deregisters K registrations of LEN2
//! it made beforehand.  What the second process's deregistrations cost the
//! first one's registrations: both distributions in one JSON object, from
//! the same invocation (the ratio is meaningful on a noisy machine).
//!
//! ```text
//! simctl bench-mixed LEN [--iters N] --beside LEN2 [--beside-regs K] [--label TEXT]
//! ```
//! Only registrations that started while the other process was
//! deregistering count as "beside" (`overlapped`).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};

use crate::bench::{alloc, dereg, dist, epoch_ns, free, reg};
use crate::dev::Devices;
use crate::num;
use crate::uapi::*;

const USAGE: &str =
    "simctl bench-mixed LEN [--iters N] --beside LEN2 [--beside-regs K] [--label TEXT]";

/// (start ns since the epoch, the core's registration time ns).
type Reg = (u64, u64);

/// N registrations + deregistrations of one allocation of `len`.
fn regs(dev: &Devices, len: u64, n: u32) -> Result<Vec<Reg>, String> {
    let va = alloc(dev, len, (LAYOUT_SPARSE, 0))?;
    let mut v = Vec::new();
    let mut err = None;
    for _ in 0..n {
        let t = epoch_ns();
        match reg(dev, va, len).and_then(|(h, r, _)| dereg(dev, h).map(|_| r.times.total_ns)) {
            Ok(ns) => v.push((t, ns)),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    free(dev, va)?;
    err.map_or(Ok(v), Err)
}

/// `simctl bench-mixed-peer LEN2 K`: registers K x LEN2, says READY, waits
/// for a line on stdin, deregisters them ("D ns" each), says "T start end".
pub fn peer_main(a: &[String]) -> i32 {
    let (Some(len), Some(k)) = (
        a.first().and_then(|s| num::parse(s)),
        a.get(1).and_then(|s| num::parse(s)),
    ) else {
        println!("E usage: simctl bench-mixed-peer LEN2 K");
        return 2;
    };
    let dev = Devices::default();
    let run = || -> Result<(), String> {
        let va = alloc(&dev, len * k, (LAYOUT_SPARSE, 0))?;
        let mut hs = Vec::new();
        for i in 0..k {
            hs.push(reg(&dev, va + i * len, len)?.0);
        }
        println!("READY");
        let _ = std::io::stdout().flush();
        let mut go = String::new();
        let _ = std::io::stdin().read_line(&mut go);
        let start = epoch_ns();
        let mut out = String::new();
        for h in hs {
            let (d, _) = dereg(&dev, h)?;
            let _ = writeln!(out, "D {}", d.total_ns);
        }
        let _ = writeln!(out, "T {} {}", start, epoch_ns());
        print!("{out}");
        free(&dev, va)
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("E {e}");
            1
        }
    }
}

/// `simctl bench-mixed ARGS`.
pub fn main(a: &[String]) -> i32 {
    match mixed(a) {
        Ok(json) => {
            println!("{json}");
            0
        }
        Err(e) => {
            eprintln!("simctl bench-mixed: {e}");
            1
        }
    }
}

fn mixed(a: &[String]) -> Result<String, String> {
    let len = a.first().and_then(|s| num::parse(s)).ok_or(USAGE)?;
    let (mut iters, mut beside, mut k, mut label) = (40u64, 0u64, 16u64, String::new());
    let mut i = 1;
    while let Some(x) = a.get(i) {
        let v = a.get(i + 1).ok_or(USAGE)?;
        let n = || num::parse(v).ok_or(USAGE);
        match x.as_str() {
            "--iters" => iters = n()?,
            "--beside" => beside = n()?,
            "--beside-regs" => k = n()?,
            "--label" => label = v.replace(['"', '\\'], ""),
            _ => return Err(USAGE.into()),
        }
        i += 2;
    }
    if len == 0 || beside == 0 || iters == 0 || k == 0 {
        return Err(USAGE.into());
    }
    let iters = u32::try_from(iters).map_err(|_| USAGE)?;
    let dev = Devices::default();
    let alone = regs(&dev, len, iters)?;
    let exe = std::env::current_exe().unwrap_or_else(|_| "simctl".into());
    let mut peer = Command::new(exe)
        .args(["bench-mixed-peer", &beside.to_string(), &k.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("bench-mixed-peer: {e}"))?;
    let mut lines = BufReader::new(peer.stdout.take().ok_or("no peer stdout")?).lines();
    match lines.next() {
        Some(Ok(l)) if l == "READY" => {}
        other => {
            let _ = peer.kill();
            let _ = peer.wait();
            return Err(format!("bench-mixed-peer did not get ready: {other:?}"));
        }
    }
    let mut stdin = peer.stdin.take().ok_or("no peer stdin")?;
    let _ = writeln!(stdin, "go");
    drop(stdin);
    let during = regs(&dev, len, iters);
    let (mut peer_dereg, mut window, mut err) = (Vec::new(), (0, 0), None);
    for l in lines.map_while(Result::ok) {
        if let Some(v) = l.strip_prefix("D ") {
            peer_dereg.push(v.parse().unwrap_or(0));
        } else if let Some(v) = l.strip_prefix("T ") {
            let mut p = v.split_whitespace().map(|x| x.parse().unwrap_or(0));
            window = (p.next().unwrap_or(0), p.next().unwrap_or(0));
        } else if let Some(e) = l.strip_prefix("E ") {
            err = Some(e.to_string());
        }
    }
    let _ = peer.wait();
    if let Some(e) = err {
        return Err(format!("bench-mixed-peer: {e}"));
    }
    let during = during?;
    let mut beside_ns: Vec<u64> = during
        .iter()
        .filter(|(t, _)| *t >= window.0 && *t < window.1)
        .map(|&(_, ns)| ns)
        .collect();
    let mut json = String::new();
    let _ = write!(
        json,
        "{{\"label\": \"{label}\", \"size\": {len}, \"beside\": {beside}, \"beside_regs\": {k}, \"iters\": {iters}, \"overlapped\": {}",
        beside_ns.len()
    );
    let _ = write!(
        json,
        ", \"alone_reg_ns\": {}, \"beside_reg_ns\": {}, \"peer_dereg_ns\": {}, \"errors\": 0}}",
        dist(&mut alone.iter().map(|&(_, ns)| ns).collect::<Vec<_>>()),
        dist(&mut beside_ns),
        dist(&mut peer_dereg)
    );
    Ok(json)
}
