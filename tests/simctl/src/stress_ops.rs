//! The operations of `simctl stress` (see stress.rs): what one thread of a
//! life does, and how a life ends.

use std::ffi::CString;
use std::os::raw::{c_char, c_long, c_uint};
use std::sync::Mutex;

use crate::cmd::{self, CmdError};
use crate::dev::{Devices, Sim};
use crate::rng::Rng;
use crate::stress::{op_index, Config, Tally, K64};

extern "C" {
    fn _exit(code: i32) -> !;
    fn syscall(n: c_long, ...) -> c_long;
    fn __errno_location() -> *mut i32;
}

const SYS_DELETE_MODULE: c_long = 176;
const O_NONBLOCK: c_uint = 0o4000;

/// One live allocation of a life.
#[derive(Clone, Copy)]
pub(crate) struct Alloc {
    pub(crate) va: u64,
    pub(crate) len: u64,
}

/// What the threads of one life share.
pub(crate) struct Life<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) dev: Devices,
    pub(crate) allocs: Mutex<Vec<Alloc>>,
    pub(crate) handles: Mutex<Vec<u32>>,
    /// An MPS-like life's range of its worker's allocation (stress_mps.rs):
    /// registered, never freed by the life.
    pub(crate) shared: Option<Alloc>,
    /// Whether the threads drive the neighbour: with --neighbour, in lives
    /// whose end deregisters from no other process ([`End::foreign`]).
    pub(crate) neighbour: bool,
    pub(crate) tally: &'a Tally,
    pub(crate) tag: String,
}

/// Runs `words`; counts the outcome; an error that is no errno (a usage or
/// check error: a bug of this generator) ends the campaign.
fn run_op(life: &Life, op: &str, words: Vec<String>) -> Option<u64> {
    let quiet = |_l: String| {};
    let loud = |l: String| println!("{} {l}", life.tag);
    let out: &dyn Fn(String) = if life.cfg.verbose { &loud } else { &quiet };
    if life.cfg.verbose {
        println!("{} $ {}", life.tag, words.join(" "));
    }
    match cmd::run(&life.dev, &words, out) {
        Ok(v) => {
            life.tally.count(op_index(op), 0);
            v.or(Some(0))
        }
        Err(CmdError::Os(e, _)) => {
            life.tally.count(op_index(op), e);
            None
        }
        Err(e) => fail(life, &format!("{}: {e}", words.join(" "))),
    }
}

fn fail(life: &Life, msg: &str) -> ! {
    eprintln!("STRESS-FAIL {}: {msg}", life.tag);
    eprintln!("STRESS-FAIL reproduce: {}", life.cfg.repro());
    // SAFETY: ends this life's process at once (its files close).
    unsafe { _exit(1) }
}

pub(crate) fn w(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

fn take_random<T: Copy>(v: &Mutex<Vec<T>>, r: &mut Rng) -> Option<T> {
    let mut v = v.lock().unwrap_or_else(|e| e.into_inner());
    if v.is_empty() {
        return None;
    }
    let i = r.below(v.len() as u64) as usize;
    Some(v.swap_remove(i))
}

fn peek_random<T: Copy>(v: &Mutex<Vec<T>>, r: &mut Rng) -> Option<T> {
    let v = v.lock().unwrap_or_else(|e| e.into_inner());
    (!v.is_empty()).then(|| v[r.below(v.len() as u64) as usize])
}

fn layout(r: &mut Rng) -> (String, bool) {
    match r.below(6) {
        0 => ("contiguous".into(), false),
        1 | 2 => (format!("fragmented:{}", r.range(1, 4)), false),
        3 => ("shuffled".into(), false),
        4 => ("sparse".into(), true),
        _ => (format!("sparse:{}", r.range(1, 16)), true),
    }
}

fn op_alloc(life: &Life, r: &mut Rng) {
    if life.allocs.lock().unwrap_or_else(|e| e.into_inner()).len() >= 8 {
        return op_free(life, r);
    }
    let (lay, sparse) = layout(r);
    let pages = if !sparse {
        if r.chance(1, 20) {
            r.range(64, 256)
        } else {
            r.range(1, 64)
        }
    } else if r.chance(1, 8) {
        // Tens of GiB: no backing, synthetic bus addresses.
        r.range(1 << 14, life.cfg.max_size / K64)
    } else {
        r.range(1, 1024)
    };
    let len = pages * K64;
    if let Some(va) = run_op(life, "alloc", w(&["gpu", "alloc", &hex(len), &lay])) {
        life.allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Alloc { va, len });
    }
}

fn op_reg(life: &Life, r: &mut Rng) {
    let a = match life.shared {
        Some(s) if r.chance(1, 3) => s,
        _ => match peek_random(&life.allocs, r) {
            Some(a) => a,
            None => return op_alloc(life, r),
        },
    };
    let off = match r.below(10) {
        0..=4 => K64 * r.below(a.len / K64),
        5..=7 => r.below(a.len),
        _ => 0,
    };
    let rest = a.len - off;
    let len = match r.below(10) {
        0..=4 => rest,
        5..=8 => r.range(1, rest),
        _ => rest + r.range(1, 1 << 20),
    };
    // Huge ranges are rare: at most one in 64 registrations above 1 GiB.
    let len = if len > (1 << 30) && !r.chance(1, 64) {
        len.min(r.range(1, 16 << 20))
    } else {
        len
    };
    let mut words = w(&["core", "reg", &hex(a.va + off), &hex(len)]);
    if r.chance(1, 10) {
        words.extend(w(&["--access", "ro"]));
    }
    if r.chance(1, 20) {
        words.push("--qp".into());
    }
    if r.chance(3, 20) {
        let step = *r.pick(&[
            "after_acquire",
            "after_get_pages",
            "after_dma_map",
            "in_dereg",
        ]);
        let hook = if r.chance(7, 10) {
            format!("{step}:free:{}", r.range(50, 500))
        } else {
            format!("{step}:delay:{}", r.range(1, 20))
        };
        words.extend(["--hook".to_string(), hook]);
    }
    if let Some(h) = run_op(life, "reg", words) {
        life.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(h as u32);
    }
}

fn op_handle(life: &Life, r: &mut Rng, op: &str, take: bool) {
    let h = if take {
        take_random(&life.handles, r)
    } else {
        peek_random(&life.handles, r)
    };
    let Some(h) = h else { return };
    let words = match op {
        "dereg" => w(&["core", "dereg", &h.to_string()]),
        "disassociate" => w(&["core", "disassociate", &h.to_string()]),
        "query" => w(&["core", "query", &h.to_string()]),
        _ => w(&["core", "dma-check", &h.to_string()]),
    };
    run_op(life, op, words);
}

fn op_free(life: &Life, r: &mut Rng) {
    if let Some(a) = take_random(&life.allocs, r) {
        run_op(life, "free", w(&["gpu", "free", &hex(a.va)]));
    }
}

fn op_hook(life: &Life, r: &mut Rng) {
    let site = *r.pick(&["map_prologue", "map_epilogue", "unmap", "put", "get_pages"]);
    let wait = r.range(20, 200).to_string();
    run_op(life, "hook", w(&["gpu", "hook", site, "1", &wait]));
}

/// The bench's same-process neighbour (sim_neighbour.ko, one pin at a time
/// for every process) pins a range of one of the life's allocations, or puts
/// its pin, that put held by a free hook of the pin's memory half of the
/// time (the window in which its late put may release a pin of the client).
fn op_neighbour(life: &Life, r: &mut Rng) {
    const NB: &str = "/dev/sim_neighbour";
    if r.chance(1, 2) {
        if let Some(a) = peek_random(&life.allocs, r) {
            let len = a.len.min(16 * K64);
            run_op(
                life,
                "neighbour",
                w(&["write", NB, &format!("pin:{:x}:{len:x}", a.va)]),
            );
        }
        return;
    }
    if r.chance(1, 2) {
        let wait = r.range(20, 200).to_string();
        run_op(life, "hook", w(&["gpu", "hook", "put", "1", &wait]));
    }
    run_op(life, "neighbour", w(&["write", NB, "put"]));
}

fn op_fault(life: &Life, r: &mut Rng) {
    let site = *r.pick(&["get_pages", "dma_map", "persistent"]);
    let errs: &[&str] = if site == "persistent" {
        &["EIO", "ENOMEM", "EINVAL", "EBUSY", "524"]
    } else {
        &["EIO", "ENOMEM", "EINVAL", "EBUSY"]
    };
    let e = *r.pick(errs);
    run_op(life, "fault", w(&["gpu", "fault", site, "1", e]));
}

/// `delete_module(name, O_NONBLOCK)`: 0 or the errno.
fn delete_module(name: &str) -> i32 {
    let c = CString::new(name).unwrap_or_default();
    // SAFETY: `c` is a NUL-terminated string that outlives the call;
    // O_NONBLOCK never waits and never forces.
    let r = unsafe { syscall(SYS_DELETE_MODULE, c.as_ptr() as *const c_char, O_NONBLOCK) };
    if r == 0 {
        0
    } else {
        // SAFETY: errno of this thread.
        unsafe { *__errno_location() }
    }
}

/// Unload attempts while this thread holds a registration no other thread
/// knows: the client, the simulated driver and the simulated core must
/// each refuse (EBUSY/EAGAIN), never unload, never oops.
fn op_unload(life: &Life, r: &mut Rng) {
    let Some(va) = run_op(life, "alloc", w(&["gpu", "alloc", "64K", "contiguous"])) else {
        return;
    };
    let held = run_op(life, "reg", w(&["core", "reg", &hex(va), "64K"]));
    let client_loaded = std::path::Path::new("/sys/module/peermem_rs").exists();
    let mut names = vec!["nvidia_p2p_sim", "peer_core_sim"];
    if held.is_some() && client_loaded {
        names.push("peermem_rs");
    }
    let name = *r.pick(&names);
    let e = delete_module(name);
    life.tally.count(op_index("unload"), e);
    if e == 0 {
        fail(life, &format!("{name} was unloaded while in use"));
    }
    if let Some(h) = held {
        run_op(life, "dereg", w(&["core", "dereg", &h.to_string()]));
    }
    run_op(life, "free", w(&["gpu", "free", &hex(va)]));
}

/// One thread of a life: `n` operations.
pub(crate) fn thread_ops(life: &Life, r: &mut Rng, n: u64) {
    // alloc reg dereg dma-check query free hook fault disassociate unload
    // neighbour.  A disassociate deregisters from a kernel thread: not in a
    // life with the neighbour (see `End::foreign`).
    let weights = [
        14,
        24,
        14,
        8,
        3,
        9,
        4,
        3,
        5 * u32::from(!life.neighbour),
        u32::from(life.cfg.unload),
        4 * u32::from(life.neighbour),
    ];
    for _ in 0..n {
        match r.weighted(&weights) {
            0 => op_alloc(life, r),
            1 => op_reg(life, r),
            2 => op_handle(life, r, "dereg", true),
            3 => op_handle(life, r, "dma-check", false),
            4 => op_handle(life, r, "query", false),
            5 => op_free(life, r),
            6 => op_hook(life, r),
            7 => op_fault(life, r),
            8 => op_handle(life, r, "disassociate", true),
            9 => op_unload(life, r),
            _ => op_neighbour(life, r),
        }
    }
}

/// How a life ends, drawn before its threads run.
pub(crate) struct End {
    fork_dereg: bool,
    core_first: bool,
    kind: usize,
}

impl End {
    pub(crate) fn draw(r: &mut Rng) -> Self {
        End {
            fork_dereg: r.chance(1, 4),
            core_first: r.chance(1, 2),
            kind: r.weighted(&[30, 25, 20, 20]),
        }
    }

    /// Whether another process may deregister the life's MRs: a forked
    /// child's dereg, or the last reference of the verbs file closed
    /// elsewhere.  Such a put is not made (the driver would find no pin for
    /// that process): the pin waits for its callback, which never comes if
    /// the neighbour's late put released it (README, "What no client can
    /// close"), so the neighbour stays out of these lives.
    pub(crate) fn foreign(&self) -> bool {
        self.fork_dereg || self.kind >= 2
    }
}

/// The end of a life, with no other thread left in the process.
pub(crate) fn end_of_life(life: &Life, end: &End, r: &mut Rng) {
    if end.fork_dereg {
        if let Some(h) = peek_random(&life.handles, r) {
            // A put from another process: the pin must stay armed.
            run_op(
                life,
                "fork-dereg",
                w(&["fork", "core", "dereg", &h.to_string()]),
            );
        }
    }
    let (a, b) = if end.core_first {
        ("core", "gpu")
    } else {
        ("gpu", "core")
    };
    match end.kind {
        0 => life.tally.count(op_index("end:exit-live"), 0),
        1 => {
            let hs: Vec<u32> = std::mem::take(&mut *life.handles.lock().unwrap());
            for h in hs {
                run_op(life, "dereg", w(&["core", "dereg", &h.to_string()]));
            }
            let al: Vec<Alloc> = std::mem::take(&mut *life.allocs.lock().unwrap());
            for x in al {
                run_op(life, "free", w(&["gpu", "free", &hex(x.va)]));
            }
            life.dev.close(Sim::Core);
            life.dev.close(Sim::Gpu);
            life.tally.count(op_index("end:clean"), 0);
        }
        2 => {
            run_op(life, "end:handoff", w(&["handoff", a]));
            run_op(life, "end:handoff", w(&["handoff", b]));
        }
        _ => {
            run_op(life, "end:send-fd", w(&["send-fd", a]));
            run_op(life, "end:send-fd", w(&["send-fd", b]));
        }
    }
}
