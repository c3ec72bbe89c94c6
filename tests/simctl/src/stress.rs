//! `simctl stress`: a seeded random-operation campaign against the
//! simulators and whatever client serves them (peermem_rs).
//!
//! ```text
//! simctl stress --seed S --ops N [--procs P] [--threads T] [--max-size BYTES]
//!               [--life OPS] [--no-unload] [--failslab] [--mps] [--neighbour]
//!               [--verbose]
//! ```
//! P worker processes share the N operations.  A worker lives through a
//! series of *lives*: each is a forked process with its own control files
//! (its own CUDA context and uverbs context) in which T threads run a
//! share of the operations: allocations of every layout (sparse ones up to
//! --max-size), registrations of random (also unaligned, also too long)
//! sub-ranges with core step hooks, deregistrations, DMA checks, cudaFree,
//! free hooks armed inside the driver's dma_map and dma_unmap, injected
//! failures of get_pages / dma_map / get_pages_persistent, uverbs
//! disassociate (a kworker deregisters) and unload attempts of the client
//! and of the simulated driver while a registration is live (each must be
//! refused).  A life then ends, single-threaded, in one of: a forked child
//! deregistering one of its MRs (a put from another process), exit with
//! live registrations, a forked child closing the last reference of each
//! control file, the files passed over a unix socket to a process that
//! closes them, or a clean teardown.  With --mps one life in four is
//! MPS-like (stress_mps.rs): it also registers its worker's memory, shared
//! with it as an MPS server shares its own, and the worker frees that
//! memory after the life's end, whatever the order its files were released
//! in.  With --neighbour the threads also drive the bench's same-process
//! neighbour of the P2P API (sim_neighbour.ko, /dev/sim_neighbour): it pins
//! a life's allocation and puts it, the put sometimes held by a free hook
//! while the life's other threads register, so that it may release a pin of
//! the client under test (counted by the simulated driver as
//! `neighbour_released_pins`; the client must survive it).  Lives whose end
//! deregisters from another process, and MPS-like lives (whose exit may
//! keep a pin registered until its callback), run no neighbour: a pin the neighbour
//! released and nobody may put stays counted by the client for good (README,
//! "What no client can close").
//!
//! Every thread's operations come from its own generator derived from
//! (seed, worker, life, thread): a seed names the same operations every
//! time (their interleaving is the scheduler's).  After the workers: the
//! hooks and faults are disarmed and the end state is checked -- no pins,
//! persistent pins, DMA mappings or core registrations left, and every
//! violation counter of both simulators 0.  A failure prints the seed and
//! the command that repeats the run.

use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::dev::{errno_name, Devices, Sim};
use crate::rng::Rng;
use crate::stress_mps::{Owner, Shared};
use crate::stress_ops::{end_of_life, thread_ops, w, End, Life};

extern "C" {
    fn fork() -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn _exit(code: c_int) -> !;
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
}

const WNOHANG: c_int = 1;
const PROT_RW: c_int = 0x1 | 0x2;
const MAP_SHARED_ANON: c_int = 0x01 | 0x20;

pub(crate) const K64: u64 = 64 << 10;

/// The campaign's parameters.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    pub ops: u64,
    pub procs: u64,
    pub threads: u64,
    pub max_size: u64,
    pub life: u64,
    pub unload: bool,
    pub verbose: bool,
    /// Each life process opts in to failslab (`/proc/self/make-it-fail`).
    pub failslab: bool,
    /// MPS-like lives (stress_mps.rs).
    pub mps: bool,
    /// The same-process neighbour's operations (stress_ops.rs).
    pub neighbour: bool,
}

impl Config {
    /// Parses `--seed S --ops N ...`.
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut c = Config {
            seed: 1,
            ops: 1000,
            procs: 2,
            threads: 4,
            max_size: 32 << 30,
            life: 60,
            unload: true,
            verbose: false,
            failslab: false,
            mps: false,
            neighbour: false,
        };
        let mut i = 0;
        while let Some(a) = args.get(i) {
            match a.as_str() {
                "--no-unload" => c.unload = false,
                "--verbose" => c.verbose = true,
                "--failslab" => c.failslab = true,
                "--mps" => c.mps = true,
                "--neighbour" => c.neighbour = true,
                k => {
                    let v = args
                        .get(i + 1)
                        .and_then(|v| crate::num::parse(v))
                        .ok_or_else(|| format!("{k} needs a number"))?;
                    match k {
                        "--seed" => c.seed = v,
                        "--ops" => c.ops = v,
                        "--procs" => c.procs = v.clamp(1, 64),
                        "--threads" => c.threads = v.clamp(1, 64),
                        "--max-size" => c.max_size = v.max(K64) / K64 * K64,
                        "--life" => c.life = v.max(1),
                        _ => return Err(format!("unknown option {k}")),
                    }
                    i += 1;
                }
            }
            i += 1;
        }
        Ok(c)
    }

    /// The command line that repeats this run: `make stress` for this
    /// one run (its core variant, peermem_rs mode and kernel), and the
    /// simctl command inside the VM.
    pub fn repro(&self) -> String {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
        };
        let variant = read("/sys/module/peer_core_sim/parameters/variant")
            .map(|v| format!(" VARIANTS={v}"))
            .unwrap_or_default();
        let mode = read("/sys/module/peermem_rs/parameters/mode")
            .map(|m| format!(" MODES={m}"))
            .unwrap_or_default();
        let kver = read("/proc/sys/kernel/osrelease")
            .map(|k| format!(" KVER={k}"))
            .unwrap_or_default();
        format!(
            "make stress SEED={} OPS={}{variant}{mode}{kver}{}{}{}   (in the VM: \
             simctl stress --seed {} --ops {} --procs {} --threads {} --max-size {} --life {}{}{}{}{})",
            self.seed,
            self.ops,
            if self.failslab { " FAILSLAB=1" } else { "" },
            if self.mps { "" } else { " MPS=0" },
            if self.neighbour { "" } else { " NEIGHBOUR=0" },
            self.seed,
            self.ops,
            self.procs,
            self.threads,
            self.max_size,
            self.life,
            if self.unload { "" } else { " --no-unload" },
            if self.failslab { " --failslab" } else { "" },
            if self.mps { " --mps" } else { "" },
            if self.neighbour { " --neighbour" } else { "" },
        )
    }
}

/// The operations, in tally order.
const OPS: [&str; 20] = [
    "alloc",
    "reg",
    "dereg",
    "dma-check",
    "query",
    "free",
    "hook",
    "fault",
    "disassociate",
    "unload",
    "fork-dereg",
    "end:exit-live",
    "end:clean",
    "end:handoff",
    "end:send-fd",
    "life",
    "mps-alloc",
    "mps-share",
    "mps-owner-free",
    "neighbour",
];
const ERRNOS: usize = 1024;

/// Outcome counters shared by every process of the campaign (an anonymous
/// shared mapping made before the first fork).
pub(crate) struct Tally {
    cells: &'static [AtomicU64],
}

impl Tally {
    fn new() -> Result<Self, String> {
        let n = OPS.len() * ERRNOS;
        let bytes = n * std::mem::size_of::<AtomicU64>();
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe { mmap(std::ptr::null_mut(), bytes, PROT_RW, MAP_SHARED_ANON, -1, 0) };
        if p as isize == -1 {
            return Err("mmap of the tally failed".into());
        }
        // SAFETY: the mapping is `bytes` long, zero-filled (a valid AtomicU64
        // array), page aligned, and never unmapped: 'static is right.
        let cells = unsafe { std::slice::from_raw_parts(p.cast::<AtomicU64>(), n) };
        Ok(Self { cells })
    }

    pub(crate) fn count(&self, op: usize, errno: i32) {
        let e = (errno.max(0) as usize).min(ERRNOS - 1);
        self.cells[op * ERRNOS + e].fetch_add(1, Ordering::Relaxed);
    }

    fn total(&self) -> u64 {
        (0..op_index("fork-dereg"))
            .flat_map(|o| (0..ERRNOS).map(move |e| (o, e)))
            .map(|(o, e)| self.cells[o * ERRNOS + e].load(Ordering::Relaxed))
            .sum()
    }

    fn print(&self) {
        for (o, name) in OPS.iter().enumerate() {
            let mut parts = BTreeMap::new();
            for e in 0..ERRNOS {
                let v = self.cells[o * ERRNOS + e].load(Ordering::Relaxed);
                if v > 0 {
                    let k = if e == 0 {
                        "ok".to_string()
                    } else {
                        format!("{}({e})", errno_name(e as i32))
                    };
                    parts.insert(k, v);
                }
            }
            if !parts.is_empty() {
                let s: Vec<String> = parts.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!("stress op {name}: {}", s.join(" "));
            }
        }
    }
}

pub(crate) fn op_index(name: &str) -> usize {
    OPS.iter().position(|&o| o == name).unwrap_or(0)
}

/// A forked life process: `ops` operations over the threads, then its end.
fn life_main(cfg: &Config, tally: &Tally, at: (u64, u64), ops: u64, mps: Option<Shared>) -> ! {
    let (worker, idx) = at;
    let dev = Devices::default();
    let shared = mps.and_then(|s| {
        s.join(
            &dev,
            &mut Rng::derive(cfg.seed, &[worker, idx, u64::MAX - 1]),
        )
    });
    let mut end_rng = Rng::derive(cfg.seed, &[worker, idx, u64::MAX]);
    let end = End::draw(&mut end_rng);
    // Nor in MPS-like lives: their exit may keep a pin registered, which a pin
    // the neighbour released would keep for good.
    let neighbour = cfg.neighbour && !end.foreign() && shared.is_none();
    let life = Life {
        cfg,
        dev,
        allocs: Mutex::new(Vec::new()),
        handles: Mutex::new(Vec::new()),
        shared,
        neighbour,
        tally,
        tag: format!("[seed {} worker {worker} life {idx}]", cfg.seed),
    };
    if cfg.failslab {
        // From here on a share of this process's slab allocations fail
        // (the kernel's failslab, task-filtered); its children inherit it.
        std::fs::write("/proc/self/make-it-fail", "1").ok();
    }
    std::thread::scope(|s| {
        for t in 0..cfg.threads {
            let n = ops / cfg.threads + u64::from(t < ops % cfg.threads);
            let life = &life;
            // Under failslab a clone may fail: try again (a thread that
            // never starts leaves its operations undone, not failed).
            for _ in 0..100 {
                let b = std::thread::Builder::new();
                let spawned = b.spawn_scoped(s, move || {
                    let mut r = Rng::derive(cfg.seed, &[worker, idx, t]);
                    thread_ops(life, &mut r, n);
                });
                if spawned.is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    end_of_life(&life, &end, &mut end_rng);
    tally.count(op_index("life"), 0);
    // SAFETY: ends the process; the kernel closes what is still open.
    unsafe { _exit(0) }
}

fn fork_or_die() -> c_int {
    let mut pid = -1;
    for _ in 0..100 {
        // Only the campaign's top and its workers fork, both single-threaded.
        // SAFETY: fork() in a single-threaded process has no async-signal-safety caveat.
        pid = unsafe { fork() };
        if pid >= 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if pid < 0 {
        eprintln!("STRESS-FAIL fork failed");
        std::process::exit(1);
    }
    pid
}

/// Waits for `pid`: true if it exited 0.
fn reap(pid: c_int) -> bool {
    let mut st = 0;
    // SAFETY: `st` is writable; `pid` is our child.
    let r = unsafe { waitpid(pid, &mut st, 0) };
    r == pid && st == 0
}

/// Ends the worker after a life that failed or died.
fn life_failed(cfg: &Config, worker: u64, idx: u64) -> ! {
    eprintln!(
        "STRESS-FAIL [seed {} worker {worker} life {idx}] the life process failed or died",
        cfg.seed
    );
    // SAFETY: ends the worker.
    unsafe { _exit(1) }
}

/// A worker: lives one after another until its share is done.
fn worker_main(cfg: &Config, tally: &Tally, worker: u64, share: u64) -> ! {
    let mut r = Rng::derive(cfg.seed, &[worker]);
    let owner = Owner::default();
    let (mut done, mut idx) = (0, 0);
    while done < share {
        let n = (r.range(1, cfg.life) * cfg.threads).min(share - done);
        let mps = if cfg.mps {
            owner.prepare(tally, &mut r)
        } else {
            None
        };
        let pid = fork_or_die();
        if pid == 0 {
            life_main(cfg, tally, (worker, idx), n, mps);
        }
        if let Some(s) = mps {
            owner.share(tally, &s, pid);
            let alive = reap(pid);
            owner.free(tally, s);
            if !alive {
                life_failed(cfg, worker, idx);
            }
        } else if !reap(pid) {
            life_failed(cfg, worker, idx);
        }
        done += n;
        idx += 1;
    }
    // SAFETY: ends the worker.
    unsafe { _exit(0) }
}

/// The end state: hooks and faults disarmed, nothing outstanding (allowing
/// the driver's work queue a few seconds to finish a hook's free), no
/// violation.
fn end_state(dev: &Devices) -> Result<String, String> {
    let quiet = |_l: String| {};
    for site in ["map_prologue", "map_epilogue", "unmap", "put", "get_pages"] {
        cmd::run(dev, &w(&["gpu", "hook", site, "0"]), &quiet).map_err(|e| e.to_string())?;
    }
    for site in ["get_pages", "dma_map", "persistent"] {
        cmd::run(dev, &w(&["gpu", "fault", site, "0"]), &quiet).map_err(|e| e.to_string())?;
    }
    let get = |sim: Sim, k: &str| -> Result<u64, String> {
        let s = dev
            .stats(sim)
            .map_err(|e| format!("{} stats: {e}", sim.name()))?;
        s.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
            .ok_or_else(|| format!("no {k} in the {} stats", sim.name()))
    };
    let t0 = Instant::now();
    let state = loop {
        let s = (
            get(Sim::Gpu, "pins")?,
            get(Sim::Gpu, "persistent_pins")?,
            get(Sim::Gpu, "mappings")?,
            get(Sim::Core, "registrations")?,
        );
        if s == (0, 0, 0, 0) || t0.elapsed() > Duration::from_secs(10) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let summary = format!(
        "pins={} persistent_pins={} mappings={} core_registrations={}",
        state.0, state.1, state.2, state.3
    );
    if state != (0, 0, 0, 0) {
        return Err(format!("outstanding after the campaign: {summary}"));
    }
    // The neighbour's harm is counted by the simulators, not as violations.
    let released = get(Sim::Gpu, "neighbour_released_pins")?;
    if released > 0 {
        println!(
            "stress end: the neighbour's late puts released {released} pin(s) of the client \
             ({} DMA check(s) of such registrations)",
            get(Sim::Core, "dma_after_neighbour_put")?
        );
    }
    let met = get(Sim::Gpu, "map_newer_neighbour_pin")?;
    if met > 0 {
        println!(
            "stress end: {met} dma_map(s) of the client, its table freed mid-call, went on with \
             the neighbour's newer pin at that address"
        );
    }
    cmd::run(dev, &w(&["check"]), &|l| println!("stress end: {l}")).map_err(|e| e.to_string())?;
    Ok(summary)
}

/// `simctl stress ...`: true if the campaign passed.
pub fn main(args: &[String]) -> bool {
    let cfg = match Config::parse(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("simctl stress: {e}");
            return false;
        }
    };
    let tally = match Tally::new() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("simctl stress: {e}");
            return false;
        }
    };
    println!(
        "stress seed={} ops={} procs={} threads={} max_size={:#x} life<={} unload={} failslab={}",
        cfg.seed, cfg.ops, cfg.procs, cfg.threads, cfg.max_size, cfg.life, cfg.unload, cfg.failslab
    );
    let t0 = Instant::now();
    let mut pids = Vec::new();
    for wk in 0..cfg.procs {
        let share = cfg.ops / cfg.procs + u64::from(wk < cfg.ops % cfg.procs);
        let pid = fork_or_die();
        if pid == 0 {
            worker_main(&cfg, &tally, wk, share);
        }
        pids.push(pid);
    }
    let mut ok = true;
    let mut last = Instant::now();
    while !pids.is_empty() {
        let mut st = 0;
        // SAFETY: `st` is writable; -1 = any child of ours.
        let pid = unsafe { waitpid(-1, &mut st, WNOHANG) };
        if pid > 0 {
            pids.retain(|&p| p != pid);
            ok &= st == 0;
            continue;
        }
        if pid < 0 {
            break;
        }
        if last.elapsed() > Duration::from_secs(30) {
            last = Instant::now();
            println!(
                "stress progress: {}/{} ops, {} lives, {} s",
                tally.total(),
                cfg.ops,
                tally.cells[op_index("life") * ERRNOS].load(Ordering::Relaxed),
                t0.elapsed().as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    tally.print();
    let wall = t0.elapsed().as_secs_f64();
    let dev = Devices::default();
    let end = end_state(&dev);
    match (&end, ok) {
        (Ok(s), true) => {
            println!(
                "stress ok seed={} ops={} wall={wall:.1}s end state: {s}, no violations \
                 ({} operations drawn; one that drew a handle or allocation its thread did not have was skipped)",
                cfg.seed,
                tally.total(),
                cfg.ops
            );
            true
        }
        _ => {
            if let Err(e) = &end {
                eprintln!("STRESS-FAIL end state: {e}");
            }
            if !ok {
                eprintln!("STRESS-FAIL a worker failed (see above)");
            }
            eprintln!(
                "STRESS-FAIL seed={} ops={} wall={wall:.1}s",
                cfg.seed, cfg.ops
            );
            eprintln!("STRESS-FAIL reproduce: {}", cfg.repro());
            false
        }
    }
}
