//! A dma-buf of host memory, made by the kernel's udmabuf driver: a
//! sealed memfd handed to `/dev/udmabuf` with the `UDMABUF_CREATE` ioctl.
//! It lets a tool without a GPU ask an RDMA device whether it takes
//! dma-buf memory regions at all (`ibv_reg_dmabuf_mr`).
//!
//! uAPI (include/uapi/linux/udmabuf.h, stable since 4.20): the memfd must
//! carry `F_SEAL_SHRINK` and must not carry `F_SEAL_WRITE`; offset and size
//! are page multiples; the ioctl returns the new dma-buf's fd.

use std::ffi::c_int;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `struct udmabuf_create` of include/uapi/linux/udmabuf.h.
#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

/// `UDMABUF_FLAGS_CLOEXEC`.
const UDMABUF_FLAGS_CLOEXEC: u32 = 0x01;

/// `_IOW('u', 0x42, struct udmabuf_create)`: write direction (1 << 30), the
/// argument's size (24) in bits 16..29, type 'u', number 0x42.
const UDMABUF_CREATE: libc::c_ulong =
    (1 << 30) | (24 << 16) | ((b'u' as libc::c_ulong) << 8) | 0x42;

/// The device node udmabuf registers (misc device "udmabuf").
pub const DEV_UDMABUF: &str = "/dev/udmabuf";

/// Which step of making the buffer failed, and its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdmabufError {
    /// "memfd_create", "ftruncate", "F_ADD_SEALS", "open /dev/udmabuf" or
    /// "UDMABUF_CREATE".
    pub step: &'static str,
    pub errno: i32,
}

impl std::fmt::Display for UdmabufError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed: {}",
            self.step,
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A dma-buf over `len` bytes of a memfd.
///
/// # Invariants
///
/// `dmabuf` is a dma-buf fd of exactly `len` bytes (a page multiple) whose
/// pages are those of `memfd`; both fds are owned and closed on drop.
pub struct HostDmabuf {
    _memfd: OwnedFd,
    dmabuf: OwnedFd,
    len: usize,
}

impl HostDmabuf {
    /// A new dma-buf of `pages` pages of zeroed host memory.
    pub fn new(pages: usize) -> Result<HostDmabuf, UdmabufError> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = if page > 0 { page as usize } else { 4096 };
        let len = pages.max(1) * page;
        let fail = |step| UdmabufError {
            step,
            errno: errno(),
        };
        // memfd_create(2): a non-negative result is a new fd no one else owns.
        // SAFETY: the name is NUL-terminated and short; the flags are MFD_*.
        let fd = unsafe {
            libc::memfd_create(
                c"peermem-probe".as_ptr(),
                libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(fail("memfd_create"));
        }
        // SAFETY: fd was just returned by memfd_create and is owned by no
        // one else.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate(2) on an fd we own; the length fits off_t.
        if unsafe { libc::ftruncate(memfd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(fail("ftruncate"));
        }
        // SAFETY: fcntl(2) F_ADD_SEALS takes an int seal mask; the memfd was
        // made with MFD_ALLOW_SEALING.
        if unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
            return Err(fail("F_ADD_SEALS"));
        }
        // SAFETY: open(2) with a NUL-terminated path; a non-negative result
        // is a new fd we own.
        let dev = unsafe { libc::open(c"/dev/udmabuf".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if dev < 0 {
            return Err(fail("open /dev/udmabuf"));
        }
        // SAFETY: dev was just returned by open and is owned by no one else.
        let dev = unsafe { OwnedFd::from_raw_fd(dev) };
        let req = UdmabufCreate {
            memfd: memfd.as_raw_fd() as u32,
            flags: UDMABUF_FLAGS_CLOEXEC,
            offset: 0,
            size: len as u64,
        };
        // UDMABUF_CREATE copies one struct udmabuf_create (24 bytes, layout
        // pinned by the test below) and returns a new dma-buf fd or -1.
        // SAFETY: the pointer is to `req`, live for the whole call.
        let buf = unsafe {
            libc::ioctl(
                dev.as_raw_fd(),
                UDMABUF_CREATE,
                &req as *const UdmabufCreate,
            )
        };
        if buf < 0 {
            return Err(fail("UDMABUF_CREATE"));
        }
        // SAFETY: buf was just returned by the ioctl and is owned by no one
        // else.
        let dmabuf = unsafe { OwnedFd::from_raw_fd(buf as c_int) };
        Ok(HostDmabuf {
            _memfd: memfd,
            dmabuf,
            len,
        })
    }

    /// The dma-buf's fd (valid while `self` lives).
    pub fn fd(&self) -> RawFd {
        self.dmabuf.as_raw_fd()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn uapi_layout_and_ioctl_number() {
        assert_eq!(size_of::<UdmabufCreate>(), 24);
        // The value of UDMABUF_CREATE as the C headers compute it on Linux
        // (asm-generic ioctl.h: dir 1 = write, at bit 30).
        assert_eq!(UDMABUF_CREATE, 0x4018_7542);
    }

    /// Where the host has /dev/udmabuf and may open it, the buffer is made
    /// at a page multiple; where not, the error names the open step.
    #[test]
    fn made_or_refused_at_open() {
        match HostDmabuf::new(1) {
            Ok(b) => {
                assert!(b.fd() >= 0);
                assert!(!b.is_empty() && b.len() % 4096 == 0, "{}", b.len());
            }
            Err(e) => assert!(
                e.step == "open /dev/udmabuf" || e.step == "UDMABUF_CREATE",
                "{e}"
            ),
        }
    }
}
