//! Owned handles over the verbs objects: each handle keeps its parents
//! alive (an MR its PD, a PD its device context) and releases itself on
//! drop, so teardown order is always right.

pub mod ffi;
mod qp;
mod status;

pub use qp::Qp;
pub(crate) use qp::{post_recv, post_send};
pub use status::{errno_name, errno_text, wc_status_name, Step};

use ffi::{Gid, Ptr, Verbs};
use std::ffi::CStr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A failed verbs call: which call, and its errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsError {
    pub call: &'static str,
    pub errno: i32,
}

impl std::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.call, errno_text(self.errno))
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Return codes of verbs calls are either -1 with errno or the errno.
fn rc_errno(rc: i32) -> i32 {
    if rc > 0 {
        rc
    } else {
        let e = last_errno();
        if e == 0 {
            libc::EIO
        } else {
            e
        }
    }
}

/// Names of the RDMA devices libibverbs sees.
pub fn device_names() -> Result<Vec<String>, String> {
    let v = Verbs::get()?;
    let mut n = 0;
    // SAFETY: ibv_get_device_list writes the count and returns a
    // NULL-terminated array that we free below.
    let list = unsafe { (v.get_device_list)(&mut n) };
    if list.is_null() {
        let e = last_errno();
        // ENOSYS: the kernel has no user verbs (ib_uverbs): no devices.
        if e == libc::ENOSYS {
            return Ok(Vec::new());
        }
        return Err(format!("ibv_get_device_list failed: {}", errno_text(e)));
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: i < n entries of the array; each is a valid device whose
        // name is a NUL-terminated string owned by the library.
        unsafe {
            let dev = *list.add(i);
            let name = (v.get_device_name)(dev);
            if !name.is_null() {
                names.push(CStr::from_ptr(name).to_string_lossy().into_owned());
            }
        }
    }
    // SAFETY: the list came from ibv_get_device_list.
    unsafe { (v.free_device_list)(list) };
    names.sort();
    Ok(names)
}

struct CtxInner {
    ptr: Ptr,
    /// False for contexts librdmacm opened and owns.
    owned: bool,
}

impl Drop for CtxInner {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Ok(v) = Verbs::get() {
            // SAFETY: opened by ibv_open_device; every child holds an Rc
            // to this, so all of them are gone.
            unsafe { (v.close_device)(self.ptr) };
        }
    }
}

/// An open device (`ibv_context`).
#[derive(Clone)]
pub struct Context {
    inner: Rc<CtxInner>,
    pub name: String,
}

/// Port facts used to connect QPs.
#[derive(Debug, Clone, Copy)]
pub struct PortInfo {
    pub state: u32,
    pub active_mtu: u32,
    pub lid: u16,
    pub link_layer: u8,
    pub max_msg_sz: u32,
}

impl Context {
    pub fn open(name: &str) -> Result<Context, String> {
        let v = Verbs::get()?;
        let mut n = 0;
        // SAFETY: as in device_names.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(format!(
                "ibv_get_device_list failed: {}",
                errno_text(last_errno())
            ));
        }
        let mut ctx: Ptr = std::ptr::null_mut();
        let mut found = false;
        for i in 0..n.max(0) as usize {
            // SAFETY: i < n; see device_names.
            unsafe {
                let dev = *list.add(i);
                let dn = (v.get_device_name)(dev);
                if !dn.is_null() && CStr::from_ptr(dn).to_string_lossy() == name {
                    found = true;
                    ctx = (v.open_device)(dev);
                    break;
                }
            }
        }
        let err = last_errno();
        // SAFETY: the list came from ibv_get_device_list; the opened
        // context stays valid after the list is freed.
        unsafe { (v.free_device_list)(list) };
        if !found {
            return Err(format!("no RDMA device named '{name}'"));
        }
        if ctx.is_null() {
            return Err(format!(
                "ibv_open_device({name}) failed: {}",
                errno_text(err)
            ));
        }
        Ok(Context {
            inner: Rc::new(CtxInner {
                ptr: ctx,
                owned: true,
            }),
            name: name.to_string(),
        })
    }

    /// Wraps a context that librdmacm opened (it stays owned by the library).
    pub(crate) fn borrowed(ptr: Ptr, name: String) -> Context {
        Context {
            inner: Rc::new(CtxInner { ptr, owned: false }),
            name,
        }
    }

    pub fn ptr(&self) -> Ptr {
        self.inner.ptr
    }

    /// The device's name as libibverbs reports it.
    pub fn device_name(&self) -> String {
        let Ok(v) = Verbs::get() else {
            return self.name.clone();
        };
        // SAFETY: struct ibv_context starts with its ibv_device pointer.
        let dev = unsafe { *(self.ptr() as *const Ptr) };
        if dev.is_null() {
            return self.name.clone();
        }
        // SAFETY: a live device; the name is a NUL-terminated string.
        unsafe {
            let n = (v.get_device_name)(dev);
            if n.is_null() {
                self.name.clone()
            } else {
                CStr::from_ptr(n).to_string_lossy().into_owned()
            }
        }
    }

    pub fn query_port(&self, port: u8) -> Result<PortInfo, VerbsError> {
        let v = Verbs::get().map_err(|_| VerbsError {
            call: "ibv_query_port",
            errno: libc::ENOSYS,
        })?;
        // SAFETY: PortAttr is plain data; all-zero is a valid value.
        let mut attr: ffi::PortAttr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context; attr is larger than any library's struct.
        let rc = unsafe { (v.query_port)(self.ptr(), port, &mut attr) };
        if rc != 0 {
            return Err(VerbsError {
                call: "ibv_query_port",
                errno: rc_errno(rc),
            });
        }
        Ok(PortInfo {
            state: attr.state,
            active_mtu: attr.active_mtu,
            lid: attr.lid,
            link_layer: attr.link_layer,
            max_msg_sz: attr.max_msg_sz,
        })
    }

    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid, VerbsError> {
        let v = Verbs::get().map_err(|_| VerbsError {
            call: "ibv_query_gid",
            errno: libc::ENOSYS,
        })?;
        let mut gid = Gid::default();
        // SAFETY: valid context and a 16-byte GID to write.
        let rc = unsafe { (v.query_gid)(self.ptr(), port, index as i32, &mut gid) };
        if rc != 0 {
            return Err(VerbsError {
                call: "ibv_query_gid",
                errno: rc_errno(rc),
            });
        }
        Ok(gid)
    }

    pub fn alloc_pd(&self) -> Result<Rc<Pd>, VerbsError> {
        let v = Verbs::get().map_err(|_| VerbsError {
            call: "ibv_alloc_pd",
            errno: libc::ENOSYS,
        })?;
        // SAFETY: valid context.
        let pd = unsafe { (v.alloc_pd)(self.ptr()) };
        if pd.is_null() {
            return Err(VerbsError {
                call: "ibv_alloc_pd",
                errno: last_errno(),
            });
        }
        Ok(Rc::new(Pd {
            ptr: pd,
            ctx: self.clone(),
        }))
    }

    pub fn create_cq(&self, entries: i32) -> Result<Rc<Cq>, VerbsError> {
        let v = Verbs::get().map_err(|_| VerbsError {
            call: "ibv_create_cq",
            errno: libc::ENOSYS,
        })?;
        let null = std::ptr::null_mut();
        // SAFETY: valid context; no completion channel.
        let cq = unsafe { (v.create_cq)(self.ptr(), entries, null, null, 0) };
        if cq.is_null() {
            return Err(VerbsError {
                call: "ibv_create_cq",
                errno: last_errno(),
            });
        }
        Ok(Rc::new(Cq {
            ptr: cq,
            ctx: self.clone(),
        }))
    }
}

/// A protection domain.
pub struct Pd {
    ptr: Ptr,
    ctx: Context,
}

impl Drop for Pd {
    fn drop(&mut self) {
        if let Ok(v) = Verbs::get() {
            // SAFETY: allocated by ibv_alloc_pd; MRs and QPs hold Arcs to it.
            unsafe { (v.dealloc_pd)(self.ptr) };
        }
    }
}

/// Remote access for every MR of this tool: the loopback peer writes into it.
pub const MR_ACCESS: i32 =
    ffi::ACCESS_LOCAL_WRITE | ffi::ACCESS_REMOTE_WRITE | ffi::ACCESS_REMOTE_READ;

impl Pd {
    pub fn ptr(&self) -> Ptr {
        self.ptr
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// `ibv_reg_mr` over `len` bytes at virtual address `addr` (host or GPU).
    pub fn reg_mr(self: &Rc<Self>, addr: u64, len: usize) -> Result<Mr, VerbsError> {
        let v = Verbs::get().map_err(|_| VerbsError {
            call: "ibv_reg_mr",
            errno: libc::ENOSYS,
        })?;
        // SAFETY: the kernel validates the range; the owners in memory.rs keep
        // the memory alive longer than the Mr (they drop the Mr first).
        let mr = unsafe { (v.reg_mr)(self.ptr, addr as Ptr, len, MR_ACCESS) };
        if mr.is_null() {
            return Err(VerbsError {
                call: "ibv_reg_mr",
                errno: last_errno(),
            });
        }
        Ok(Mr {
            ptr: mr,
            _pd: self.clone(),
        })
    }

    /// `ibv_reg_dmabuf_mr` over `len` bytes of dma-buf `fd` mapped at `iova`.
    pub fn reg_dmabuf_mr(
        self: &Rc<Self>,
        fd: i32,
        len: usize,
        iova: u64,
    ) -> Result<Mr, VerbsError> {
        let call = "ibv_reg_dmabuf_mr";
        let v = Verbs::get().map_err(|_| VerbsError {
            call,
            errno: libc::ENOSYS,
        })?;
        let Some(f) = v.reg_dmabuf_mr else {
            return Err(VerbsError {
                call,
                errno: libc::EOPNOTSUPP,
            });
        };
        // SAFETY: the kernel validates the fd and range.
        let mr = unsafe { f(self.ptr, 0, len, iova, fd, MR_ACCESS) };
        if mr.is_null() {
            return Err(VerbsError {
                call,
                errno: last_errno(),
            });
        }
        Ok(Mr {
            ptr: mr,
            _pd: self.clone(),
        })
    }
}

impl Pd {
    /// Whether the device takes dma-buf MRs, probed as NCCL does: register
    /// a zero-length range of fd -1; a device and kernel with dma-buf MR
    /// support reject the fd (EBADF), others the call (EOPNOTSUPP /
    /// EPROTONOSUPPORT; a libibverbs without the symbol: no support).
    pub fn dmabuf_mr_supported(self: &Rc<Self>) -> bool {
        let Ok(v) = Verbs::get() else { return false };
        let Some(f) = v.reg_dmabuf_mr else {
            return false;
        };
        // SAFETY: fd -1 is rejected by the kernel before anything is mapped;
        // a non-NULL result (never expected) is a valid MR we deregister.
        let mr = unsafe { f(self.ptr, 0, 0, 0, -1, 0) };
        if !mr.is_null() {
            // SAFETY: just registered above, deregistered once.
            unsafe { (v.dereg_mr)(mr) };
            return true;
        }
        !dmabuf_unsupported_errno(last_errno())
    }
}

/// The errnos by which a device or kernel says "no dma-buf MRs":
/// EOPNOTSUPP (ib_uverbs without the driver's op, mlx5 without on-demand
/// paging, libibverbs' stub for a provider without the op),
/// EPROTONOSUPPORT (a kernel whose uverbs lacks the method), ENOSYS and the
/// kernel-internal ENOTSUPP (524).
pub fn dmabuf_unsupported_errno(e: i32) -> bool {
    matches!(
        e,
        libc::EOPNOTSUPP | libc::EPROTONOSUPPORT | libc::ENOSYS | 524
    )
}

/// A memory region.
pub struct Mr {
    ptr: *mut ffi::Mr,
    _pd: Rc<Pd>,
}

impl Mr {
    pub fn lkey(&self) -> u32 {
        // SAFETY: ptr is a live ibv_mr.
        unsafe { (*self.ptr).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: ptr is a live ibv_mr.
        unsafe { (*self.ptr).rkey }
    }

    /// Deregisters now and reports the result (drop ignores it).
    pub fn dereg(mut self) -> Result<(), VerbsError> {
        let p = std::mem::replace(&mut self.ptr, std::ptr::null_mut());
        let v = Verbs::get().map_err(|_| VerbsError {
            call: "ibv_dereg_mr",
            errno: libc::ENOSYS,
        })?;
        // SAFETY: p came from ibv_reg_mr and is deregistered once.
        let rc = unsafe { (v.dereg_mr)(p) };
        if rc != 0 {
            return Err(VerbsError {
                call: "ibv_dereg_mr",
                errno: rc_errno(rc),
            });
        }
        Ok(())
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        if let Ok(v) = Verbs::get() {
            // SAFETY: registered by this Mr, deregistered once.
            unsafe { (v.dereg_mr)(self.ptr) };
        }
    }
}

/// A completion queue.
pub struct Cq {
    ptr: Ptr,
    ctx: Context,
}

impl Drop for Cq {
    fn drop(&mut self) {
        if let Ok(v) = Verbs::get() {
            // SAFETY: created by ibv_create_cq; QPs using it hold Arcs.
            unsafe { (v.destroy_cq)(self.ptr) };
        }
    }
}

/// A completion with an error status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WcError {
    pub status: u32,
    pub wr_id: u64,
    /// The provider's own code for the error (`ibv_wc.vendor_err`).
    pub vendor_err: u32,
}

/// Why polling ended without a good completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollError {
    Wc(WcError),
    Verbs(VerbsError),
    Timeout(Duration),
}

impl Cq {
    pub fn ptr(&self) -> Ptr {
        self.ptr
    }

    /// Busy-polls until `want` successful completions arrived; returns
    /// their wr_ids.
    pub fn wait(&self, want: usize, timeout: Duration) -> Result<Vec<u64>, PollError> {
        // SAFETY: ibv_context starts with the device pointer, then the ops table
        // whose poll_cq entry every provider sets for every context.
        let poll: ffi::PollCqFn = unsafe {
            *((self.ctx.ptr() as *const u8).add(ffi::CTX_OPS + ffi::OPS_POLL_CQ)
                as *const ffi::PollCqFn)
        };
        let start = Instant::now();
        let mut done = Vec::with_capacity(want);
        let mut wc = [ffi::Wc::default(); 16];
        while done.len() < want {
            // SAFETY: valid CQ, room for 16 completions.
            let n = unsafe { poll(self.ptr, wc.len() as i32, wc.as_mut_ptr()) };
            if n < 0 {
                return Err(PollError::Verbs(VerbsError {
                    call: "ibv_poll_cq",
                    errno: rc_errno(-n),
                }));
            }
            for w in &wc[..n as usize] {
                if w.status != 0 {
                    return Err(PollError::Wc(WcError {
                        status: w.status,
                        wr_id: w.wr_id,
                        vendor_err: w.vendor_err,
                    }));
                }
                done.push(w.wr_id);
            }
            if n == 0 {
                if start.elapsed() > timeout {
                    return Err(PollError::Timeout(timeout));
                }
                std::hint::spin_loop();
                if start.elapsed() > Duration::from_millis(2) {
                    std::thread::yield_now();
                }
            }
        }
        Ok(done)
    }
}
