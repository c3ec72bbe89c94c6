//! Other processes doing the last part of a registration's life, as in the
//! field: a forked child running a command (e.g. `core dereg`), a child
//! closing the last reference to a control file, or a process that received
//! the control file over a unix socket (SCM_RIGHTS) closing it.  In each
//! the kernel sees a process other than the one that pinned the memory.

use std::io;
use std::os::raw::{c_int, c_void};
use std::os::unix::io::AsRawFd;

use crate::cmd::{self, CmdError};
use crate::dev::{Devices, Sim};

extern "C" {
    fn fork() -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn pipe(fds: *mut c_int) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    fn close(fd: c_int) -> c_int;
    fn _exit(code: c_int) -> !;
    fn socketpair(domain: c_int, ty: c_int, proto: c_int, fds: *mut c_int) -> c_int;
    fn sendmsg(fd: c_int, msg: *const MsgHdr, flags: c_int) -> isize;
    fn recvmsg(fd: c_int, msg: *mut MsgHdr, flags: c_int) -> isize;
    fn mlockall(flags: c_int) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
}

const F_SETFD: c_int = 2;

const MCL_CURRENT: c_int = 1;

const AF_UNIX: c_int = 1;
const SOCK_STREAM: c_int = 1;
const SOL_SOCKET: c_int = 1;
const SCM_RIGHTS: c_int = 1;

#[repr(C)]
struct IoVec {
    base: *mut c_void,
    len: usize,
}

/// `struct msghdr` (x86_64 Linux).
#[repr(C)]
struct MsgHdr {
    name: *mut c_void,
    namelen: u32,
    iov: *mut IoVec,
    iovlen: usize,
    control: *mut c_void,
    controllen: usize,
    flags: c_int,
}

/// `struct cmsghdr` followed by one fd, padded to CMSG_SPACE(4).
#[repr(C)]
struct CmsgFd {
    len: usize,
    level: c_int,
    ty: c_int,
    fd: c_int,
    pad: c_int,
}

fn last_os(what: &str) -> CmdError {
    let e = io::Error::last_os_error();
    CmdError::Os(e.raw_os_error().unwrap_or(5), what.to_string())
}

/// Waits for child `pid`; Ok if it exited 0.
fn reap(pid: c_int, what: &str) -> Result<(), CmdError> {
    let mut status = 0;
    // SAFETY: `status` is a writable int; `pid` is our child.
    if unsafe { waitpid(pid, &mut status, 0) } < 0 {
        return Err(last_os(what));
    }
    if status != 0 {
        return Err(CmdError::Check(format!(
            "{what}: the child process failed (status {status:#x})"
        )));
    }
    Ok(())
}

/// Forks; the child runs `child` and exits with its status.
fn spawn(child: impl FnOnce() -> bool) -> Result<c_int, CmdError> {
    // SAFETY: simctl scripts fork only with no background statement
    // running; the child uses only what it inherited and exits with `_exit`.
    let pid = unsafe { fork() };
    if pid < 0 {
        return Err(last_os("fork"));
    }
    if pid == 0 {
        let ok = child();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { _exit(if ok { 0 } else { 1 }) };
    }
    Ok(pid)
}

/// `fork COMMAND...`: a forked child (sharing the control files) runs the
/// command; the parent waits for it.
/// Faults in and locks every page mapped now (the binary, its libraries,
/// the heap): from here on this process's own code and data need no read
/// from the root filesystem (9p in the bench VM, whose buffers are order-7
/// allocations), so page allocation faults injected into this process hit
/// only the allocations of the kernel paths it calls.
pub fn lock_memory() -> Result<(), CmdError> {
    // SAFETY: mlockall(2) takes a flags word and touches no memory of ours
    // beyond faulting in our own mappings.
    if unsafe { mlockall(MCL_CURRENT) } != 0 {
        return Err(last_os("mlockall"));
    }
    Ok(())
}

pub fn fork_run(dev: &Devices, words: &[String], out: &dyn Fn(String)) -> Result<(), CmdError> {
    if words.is_empty() {
        return Err(CmdError::Usage("fork COMMAND...".into()));
    }
    let pid = spawn(
        || match cmd::run(dev, words, &|l| out(format!("[child] {l}"))) {
            Ok(_) => true,
            Err(e) => {
                eprintln!("[child] simctl: {}: {e}", words.join(" "));
                false
            }
        },
    )?;
    out(format!("forked pid={pid}: {}", words.join(" ")));
    reap(pid, "fork")
}

/// `exec STMT [+ STMT]...`: this process replaces its image with simctl's
/// own (execve: the same process, alive) and runs the statements there.
/// The core control file stays open across the exec, adopted there; every
/// other file is closed by it (simctl opens all close-on-exec, as libcuda
/// opens the nvidia device files), so the GPU simulator sees this process's
/// control file closed while the process lives on.
pub fn exec(dev: &Devices, words: &[String]) -> Result<(), CmdError> {
    use std::os::unix::process::CommandExt;
    let fd = dev
        .get(Sim::Core)
        .map_err(|e| CmdError::Os(e.raw_os_error().unwrap_or(5), "exec".into()))?
        .as_raw_fd();
    // SAFETY: clears FD_CLOEXEC on an fd this process owns.
    if unsafe { fcntl(fd, F_SETFD, 0 as c_int) } < 0 {
        return Err(last_os("fcntl"));
    }
    let script = format!("adopt core {fd}; {}", words.join(" ").replace(" + ", "; "));
    let e = std::process::Command::new("/proc/self/exe")
        .arg("run")
        .arg(script)
        .exec();
    Err(CmdError::Os(e.raw_os_error().unwrap_or(5), "exec".into()))
}

/// `handoff gpu|core`: a forked child closes the last reference to the
/// control file, after the parent closed its own.
pub fn handoff(dev: &Devices, sim: Sim) -> Result<(), CmdError> {
    let fd = dev
        .get(sim)
        .map_err(|e| CmdError::Os(e.raw_os_error().unwrap_or(5), "handoff".into()))?
        .as_raw_fd();
    let mut p = [0 as c_int; 2];
    // SAFETY: `p` holds two ints.
    if unsafe { pipe(p.as_mut_ptr()) } < 0 {
        return Err(last_os("pipe"));
    }
    let pid = spawn(|| {
        let mut b = 0u8;
        // SAFETY: plain fds of this process; `b` is one writable byte.
        unsafe {
            close(p[1]);
            read(p[0], (&raw mut b).cast(), 1);
            close(fd) == 0
        }
    })?;
    dev.close(sim);
    // SAFETY: plain fds of this process.
    unsafe {
        close(p[0]);
        write(p[1], b"g".as_ptr().cast(), 1);
        close(p[1]);
    }
    reap(pid, "handoff")
}

/// `send-fd gpu|core`: the control file is passed over a unix socket to a
/// child that inherited no copy of it (it closes what it inherited first);
/// the parent closes its own; the child then closes the last reference.
pub fn send_fd(dev: &Devices, sim: Sim) -> Result<(), CmdError> {
    let fd = dev
        .get(sim)
        .map_err(|e| CmdError::Os(e.raw_os_error().unwrap_or(5), "send-fd".into()))?
        .as_raw_fd();
    let inherited: Vec<c_int> = [Sim::Gpu, Sim::Core]
        .iter()
        .filter_map(|&s| dev.raw_fd(s))
        .collect();
    let mut sv = [0 as c_int; 2];
    // SAFETY: `sv` holds two ints.
    if unsafe { socketpair(AF_UNIX, SOCK_STREAM, 0, sv.as_mut_ptr()) } < 0 {
        return Err(last_os("socketpair"));
    }
    let pid = spawn(|| {
        // SAFETY: plain fds of this process; the message buffers below are
        // valid for recvmsg/read.
        unsafe {
            for &f in &inherited {
                close(f);
            }
            close(sv[0]);
            let mut b = 0u8;
            let mut iov = IoVec {
                base: (&raw mut b).cast(),
                len: 1,
            };
            let mut cm = CmsgFd {
                len: 0,
                level: 0,
                ty: 0,
                fd: -1,
                pad: 0,
            };
            let mut msg = MsgHdr {
                name: std::ptr::null_mut(),
                namelen: 0,
                iov: &mut iov,
                iovlen: 1,
                control: (&raw mut cm).cast(),
                controllen: std::mem::size_of::<CmsgFd>(),
                flags: 0,
            };
            if recvmsg(sv[1], &mut msg, 0) != 1 || cm.level != SOL_SOCKET || cm.ty != SCM_RIGHTS {
                return false;
            }
            println!(
                "[receiver] got the {} control file as fd {}",
                sim.name(),
                cm.fd
            );
            // Wait until the sender closed its copy.
            read(sv[1], (&raw mut b).cast(), 1);
            close(cm.fd) == 0
        }
    })?;
    let mut b = b'f';
    let mut iov = IoVec {
        base: (&raw mut b).cast(),
        len: 1,
    };
    let mut cm = CmsgFd {
        len: 16 + 4,
        level: SOL_SOCKET,
        ty: SCM_RIGHTS,
        fd,
        pad: 0,
    };
    let msg = MsgHdr {
        name: std::ptr::null_mut(),
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: (&raw mut cm).cast(),
        controllen: std::mem::size_of::<CmsgFd>(),
        flags: 0,
    };
    // SAFETY: `msg` and what it points to are valid for the call.
    let sent = unsafe { sendmsg(sv[0], &msg, 0) };
    if sent != 1 {
        let e = last_os("sendmsg");
        reap(pid, "send-fd").ok();
        return Err(e);
    }
    dev.close(sim);
    // SAFETY: plain fds of this process.
    unsafe {
        close(sv[1]);
        write(sv[0], b"g".as_ptr().cast(), 1);
        close(sv[0]);
    }
    reap(pid, "send-fd")
}
