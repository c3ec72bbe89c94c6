//! The two control files and the ioctls on them.  An open file is state in
//! the kernel (a CUDA context, an uverbs context): closing it frees or
//! deregisters everything made through it, so a script keeps them open
//! until it ends or says `close`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::raw::{c_int, c_ulong};
use std::os::unix::io::AsRawFd;
use std::sync::{Arc, Mutex};

use crate::uapi::{self, SimText};

extern "C" {
    fn ioctl(fd: c_int, request: c_ulong, ...) -> c_int;
}

/// Which simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sim {
    Gpu,
    Core,
}

impl Sim {
    pub fn path(self) -> &'static str {
        match self {
            Sim::Gpu => uapi::NVSIM_DEV,
            Sim::Core => uapi::PCSIM_DEV,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Sim::Gpu => "gpu",
            Sim::Core => "core",
        }
    }
}

/// The control files of one simctl process, shared by its threads.
#[derive(Default)]
pub struct Devices {
    gpu: Mutex<Option<Arc<File>>>,
    core: Mutex<Option<Arc<File>>>,
}

impl Devices {
    fn slot(&self, sim: Sim) -> &Mutex<Option<Arc<File>>> {
        match sim {
            Sim::Gpu => &self.gpu,
            Sim::Core => &self.core,
        }
    }

    /// The open control file of `sim` (opened on first use).
    pub fn get(&self, sim: Sim) -> io::Result<Arc<File>> {
        let mut slot = self.slot(sim).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = slot.as_ref() {
            return Ok(f.clone());
        }
        let f = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(sim.path())
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {}", sim.path(), e)))?,
        );
        *slot = Some(f.clone());
        Ok(f)
    }

    /// Opens `sim`'s control file now (a no-op if open).
    pub fn open(&self, sim: Sim) -> io::Result<()> {
        self.get(sim).map(|_| ())
    }

    /// The raw fd of `sim`'s control file, if open.
    pub fn raw_fd(&self, sim: Sim) -> Option<i32> {
        let slot = self.slot(sim).lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().map(|f| f.as_raw_fd())
    }

    /// Takes `fd`, an open control file of `sim` inherited across an exec,
    /// as `sim`'s control file.
    pub fn adopt(&self, sim: Sim, fd: i32) {
        use std::os::unix::io::FromRawFd;
        // SAFETY: `fd` is an open file this process owns from now on
        // (`exec` in proc.rs left it open for the new image to adopt).
        let f = unsafe { File::from_raw_fd(fd) };
        *self.slot(sim).lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(f));
    }

    /// Closes `sim`'s control file (once no thread uses it any more).
    pub fn close(&self, sim: Sim) {
        let f = self
            .slot(sim)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(f);
    }

    /// Runs ioctl `req` with argument `arg` on `sim`'s control file.
    pub fn ioctl<T>(&self, sim: Sim, req: u64, arg: &mut T) -> io::Result<()> {
        let f = self.get(sim)?;
        // SAFETY: `arg` is a live, writable value of the type the kernel
        // expects for `req` (uapi.rs mirrors sim_uapi.h).
        let r = unsafe { ioctl(f.as_raw_fd(), req as c_ulong, arg as *mut T) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Runs an argument-less ioctl.
    pub fn ioctl_none(&self, sim: Sim, req: u64) -> io::Result<()> {
        let f = self.get(sim)?;
        // SAFETY: `req` takes no argument.
        let r = unsafe { ioctl(f.as_raw_fd(), req as c_ulong, 0 as c_ulong) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// The "key=value" stats of `sim`.
    pub fn stats(&self, sim: Sim) -> io::Result<String> {
        let req = match sim {
            Sim::Gpu => uapi::NVSIM_IOC_STATS,
            Sim::Core => uapi::PCSIM_IOC_STATS,
        };
        let mut size = 64 * 1024;
        loop {
            let mut buf = vec![0u8; size];
            let mut t = SimText {
                buf: buf.as_mut_ptr() as u64,
                size: size as u32,
                len: 0,
            };
            self.ioctl(sim, req, &mut t)?;
            if (t.len as usize) <= size {
                buf.truncate(t.len as usize);
                return Ok(String::from_utf8_lossy(&buf).into_owned());
            }
            size = t.len as usize + 4096;
        }
    }
}

/// The symbolic name of an errno value.
pub fn errno_name(e: i32) -> &'static str {
    match e {
        1 => "EPERM",
        2 => "ENOENT",
        4 => "EINTR",
        5 => "EIO",
        11 => "EAGAIN",
        12 => "ENOMEM",
        14 => "EFAULT",
        16 => "EBUSY",
        17 => "EEXIST",
        19 => "ENODEV",
        22 => "EINVAL",
        25 => "ENOTTY",
        35 => "EDEADLK",
        95 => "EOPNOTSUPP",
        110 => "ETIMEDOUT",
        116 => "ESTALE",
        524 => "ENOTSUPP",
        _ => "E?",
    }
}

/// The errno value of a symbolic name or a number.
pub fn errno_value(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return Some(n);
    }
    (1..1000).find(|&e| errno_name(e) == s)
}
