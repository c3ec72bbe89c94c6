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

/// One GPU as CUDA sees it. The attributes are None when the driver does
/// not know them (older than the CUDA version that added them).
#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    pub ordinal: i32,
    pub name: String,
    /// `0000:3b:00.0`, lowercase, as in sysfs.
    pub pci_bus_id: String,
    /// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED.
    pub dma_buf_supported: bool,
    /// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED (GeForce parts: false).
    pub gpu_direct_rdma_supported: Option<bool>,
    /// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: cuMemCreate
    /// memory can be registered (NCCL's default allocator since 2.19).
    pub gpu_direct_rdma_with_vmm: Option<bool>,
    /// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS decoded:
    /// "host" (cuFlushGPUDirectRDMAWrites), "memops".
    pub flush_writes_options: Option<Vec<&'static str>>,
    /// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING decoded: "none",
    /// "owner", "all_devices".
    pub writes_ordering: Option<&'static str>,
    /// CU_DEVICE_ATTRIBUTE_INTEGRATED: the GPU shares the CPU's memory.
    pub integrated: Option<bool>,
    /// CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: the
    /// GPU walks the CPU's page tables (ATS over NVLink-C2C: Grace Hopper
    /// and Grace Blackwell).
    pub host_page_tables: Option<bool>,
    /// From the two above and the name (crate::platform).
    pub platform: crate::platform::Kind,
}

/// Decodes CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_* bits.
pub fn flush_options(bits: i32) -> Vec<&'static str> {
    let mut v = Vec::new();
    if bits & 1 != 0 {
        v.push("host");
    }
    if bits & 2 != 0 {
        v.push("memops");
    }
    v
}

/// Decodes CU_GPU_DIRECT_RDMA_WRITES_ORDERING_*.
pub fn writes_ordering(v: i32) -> &'static str {
    match v {
        0 => "none",
        100 => "owner",
        200 => "all_devices",
        _ => "unknown",
    }
}

/// How GPU memory was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Allocation {
    /// cuMemAlloc (what perftest --use_cuda uses).
    CuMemAlloc,
    /// cuMemCreate + cuMemMap (NCCL's default since 2.19).
    CuMemCreate,
}

impl Allocation {
    pub fn label(self) -> &'static str {
        match self {
            Allocation::CuMemAlloc => "cuMemAlloc",
            Allocation::CuMemCreate => "cuMemCreate",
        }
    }
}

/// An integer device attribute, None when the driver refuses it.
fn attribute(dev: cu::CUdevice, a: cu::CUdevice_attribute) -> Option<i32> {
    let mut v: c_int = 0;
    // SAFETY: out-pointer to a c_int; dev is a device handle from cuDeviceGet.
    let r = guarded(|| unsafe { cu::cuDeviceGetAttribute(&mut v, a, dev) });
    matches!(r, Ok(cu::CUresult::CUDA_SUCCESS)).then_some(v)
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
        // SAFETY: buffers of the given lengths.
        let _ = guarded(|| unsafe {
            cu::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev);
            cu::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, dev);
        });
        use cu::CUdevice_attribute as A;
        let dmabuf = attribute(dev, A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).unwrap_or(0);
        let gdr = attribute(dev, A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
        let vmm = attribute(
            dev,
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
        );
        let flush = attribute(
            dev,
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
        );
        let order = attribute(dev, A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING);
        let integrated = attribute(dev, A::CU_DEVICE_ATTRIBUTE_INTEGRATED).map(|v| v != 0);
        let hpt = attribute(
            dev,
            A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
        )
        .map(|v| v != 0);
        // SAFETY: the driver NUL-terminates both (buffers start zeroed).
        let (name, bus) = unsafe {
            (
                CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
                crate::bdf::normalize_bdf(&CStr::from_ptr(bus.as_ptr()).to_string_lossy()),
            )
        };
        crate::trace!(
            "GPU {ordinal} {name} {bus}: dma-buf {dmabuf}, GPUDirect RDMA {gdr:?}, with VMM {vmm:?}, flush {flush:?}, ordering {order:?}, integrated {integrated:?}, host page tables {hpt:?}"
        );
        let platform = crate::platform::classify(false, Some(&name), integrated, hpt);
        gpus.push(Gpu {
            ordinal,
            name,
            pci_bus_id: bus,
            dma_buf_supported: dmabuf != 0,
            gpu_direct_rdma_supported: gdr.map(|v| v != 0),
            gpu_direct_rdma_with_vmm: vmm.map(|v| v != 0),
            flush_writes_options: flush.map(flush_options),
            writes_ordering: order.map(writes_ordering),
            integrated,
            host_page_tables: hpt,
            platform,
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
            vmm: None,
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
        crate::trace!("cuMemAlloc {size} bytes at 0x{ptr:x}, SYNC_MEMOPS set");
        Ok(buf)
    }

    /// Memory as NCCL allocates it by default: cuMemCreate (pinned, on
    /// this device, GPUDirect-RDMA capable when the device says VMM
    /// memory supports it), a reserved VA range, cuMemMap and read/write
    /// access for this device. The size is rounded up to the granularity.
    pub fn alloc_vmm(
        self: &Rc<Self>,
        size: usize,
        rdma_capable: bool,
    ) -> Result<GpuBuf, CudaError> {
        self.make_current()?;
        // SAFETY: a plain C struct of integers and one pointer; all-zero is
        // its documented "no options" value.
        let mut prop: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.dev;
        prop.allocFlags.gpuDirectRDMACapable = rdma_capable as u8;
        let mut gran: usize = 0;
        check(
            "cuMemGetAllocationGranularity",
            // SAFETY: out-pointer and a filled-in property struct.
            guarded(|| unsafe {
                cu::cuMemGetAllocationGranularity(
                    &mut gran,
                    &prop,
                    cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            }),
        )?;
        let gran = gran.max(64 << 10);
        let size = size.max(1).div_ceil(gran) * gran;
        let mut handle: cu::CUmemGenericAllocationHandle = 0;
        check(
            "cuMemCreate",
            // SAFETY: out-pointer, size a multiple of the granularity, prop as above.
            guarded(|| unsafe { cu::cuMemCreate(&mut handle, size, &prop, 0) }),
        )?;
        let mut ptr: cu::CUdeviceptr = 0;
        if let Err(e) = check(
            "cuMemAddressReserve",
            // SAFETY: out-pointer; no fixed address, no flags.
            guarded(|| unsafe { cu::cuMemAddressReserve(&mut ptr, size, gran, 0, 0) }),
        ) {
            // SAFETY: the handle from cuMemCreate above, released once.
            let _ = guarded(|| unsafe { cu::cuMemRelease(handle) });
            return Err(e);
        }
        // From here Drop undoes whatever was done (unmap of an unmapped
        // range only fails, harmlessly).
        let buf = GpuBuf {
            ptr,
            size,
            vmm: Some(handle),
            ctx: self.clone(),
        };
        check(
            "cuMemMap",
            // SAFETY: the reserved range, the whole allocation from offset 0.
            guarded(|| unsafe { cu::cuMemMap(ptr, size, 0, handle, 0) }),
        )?;
        let desc = cu::CUmemAccessDesc {
            location: prop.location,
            flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        check(
            "cuMemSetAccess",
            // SAFETY: the mapped range and one access descriptor.
            guarded(|| unsafe { cu::cuMemSetAccess(ptr, size, &desc, 1) }),
        )?;
        crate::trace!(
            "cuMemCreate {size} bytes (granularity {gran}, gpuDirectRDMACapable {rdma_capable}) mapped at 0x{ptr:x}"
        );
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

/// Device memory from cuMemAlloc, or from cuMemCreate mapped at `ptr`.
pub struct GpuBuf {
    ptr: cu::CUdeviceptr,
    size: usize,
    /// The cuMemCreate handle (None: cuMemAlloc memory).
    vmm: Option<cu::CUmemGenericAllocationHandle>,
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
    pub fn allocation(&self) -> Allocation {
        if self.vmm.is_some() {
            Allocation::CuMemCreate
        } else {
            Allocation::CuMemAlloc
        }
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

    /// Exports the allocation as a dma-buf file descriptor. Like NCCL, it
    /// asks for a PCIe (BAR) mapping first
    /// (CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE, CUDA 12.8+) and falls
    /// back to the default mapping when the driver rejects the flag.
    /// Returns the descriptor and whether the PCIe flag was accepted.
    pub fn export_dmabuf(&self) -> Result<(std::os::fd::OwnedFd, bool), CudaError> {
        match self.export_dmabuf_flags(DMA_BUF_MAPPING_TYPE_PCIE) {
            Ok(fd) => Ok((fd, true)),
            Err(e) if e.code == 1 || e.code == 801 => {
                crate::trace!("dma-buf export with the PCIe mapping flag: {e}; retrying without");
                self.export_dmabuf_flags(0).map(|fd| (fd, false))
            }
            Err(e) => Err(e),
        }
    }

    fn export_dmabuf_flags(&self, flags: u64) -> Result<std::os::fd::OwnedFd, CudaError> {
        use std::os::fd::FromRawFd;
        self.ctx.make_current()?;
        let mut fd: c_int = -1;
        let (p, n) = (self.ptr, self.size);
        check(
            "cuMemGetHandleForAddressRange",
            // SAFETY: the handle out-parameter of the DMA_BUF_FD type is an int;
            // the range is this whole allocation.
            guarded(|| unsafe {
                cu::cuMemGetHandleForAddressRange(
                    &mut fd as *mut c_int as *mut c_void,
                    p,
                    n,
                    cu::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    flags,
                )
            }),
        )?;
        crate::trace!("dma-buf fd {fd} for 0x{p:x}+{n} (flags {flags})");
        // SAFETY: on success the driver returned a new descriptor we own.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }
}

/// CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (cuda.h 12.8+; not in the
/// 12.0 bindings).
pub const DMA_BUF_MAPPING_TYPE_PCIE: u64 = 1;

impl Drop for GpuBuf {
    fn drop(&mut self) {
        let _ = self.ctx.make_current();
        let (p, n) = (self.ptr, self.size);
        match self.vmm {
            // SAFETY: allocated by cuMemAlloc, freed once; MRs over it are
            // dropped before (owners keep that order).
            None => drop(guarded(|| unsafe { cu::cuMemFree_v2(p) })),
            Some(h) => {
                // SAFETY: the range reserved (and mapped) in alloc_vmm and the
                // handle created there, each undone once, in reverse order.
                let _ = guarded(|| unsafe { cu::cuMemUnmap(p, n) });
                // SAFETY: as above.
                let _ = guarded(|| unsafe { cu::cuMemAddressFree(p, n) });
                // SAFETY: as above.
                let _ = guarded(|| unsafe { cu::cuMemRelease(h) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_values_decode() {
        assert_eq!(flush_options(0), Vec::<&str>::new());
        assert_eq!(flush_options(3), ["host", "memops"]);
        assert_eq!(writes_ordering(100), "owner");
        assert_eq!(writes_ordering(200), "all_devices");
        assert_eq!(writes_ordering(0), "none");
        // The enum values this file relies on, from cuda.h.
        use cu::CUdevice_attribute as A;
        assert_eq!(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED as u32, 116);
        assert_eq!(
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED as u32,
            110
        );
        assert_eq!(
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS as u32,
            117
        );
        assert_eq!(
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING as u32,
            118
        );
        assert_eq!(A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED as u32, 124);
        assert_eq!(A::CU_DEVICE_ATTRIBUTE_INTEGRATED as u32, 18);
        assert_eq!(
            A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES as u32,
            100
        );
        assert_eq!(
            cu::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD as u32,
            1
        );
    }

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
                    assert!(crate::bdf::is_bdf(&g.pci_bus_id), "{}", g.pci_bus_id);
                }
            }
        }
    }
}
