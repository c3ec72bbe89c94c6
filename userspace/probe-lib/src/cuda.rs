//! The CUDA driver API through cudarc's dynamically loaded bindings:
//! device discovery, cuMemAlloc'd buffers, and dma-buf export. Every entry
//! is guarded: a missing libcuda or a library without the needed symbols
//! becomes an error value, never a panic.

use cudarc::driver::sys as cu;
use serde::Serialize;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::rc::Rc;
use std::sync::OnceLock;

/// A failed CUDA call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaError {
    pub call: &'static str,
    pub code: u32,
    pub name: String,
}

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name, self.code)
    }
}

/// Runs `f`, turning a panic inside cudarc (missing library or symbol)
/// into an error without printing anything.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(prev);
    r.map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown error".into())
    })
}

fn err_name(code: cu::CUresult) -> String {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string.
    let rc = guarded(|| unsafe { cu::cuGetErrorName(code, &mut p) });
    if matches!(rc, Ok(cu::CUresult::CUDA_SUCCESS)) && !p.is_null() {
        // SAFETY: NUL-terminated static string from the driver.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("CUDA error {}", code as u32)
    }
}

fn check(call: &'static str, r: Result<cu::CUresult, String>) -> Result<(), CudaError> {
    match r {
        Ok(cu::CUresult::CUDA_SUCCESS) => Ok(()),
        Ok(code) => Err(CudaError {
            call,
            code: code as u32,
            name: err_name(code),
        }),
        Err(msg) => Err(CudaError {
            call,
            code: 999,
            name: msg,
        }),
    }
}

/// One GPU as CUDA sees it.
#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    pub ordinal: i32,
    pub name: String,
    /// `0000:3b:00.0`, lowercase, as in sysfs.
    pub pci_bus_id: String,
    pub dma_buf_supported: bool,
}

/// What loading CUDA gave.
#[derive(Debug, Clone)]
pub enum CudaState {
    /// No libcuda.so on this system.
    Missing,
    /// libcuda is there but unusable (too old, cuInit failed, ...).
    Broken(CudaError),
    Ready {
        driver_version: i32,
        gpus: Vec<Gpu>,
    },
}

fn load() -> CudaState {
    // SAFETY: is_culib_present only tries dlopen on candidate names.
    match guarded(|| unsafe { cu::is_culib_present() }) {
        Ok(false) => return CudaState::Missing,
        Ok(true) => {}
        Err(msg) => {
            return CudaState::Broken(CudaError {
                call: "loading libcuda",
                code: 999,
                name: format!(
                "the library lacks CUDA 12.0 driver API symbols (driver older than R525?): {msg}"
            ),
            })
        }
    }
    // SAFETY: plain driver API calls with valid out-pointers.
    if let Err(e) = check("cuInit", guarded(|| unsafe { cu::cuInit(0) })) {
        return CudaState::Broken(e);
    }
    let mut ver: c_int = 0;
    let _ = check(
        "cuDriverGetVersion",
        // SAFETY: out-pointer to a c_int.
        guarded(|| unsafe { cu::cuDriverGetVersion(&mut ver) }),
    );
    let mut n: c_int = 0;
    if let Err(e) = check(
        "cuDeviceGetCount",
        // SAFETY: out-pointer to a c_int.
        guarded(|| unsafe { cu::cuDeviceGetCount(&mut n) }),
    ) {
        return CudaState::Broken(e);
    }
    let mut gpus = Vec::new();
    for ordinal in 0..n {
        let mut dev: cu::CUdevice = 0;
        if check(
            "cuDeviceGet",
            // SAFETY: ordinal < count; out-pointer.
            guarded(|| unsafe { cu::cuDeviceGet(&mut dev, ordinal) }),
        )
        .is_err()
        {
            continue;
        }
        let mut name = [0 as c_char; 256];
        let mut bus = [0 as c_char; 64];
        let mut dmabuf: c_int = 0;
        // SAFETY: buffers of the given lengths; out-pointer for the attribute.
        let _ = guarded(|| unsafe {
            cu::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev);
            cu::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, dev);
            cu::cuDeviceGetAttribute(
                &mut dmabuf,
                cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
                dev,
            );
        });
        // SAFETY: the driver NUL-terminates both (buffers start zeroed).
        let (name, bus) = unsafe {
            (
                CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
                crate::pci::normalize_bdf(&CStr::from_ptr(bus.as_ptr()).to_string_lossy()),
            )
        };
        gpus.push(Gpu {
            ordinal,
            name,
            pci_bus_id: bus,
            dma_buf_supported: dmabuf != 0,
        });
    }
    CudaState::Ready {
        driver_version: ver,
        gpus,
    }
}

/// CUDA, loaded and initialised once per process.
pub fn state() -> &'static CudaState {
    static S: OnceLock<CudaState> = OnceLock::new();
    S.get_or_init(load)
}

/// A GPU's primary context, current on this thread while buffers use it.
pub struct GpuCtx {
    dev: cu::CUdevice,
    ctx: cu::CUcontext,
}

impl GpuCtx {
    pub fn open(ordinal: i32) -> Result<Rc<GpuCtx>, CudaError> {
        let mut dev: cu::CUdevice = 0;
        check(
            "cuDeviceGet",
            // SAFETY: out-pointer; ordinal comes from the device list.
            guarded(|| unsafe { cu::cuDeviceGet(&mut dev, ordinal) }),
        )?;
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        check(
            "cuDevicePrimaryCtxRetain",
            // SAFETY: out-pointer for the retained primary context.
            guarded(|| unsafe { cu::cuDevicePrimaryCtxRetain(&mut ctx, dev) }),
        )?;
        let g = Rc::new(GpuCtx { dev, ctx });
        g.make_current()?;
        Ok(g)
    }

    fn make_current(&self) -> Result<(), CudaError> {
        let ctx = self.ctx;
        check(
            "cuCtxSetCurrent",
            // SAFETY: a retained primary context.
            guarded(|| unsafe { cu::cuCtxSetCurrent(ctx) }),
        )
    }

    /// cuMemAlloc of `size` rounded up to 64 KiB, with SYNC_MEMOPS set so
    /// that copies and RDMA writes are ordered.
    pub fn alloc(self: &Rc<Self>, size: usize) -> Result<GpuBuf, CudaError> {
        self.make_current()?;
        let size = size.div_ceil(64 << 10) * (64 << 10);
        let mut ptr: cu::CUdeviceptr = 0;
        check(
            "cuMemAlloc",
            // SAFETY: out-pointer; the context is current.
            guarded(|| unsafe { cu::cuMemAlloc_v2(&mut ptr, size) }),
        )?;
        let buf = GpuBuf {
            ptr,
            size,
            ctx: self.clone(),
        };
        let mut one: u32 = 1;
        check(
            "cuPointerSetAttribute(SYNC_MEMOPS)",
            // SAFETY: the attribute takes a pointer to an unsigned int flag.
            guarded(|| unsafe {
                cu::cuPointerSetAttribute(
                    &mut one as *mut u32 as *const c_void,
                    cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                    ptr,
                )
            }),
        )?;
        Ok(buf)
    }
}

impl Drop for GpuCtx {
    fn drop(&mut self) {
        let dev = self.dev;
        // SAFETY: releases the retain taken in open.
        let _ = guarded(|| unsafe { cu::cuDevicePrimaryCtxRelease_v2(dev) });
    }
}

/// Device memory from cuMemAlloc.
pub struct GpuBuf {
    ptr: cu::CUdeviceptr,
    size: usize,
    ctx: Rc<GpuCtx>,
}

impl GpuBuf {
    pub fn addr(&self) -> u64 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    pub fn upload(&self, data: &[u8]) -> Result<(), CudaError> {
        self.ctx.make_current()?;
        let (p, n) = (self.ptr, data.len().min(self.size));
        check(
            "cuMemcpyHtoD",
            // SAFETY: n bytes from a host slice into this allocation.
            guarded(|| unsafe { cu::cuMemcpyHtoD_v2(p, data.as_ptr() as *const c_void, n) }),
        )
    }

    pub fn download(&self, out: &mut [u8]) -> Result<(), CudaError> {
        self.ctx.make_current()?;
        let (p, n) = (self.ptr, out.len().min(self.size));
        check(
            "cuMemcpyDtoH",
            // SAFETY: n bytes from this allocation into a host slice.
            guarded(|| unsafe { cu::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, p, n) }),
        )
    }

    /// Exports the allocation as a dma-buf file descriptor.
    pub fn export_dmabuf(&self) -> Result<std::os::fd::OwnedFd, CudaError> {
        use std::os::fd::FromRawFd;
        self.ctx.make_current()?;
        let mut fd: c_int = -1;
        let (p, n) = (self.ptr, self.size);
        check(
            "cuMemGetHandleForAddressRange",
            // SAFETY: the handle out-parameter of the DMA_BUF_FD type is an int.
            guarded(|| unsafe {
                cu::cuMemGetHandleForAddressRange(
                    &mut fd as *mut c_int as *mut c_void,
                    p,
                    n,
                    cu::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            }),
        )?;
        // SAFETY: on success the driver returned a new descriptor we own.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }
}

impl Drop for GpuBuf {
    fn drop(&mut self) {
        let _ = self.ctx.make_current();
        let p = self.ptr;
        // SAFETY: allocated by cuMemAlloc, freed once; MRs over it are
        // dropped before (owners keep that order).
        let _ = guarded(|| unsafe { cu::cuMemFree_v2(p) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarded_turns_panics_into_errors() {
        assert_eq!(guarded(|| 5), Ok(5));
        let e = guarded(|| -> i32 { panic!("Expected symbol in library") }).unwrap_err();
        assert!(e.contains("Expected symbol"));
    }

    #[test]
    fn loading_never_panics() {
        // Whatever this host has (usually no libcuda), state() answers.
        match state() {
            CudaState::Missing | CudaState::Broken(_) => {}
            CudaState::Ready { gpus, .. } => {
                for g in gpus {
                    assert!(crate::pci::is_bdf(&g.pci_bus_id), "{}", g.pci_bus_id);
                }
            }
        }
    }
}
