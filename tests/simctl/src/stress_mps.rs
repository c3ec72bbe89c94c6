//! MPS-like lives of `simctl stress`: the worker owns a GPU allocation and
//! adds the life's process to its P2P client list (`gpu share`, RM's
//! REGISTER_PID, as an MPS server does for its clients); the life
//! registers ranges of it next to its own memory and ends as any life does,
//! its control files opened in a random order (at exit the one opened last
//! is released first: "core gpu" destroys the life's RM client before the
//! verbs file deregisters, so its puts answer 0 for pins that stay armed).
//! After the life the worker frees the allocation: every pin still armed
//! calls back then, into whatever the client kept for it.

use std::os::raw::{c_int, c_void};

use crate::cmd;
use crate::dev::{Devices, Sim};
use crate::rng::Rng;
use crate::stress::{op_index, Tally, K64};
use crate::stress_ops::{w, Alloc};

extern "C" {
    fn pipe(fds: *mut c_int) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    fn close(fd: c_int) -> c_int;
}

/// The worker's side: its own control files (its RM client owns the
/// allocations), and the allocation of the life being forked.
#[derive(Default)]
pub(crate) struct Owner {
    dev: Devices,
}

/// One MPS-like life in the making: the allocation and the pipe on which
/// the worker tells the forked life whether the share succeeded.
pub(crate) struct Shared {
    alloc: Alloc,
    rfd: c_int,
    wfd: c_int,
}

impl Owner {
    fn run(&self, tally: &Tally, op: &str, words: &[&str]) -> Option<u64> {
        match cmd::run(&self.dev, &w(words), &|_l: String| {}) {
            Ok(v) => {
                tally.count(op_index(op), 0);
                v.or(Some(0))
            }
            Err(cmd::CmdError::Os(e, _)) => {
                tally.count(op_index(op), e);
                None
            }
            Err(e) => {
                eprintln!("STRESS-FAIL {}: {e}", words.join(" "));
                None
            }
        }
    }

    /// Before the fork: one allocation of the worker's for the next life
    /// (one life in four), and the pipe.
    pub(crate) fn prepare(&self, tally: &Tally, r: &mut Rng) -> Option<Shared> {
        if !r.chance(1, 4) {
            return None;
        }
        let len = r.range(1, 64) * K64;
        let lay = format!("fragmented:{}", r.range(1, 4));
        let va = self.run(
            tally,
            "mps-alloc",
            &["gpu", "alloc", &format!("{len:#x}"), &lay],
        )?;
        let mut fds = [0 as c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe() writes.
        if unsafe { pipe(fds.as_mut_ptr()) } != 0 {
            self.run(tally, "mps-free", &["gpu", "free", &format!("{va:#x}")]);
            return None;
        }
        Some(Shared {
            alloc: Alloc { va, len },
            rfd: fds[0],
            wfd: fds[1],
        })
    }

    /// In the worker after the fork: adds `pid` to the allocation's client
    /// list and lets the life go on (telling it whether it may use it).
    pub(crate) fn share(&self, tally: &Tally, s: &Shared, pid: c_int) {
        let va = format!("{:#x}", s.alloc.va);
        let ok = self
            .run(tally, "mps-share", &["gpu", "share", &va, &pid.to_string()])
            .is_some();
        let b = [u8::from(ok)];
        // SAFETY: writes one byte from `b` to the pipe's write end, which
        // this process owns and closes right after.
        unsafe {
            write(s.wfd, b.as_ptr().cast(), 1);
        }
        // SAFETY: both ends are this process's own, closed once here (the
        // life has its copies).
        unsafe {
            close(s.wfd);
        }
        // SAFETY: as above.
        unsafe {
            close(s.rfd);
        }
    }

    /// In the worker after the life was reaped: the owner's cudaFree.
    pub(crate) fn free(&self, tally: &Tally, s: Shared) {
        let va = format!("{:#x}", s.alloc.va);
        self.run(tally, "mps-owner-free", &["gpu", "free", &va]);
    }
}

impl Shared {
    /// In the forked life: waits for the worker's share; the allocation if
    /// it succeeded.  Opens the life's control files in a random order.
    pub(crate) fn join(&self, dev: &Devices, r: &mut Rng) -> Option<Alloc> {
        let mut b = [0u8; 1];
        // SAFETY: reads at most one byte into `b` from the pipe's read end,
        // inherited from the worker and closed once here.
        let n = unsafe { read(self.rfd, b.as_mut_ptr().cast(), 1) };
        // SAFETY: both ends are this process's copies, closed once here.
        unsafe {
            close(self.rfd);
        }
        // SAFETY: as above.
        unsafe {
            close(self.wfd);
        }
        let (first, second) = if r.chance(1, 2) {
            (Sim::Core, Sim::Gpu)
        } else {
            (Sim::Gpu, Sim::Core)
        };
        let _ = dev.open(first);
        let _ = dev.open(second);
        (n == 1 && b[0] == 1).then_some(self.alloc)
    }
}
