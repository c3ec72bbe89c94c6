//! `simctl fuzz --seed S --iters N`: bad input on the simulators' control
//! devices.  Every ioctl either does what it says or fails with an errno;
//! nothing oopses (the kernel log is the case's business).  Checked here:
//!
//! * arguments the interface defines as invalid are refused (out-of-range
//!   sites, errnos, layouts, lengths, flags, step hooks; misaligned and
//!   overflowing VA ranges; waits and delays beyond their documented
//!   bounds; unknown handles; NULL argument pointers; unknown requests);
//! * an argument block the kernel can read but not write back (a
//!   read-only page) fails the call *and loses nothing*: no allocation or
//!   registration is left behind that the caller was never told about;
//! * the rest is random: random requests, sizes, pointers and fields.

use std::os::raw::{c_int, c_ulong, c_void};
use std::os::unix::io::AsRawFd;

use crate::dev::{errno_name, Devices, Sim};
use crate::rng::Rng;
use crate::uapi::*;

extern "C" {
    fn ioctl(fd: c_int, request: c_ulong, ...) -> c_int;
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
    fn __errno_location() -> *mut c_int;
}

/// The longest hook wait / delay the simulators accept (sim_uapi.h).
const MAX_WAIT_MS: u32 = 60_000;
const MAX_DELAY_US: u32 = 1_000_000;
const PAGE: usize = 4096;

/// Raw ioctl: Ok(()) or the errno.  `arg` may be any address: the kernel
/// must cope (copy_from_user / copy_to_user fail with EFAULT).
fn raw(dev: &Devices, sim: Sim, req: u64, arg: u64) -> Result<(), i32> {
    let f = dev.get(sim).map_err(|e| e.raw_os_error().unwrap_or(5))?;
    // Every valid pointer given here is to a live buffer of at least the
    // size encoded in `req`; any other is the kernel's to refuse (EFAULT).
    // SAFETY: ioctl(2) on an open fd; the kernel validates `arg` as a user pointer.
    let r = unsafe { ioctl(f.as_raw_fd(), req as c_ulong, arg as c_ulong) };
    if r < 0 {
        // SAFETY: errno of this thread.
        Err(unsafe { *__errno_location() })
    } else {
        Ok(())
    }
}

/// A page mapped read-only after `init` wrote the argument into it.
struct RoPage(*mut u8);

impl RoPage {
    fn new<T: Copy>(v: &T) -> Option<Self> {
        // SAFETY: a fresh private anonymous page.
        let p = unsafe { mmap(std::ptr::null_mut(), PAGE, 3, 0x02 | 0x20, -1, 0) };
        if p as isize == -1 {
            return None;
        }
        // SAFETY: `p` is a writable page, T is smaller than a page.
        unsafe {
            std::ptr::write_unaligned(p.cast::<T>(), *v);
            mprotect(p, PAGE, 1);
        }
        Some(RoPage(p.cast()))
    }
    fn addr(&self) -> u64 {
        self.0 as u64
    }
}

struct Fuzz<'a> {
    dev: &'a Devices,
    r: Rng,
    failures: Vec<String>,
    calls: u64,
    accepted: u64,
    /// A valid buffer for the kernel's output (stats text, SG lists).
    out: Vec<u8>,
}

impl Fuzz<'_> {
    fn call<T>(&mut self, sim: Sim, req: u64, arg: &mut T) -> Result<(), i32> {
        self.calls += 1;
        let r = raw(self.dev, sim, req, arg as *mut T as u64);
        self.accepted += u64::from(r.is_ok());
        r
    }

    /// `what` must be refused; true if it was accepted (a failure).
    fn refused<T: std::fmt::Debug>(&mut self, sim: Sim, req: u64, arg: &mut T, what: &str) -> bool {
        let before = format!("{arg:?}");
        let accepted = self.call(sim, req, arg).is_ok();
        if accepted {
            self.failures
                .push(format!("{} accepted {what}: {before}", sim.name()));
        }
        accepted
    }

    fn stat(&self, sim: Sim, key: &str) -> u64 {
        self.dev
            .stats(sim)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
            })
            .unwrap_or(u64::MAX)
    }

    fn wild_u64(&mut self) -> u64 {
        let (x, y) = (self.r.next_u64(), self.r.next_u64() & !0xffff);
        *self.r.pick(&[
            0,
            1,
            0xffff,
            0x1_0000,
            0x1_0001,
            u64::MAX,
            u64::MAX - 0xffff,
            1 << 63,
            0x3000_0000_0000,
            0x5fff_ffff_0000,
            x,
            y,
        ])
    }

    fn wild_u32(&mut self) -> u32 {
        *self.r.pick(&[
            0,
            1,
            2,
            3,
            4,
            7,
            0xffff,
            u32::MAX,
            1 << 31,
            self.r.clone().next_u64() as u32,
        ])
    }

    /// Disarms every fault and hook, and the pin delay.
    fn disarm(&mut self) {
        for site in 0..6 {
            let mut x = NvsimFault {
                site,
                count: 0,
                err: 5,
                reserved: 0,
            };
            raw(self.dev, Sim::Gpu, NVSIM_IOC_FAULT, &mut x as *mut _ as u64).ok();
        }
        for site in 1..HOOK_SITES {
            let mut h = NvsimHook {
                site,
                ..Default::default()
            };
            raw(self.dev, Sim::Gpu, NVSIM_IOC_HOOK, &mut h as *mut _ as u64).ok();
        }
        let mut d = NvsimDelay::default();
        raw(self.dev, Sim::Gpu, NVSIM_IOC_DELAY, &mut d as *mut _ as u64).ok();
    }

    /// Arguments the interface defines as invalid.
    fn invalid(&mut self) {
        let (g, c) = (Sim::Gpu, Sim::Core);
        let k64 = 0x1_0000u64;
        for (len, va, layout, run) in [
            (0, 0, LAYOUT_CONTIGUOUS, 0),
            (k64 + 1, 0, LAYOUT_CONTIGUOUS, 0),
            ((4 << 30) + k64, 0, LAYOUT_CONTIGUOUS, 0),
            ((256 << 30) + k64, 0, LAYOUT_SPARSE, 0),
            (k64, 0, 7, 0),
            (k64, 0, LAYOUT_FRAGMENTED, 0),
            (k64, 0x3000_0000_1000, LAYOUT_CONTIGUOUS, 0),
            (2 * k64, u64::MAX - k64 + 1, LAYOUT_SPARSE, 0),
            (k64, 0x6000_0000_0000, LAYOUT_CONTIGUOUS, 0),
        ] {
            let mut a = NvsimAlloc {
                len,
                va,
                layout,
                run_pages: run,
            };
            self.refused(g, NVSIM_IOC_ALLOC, &mut a, "an invalid allocation");
        }
        let mut f = NvsimFree { va: 0x1234 };
        self.refused(g, NVSIM_IOC_FREE, &mut f, "a free of no allocation");
        for (site, err) in [
            (6, 5),
            (u32::MAX, 5),
            (0, 0),
            (0, -5),
            (1, 4096),
            (2, i32::MIN),
        ] {
            let mut f = NvsimFault {
                site,
                count: 1,
                err,
                reserved: 0,
            };
            self.refused(g, NVSIM_IOC_FAULT, &mut f, "an invalid fault");
        }
        for (site, wait) in [
            (0, 0),
            (HOOK_SITES, 0),
            (u32::MAX, 0),
            (1, MAX_WAIT_MS + 1),
            (3, u32::MAX),
        ] {
            let mut h = NvsimHook {
                site,
                count: 1,
                wait_ms: wait,
                reserved: 0,
            };
            self.refused(g, NVSIM_IOC_HOOK, &mut h, "an invalid hook");
        }
        let mut d = NvsimDelay {
            us_per_page: MAX_DELAY_US + 1,
            reserved: 0,
        };
        self.refused(g, NVSIM_IOC_DELAY, &mut d, "a delay beyond its bound");
        let mut d = NvsimDelay {
            us_per_page: u32::MAX,
            reserved: 0,
        };
        self.refused(g, NVSIM_IOC_DELAY, &mut d, "a delay beyond its bound");
        // (an accepted one must not slow down what follows)
        self.disarm();
        // Registrations of real memory with invalid step hooks or flags.
        let mut base = NvsimAlloc {
            len: k64,
            ..Default::default()
        };
        self.call(g, NVSIM_IOC_ALLOC, &mut base).ok();
        for (step, action, ms, flags) in [
            (5, 1, 0, 0),
            (1, 3, 0, 0),
            (u32::MAX, 1, 0, 0),
            (1, 2, MAX_WAIT_MS + 1, 0),
            (2, 1, u32::MAX, 0),
            (0, 0, 0, 2),
            (0, 0, 0, u32::MAX),
        ] {
            let mut reg = PcsimReg {
                va: base.va,
                len: k64,
                hook_step: step,
                hook_action: action,
                hook_ms: ms,
                flags,
                ..Default::default()
            };
            if self.refused(c, PCSIM_IOC_REG, &mut reg, "an invalid registration") {
                let mut h = PcsimHandle {
                    handle: reg.handle,
                    reserved: 0,
                };
                self.call(c, PCSIM_IOC_DEREG, &mut h).ok();
            }
        }
        // The copies (both only ever into `out`): a bad direction or
        // reserved field, ranges past or outside the GPU memory, wrapping.
        let out = self.out.as_mut_ptr() as u64;
        for (va, len, dir, reserved) in [
            (base.va, 16, 2, 0),
            (base.va, 16, MEMCPY_DTOH, 1),
            (base.va, k64 + 1, MEMCPY_DTOH, 0),
            (base.va + k64, 1, MEMCPY_DTOH, 0),
            (0x1000, 16, MEMCPY_HTOD, 0),
            (u64::MAX - 3, 16, MEMCPY_DTOH, 0),
        ] {
            let mut m = NvsimMemcpy {
                va,
                buf: out,
                len,
                dir,
                reserved,
            };
            self.refused(g, NVSIM_IOC_MEMCPY, &mut m, "an invalid copy");
        }
        // The HCA's DMA through a live registration: outside it, past its
        // end, a bad direction.
        let mut reg = PcsimReg {
            va: base.va,
            len: k64,
            ..Default::default()
        };
        if self.call(c, PCSIM_IOC_REG, &mut reg).is_ok() {
            for (va, len, write) in [
                (base.va - 1, 16, 0),
                (base.va, k64 + 1, 0),
                (base.va + k64, 1, 0),
                (u64::MAX - 3, 16, 0),
                (base.va, 16, 2),
            ] {
                let mut d = PcsimDma {
                    handle: reg.handle,
                    write,
                    va,
                    len,
                    buf: out,
                };
                self.refused(c, PCSIM_IOC_DMA, &mut d, "an invalid DMA");
            }
            let mut h = PcsimHandle {
                handle: reg.handle,
                reserved: 0,
            };
            self.call(c, PCSIM_IOC_DEREG, &mut h).ok();
        }
        let mut f = NvsimFree { va: base.va };
        self.call(g, NVSIM_IOC_FREE, &mut f).ok();
        for handle in [0, u32::MAX, 0x7fff_ffff] {
            let mut d = PcsimDma {
                handle,
                write: 0,
                va: base.va,
                len: 16,
                buf: out,
            };
            self.refused(c, PCSIM_IOC_DMA, &mut d, "a DMA through an unknown handle");
            let mut h = PcsimHandle {
                handle,
                reserved: 0,
            };
            self.refused(c, PCSIM_IOC_DEREG, &mut h, "an unknown handle");
            self.refused(c, PCSIM_IOC_DMA_CHECK, &mut h, "an unknown handle");
            self.refused(c, PCSIM_IOC_DISASSOCIATE, &mut h, "an unknown handle");
        }
        // NULL and kernel-space argument pointers; unknown requests.
        for (sim, req) in [
            (g, NVSIM_IOC_ALLOC),
            (g, NVSIM_IOC_HOOK),
            (g, NVSIM_IOC_STATS),
            (c, PCSIM_IOC_REG),
            (c, PCSIM_IOC_QUERY),
            (c, PCSIM_IOC_DEREG),
        ] {
            for p in [0u64, 0xffff_8880_0000_0000, u64::MAX - 7] {
                self.calls += 1;
                if raw(self.dev, sim, req, p).is_ok() {
                    self.failures.push(format!(
                        "{} {req:#x} accepted argument pointer {p:#x}",
                        sim.name()
                    ));
                }
            }
        }
        for req in [
            0u64,
            0x4e00,
            0xc0ff_4e01,
            0x4e08,
            0x5008,
            0xc091_5001,
            0x8010_4e05,
        ] {
            for sim in [g, c] {
                self.calls += 1;
                if raw(self.dev, sim, req, 0).is_ok() {
                    self.failures
                        .push(format!("{} accepted unknown request {req:#x}", sim.name()));
                }
            }
        }
    }

    /// A readable, unwritable argument block: the call fails, and what it
    /// would have made is not left behind.
    fn read_only(&mut self) {
        let allocs_before = self.stat(Sim::Gpu, "allocations");
        let a = NvsimAlloc {
            len: 0x10_0000,
            layout: LAYOUT_CONTIGUOUS,
            ..Default::default()
        };
        let mut r = Ok(());
        if let Some(p) = RoPage::new(&a) {
            self.calls += 1;
            r = raw(self.dev, Sim::Gpu, NVSIM_IOC_ALLOC, p.addr());
            if r.is_ok() {
                self.failures
                    .push("gpu alloc succeeded into a read-only argument".into());
            }
        }
        let after = self.stat(Sim::Gpu, "allocations");
        if after != allocs_before {
            let left: Vec<String> = self
                .dev
                .stats(Sim::Gpu)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("alloc va="))
                .map(String::from)
                .collect();
            self.failures.push(format!(
                "gpu alloc with a read-only argument failed with {} but left an allocation \
                 behind (allocations {allocs_before} -> {after}: {})",
                errno_name(r.err().unwrap_or(0)),
                left.join("; ")
            ));
        }
        // A registration whose result cannot be written back.
        let mut real = NvsimAlloc {
            len: 0x20_0000,
            layout: LAYOUT_CONTIGUOUS,
            ..Default::default()
        };
        if self.call(Sim::Gpu, NVSIM_IOC_ALLOC, &mut real).is_err() {
            return;
        }
        let regs_before = self.stat(Sim::Core, "registrations");
        let reg = PcsimReg {
            va: real.va,
            len: real.len,
            access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
            ..Default::default()
        };
        if let Some(p) = RoPage::new(&reg) {
            self.calls += 1;
            let r = raw(self.dev, Sim::Core, PCSIM_IOC_REG, p.addr());
            let after = self.stat(Sim::Core, "registrations");
            if r.is_ok() {
                self.failures
                    .push("core reg succeeded into a read-only argument".into());
            } else if after != regs_before {
                self.failures.push(format!(
                    "core reg with a read-only argument failed with {} but left a registration \
                     behind (registrations {regs_before} -> {after})",
                    errno_name(r.err().unwrap_or(0))
                ));
            }
        }
        // The SG list pointer unwritable: the same.
        let regs_before = self.stat(Sim::Core, "registrations");
        let mut reg = reg;
        if let Some(p) = RoPage::new(&[0u64; 4]) {
            reg.sg = p.addr();
            reg.sg_max = 64;
            let r = self.call(Sim::Core, PCSIM_IOC_REG, &mut reg);
            let after = self.stat(Sim::Core, "registrations");
            if r.is_err() && after != regs_before {
                self.failures.push(format!(
                    "core reg with an unwritable SG list failed but left a registration behind \
                     (registrations {regs_before} -> {after})"
                ));
            } else if r.is_ok() {
                let mut h = PcsimHandle {
                    handle: reg.handle,
                    reserved: 0,
                };
                self.call(Sim::Core, PCSIM_IOC_DEREG, &mut h).ok();
            }
        }
        let mut f = NvsimFree { va: real.va };
        self.call(Sim::Gpu, NVSIM_IOC_FREE, &mut f).ok();
    }

    /// One random call: random request of either device, random fields.
    fn random(&mut self) {
        let sim = if self.r.chance(1, 2) {
            Sim::Gpu
        } else {
            Sim::Core
        };
        let mut buf = [0u64; 32];
        for b in buf.iter_mut() {
            *b = self.wild_u64();
        }
        let gpu_reqs = [
            NVSIM_IOC_ALLOC,
            NVSIM_IOC_FREE,
            NVSIM_IOC_FAULT,
            NVSIM_IOC_HOOK,
            NVSIM_IOC_STATS,
            NVSIM_IOC_MEMCPY,
        ];
        let core_reqs = [
            PCSIM_IOC_REG,
            PCSIM_IOC_DEREG,
            PCSIM_IOC_DMA_CHECK,
            PCSIM_IOC_QUERY,
            PCSIM_IOC_DISASSOCIATE,
            PCSIM_IOC_STATS,
            PCSIM_IOC_DMA,
        ];
        let mut req = if sim == Sim::Gpu {
            *self.r.pick(&gpu_reqs)
        } else {
            *self.r.pick(&core_reqs)
        };
        if self.r.chance(1, 10) {
            req ^= 1 << self.r.below(32);
        }
        // Keep the damage bounded: no huge real allocation survives, no
        // hook or fault stays armed for long, no step hook sleeps long.
        if req == NVSIM_IOC_ALLOC {
            buf[2] &= 0xffff_ffff_0000_0003;
        }
        if req == NVSIM_IOC_HOOK || req == NVSIM_IOC_FAULT {
            buf[0] = (buf[0] & 0xffff_ffff_0000_0000) | u64::from(self.wild_u32() % 4);
            buf[1] = (buf[1] & !0xffff_ffff) | u64::from(self.wild_u32() % 300);
        }
        if req == PCSIM_IOC_REG && self.r.chance(1, 2) {
            buf[3] = (u64::from(self.wild_u32() % 500) << 32) | (buf[3] & 0xffff_ffff);
        }
        // Half the time a valid user buffer for the kernel to write to
        // (64 KiB; the count field clamped to it), else the wild value.
        let (ptr, count, unit) = match req {
            NVSIM_IOC_STATS | PCSIM_IOC_STATS => (0, 1, 1),
            PCSIM_IOC_QUERY => (1, 2, 16),
            PCSIM_IOC_REG => (5, 6, 16),
            _ => (usize::MAX, 0, 1),
        };
        if ptr != usize::MAX && self.r.chance(1, 2) {
            buf[ptr] = self.out.as_mut_ptr() as u64;
            let max = (self.out.len() / unit) as u64;
            buf[count] = (buf[count] & !0xffff_ffff) | ((buf[count] & 0xffff_ffff) % (max + 1));
        }
        // The copies write to user memory: only ever into `out`, never
        // past it (struct nvsim_memcpy: buf, len at 1, 2; pcsim_dma: 3, 2).
        if req == NVSIM_IOC_MEMCPY || req == PCSIM_IOC_DMA {
            let p = if req == NVSIM_IOC_MEMCPY { 1 } else { 3 };
            buf[p] = self.out.as_mut_ptr() as u64;
            buf[2] %= self.out.len() as u64 + 1;
        }
        let r = self.call(sim, req, &mut buf);
        if r.is_ok() && req == NVSIM_IOC_ALLOC {
            let mut f = NvsimFree { va: buf[1] };
            self.call(Sim::Gpu, NVSIM_IOC_FREE, &mut f).ok();
        }
        if r.is_ok() && req == PCSIM_IOC_REG {
            let mut h = PcsimHandle {
                handle: buf[7] as u32,
                reserved: 0,
            };
            self.call(Sim::Core, PCSIM_IOC_DEREG, &mut h).ok();
        }
    }
}

/// `simctl fuzz --seed S --iters N`: true if every check held.
pub fn main(args: &[String]) -> bool {
    let mut seed = 1;
    let mut iters = 1000;
    let mut i = 0;
    while i + 1 < args.len() {
        let v = crate::num::parse(&args[i + 1]);
        match (args[i].as_str(), v) {
            ("--seed", Some(v)) => seed = v,
            ("--iters", Some(v)) => iters = v,
            _ => {
                eprintln!("simctl fuzz --seed S --iters N");
                return false;
            }
        }
        i += 2;
    }
    let dev = Devices::default();
    let mut f = Fuzz {
        dev: &dev,
        r: Rng::derive(seed, &[0xf022]),
        failures: Vec::new(),
        calls: 0,
        accepted: 0,
        out: vec![0; 64 << 10],
    };
    f.invalid();
    f.read_only();
    for _ in 0..iters {
        f.random();
    }
    f.disarm();
    println!(
        "fuzz seed={seed} calls={} accepted={} refused={} failures={}",
        f.calls,
        f.accepted,
        f.calls - f.accepted,
        f.failures.len()
    );
    for x in &f.failures {
        eprintln!("FUZZ-FAIL {x}");
    }
    if !f.failures.is_empty() {
        eprintln!("FUZZ-FAIL reproduce: simctl fuzz --seed {seed} --iters {iters}");
    }
    f.failures.is_empty()
}
