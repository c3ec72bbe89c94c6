//! The simulators' character-device interface, mirrored from
//! tests/sim/include/sim_uapi.h (same layouts, checked below).

#![allow(dead_code)]

/// `/dev/nvidia_p2p_sim`.
pub const NVSIM_DEV: &str = "/dev/nvidia_p2p_sim";
/// `/dev/peer_core_sim`.
pub const PCSIM_DEV: &str = "/dev/peer_core_sim";

const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

const fn ioc(dir: u64, ty: u8, nr: u8, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((ty as u64) << 8) | nr as u64
}
const fn iow<T>(ty: u8, nr: u8) -> u64 {
    ioc(IOC_WRITE, ty, nr, std::mem::size_of::<T>())
}
const fn iowr<T>(ty: u8, nr: u8) -> u64 {
    ioc(IOC_WRITE | IOC_READ, ty, nr, std::mem::size_of::<T>())
}
const fn io(ty: u8, nr: u8) -> u64 {
    ioc(0, ty, nr, 0)
}

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct SimText {
    pub buf: u64,
    pub size: u32,
    pub len: u32,
}

pub const LAYOUT_CONTIGUOUS: u32 = 0;
pub const LAYOUT_FRAGMENTED: u32 = 1;
pub const LAYOUT_SHUFFLED: u32 = 2;
pub const LAYOUT_SPARSE: u32 = 3;

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct NvsimAlloc {
    pub len: u64,
    pub va: u64,
    pub layout: u32,
    pub run_pages: u32,
}

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct NvsimFree {
    pub va: u64,
}

pub const FAULT_GET_PAGES: u32 = 0;
pub const FAULT_DMA_MAP: u32 = 1;
pub const FAULT_PERSISTENT: u32 = 2;
pub const FAULT_PUT: u32 = 3;
pub const FAULT_PUT_PERSISTENT: u32 = 4;
pub const FAULT_UNMAP: u32 = 5;

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct NvsimFault {
    pub site: u32,
    pub count: u32,
    pub err: i32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct NvsimDelay {
    pub us_per_page: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct NvsimShare {
    pub va: u64,
    pub pid: u32,
    pub reserved: u32,
}

pub const NVSIM_IOC_ALLOC: u64 = iowr::<NvsimAlloc>(b'N', 1);
pub const NVSIM_IOC_FREE: u64 = iow::<NvsimFree>(b'N', 2);
pub const NVSIM_IOC_FAULT: u64 = iow::<NvsimFault>(b'N', 3);
pub const NVSIM_IOC_DELAY: u64 = iow::<NvsimDelay>(b'N', 4);
pub const NVSIM_IOC_STATS: u64 = iowr::<SimText>(b'N', 5);
pub const NVSIM_IOC_RESET: u64 = io(b'N', 6);

pub const HOOK_MAP_PROLOGUE: u32 = 1;
pub const HOOK_MAP_EPILOGUE: u32 = 2;
pub const HOOK_UNMAP: u32 = 3;
pub const HOOK_PUT: u32 = 4;
pub const HOOK_GET_PAGES: u32 = 5;
pub const HOOK_GET_PAGES_RETURN: u32 = 6;
/// The first hook site that is not one (`NVSIM_HOOK_SITES`).
pub const HOOK_SITES: u32 = 7;

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct NvsimHook {
    pub site: u32,
    pub count: u32,
    pub wait_ms: u32,
    pub reserved: u32,
}

pub const NVSIM_IOC_HOOK: u64 = iow::<NvsimHook>(b'N', 7);

/// The latency model's own cost of one pin + map (+ unmap + unpin).
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct NvsimCost {
    pub pages: u64,
    pub pin_ns: u64,
    pub map_ns: u64,
    pub unmap_ns: u64,
    pub unpin_ns: u64,
}

pub const NVSIM_IOC_COST: u64 = iowr::<NvsimCost>(b'N', 8);
pub const NVSIM_IOC_SHARE: u64 = iow::<NvsimShare>(b'N', 9);

pub const MEMCPY_HTOD: u32 = 0;
pub const MEMCPY_DTOH: u32 = 1;

/// cuMemcpyHtoD / cuMemcpyDtoH through the allocation's own pages.
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct NvsimMemcpy {
    pub va: u64,
    pub buf: u64,
    pub len: u64,
    pub dir: u32,
    pub reserved: u32,
}

pub const NVSIM_IOC_MEMCPY: u64 = iow::<NvsimMemcpy>(b'N', 10);

pub const STEP_NONE: u32 = 0;
pub const STEP_AFTER_ACQUIRE: u32 = 1;
pub const STEP_AFTER_GET_PAGES: u32 = 2;
pub const STEP_AFTER_DMA_MAP: u32 = 3;
pub const STEP_IN_DEREG: u32 = 4;
pub const ACTION_NONE: u32 = 0;
pub const ACTION_FREE: u32 = 1;
pub const ACTION_DELAY: u32 = 2;

pub const ACCESS_LOCAL_WRITE: u32 = 1;
pub const ACCESS_REMOTE_WRITE: u32 = 2;
pub const ACCESS_REMOTE_READ: u32 = 4;

#[repr(C)]
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcsimSge {
    pub addr: u64,
    pub len: u64,
}

pub const NAME_MAX: usize = 64;

/// Where a registration's time went in the core (ns).
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct PcsimTimes {
    pub acquire_wait_ns: u64,
    pub acquire_ns: u64,
    pub get_pages_ns: u64,
    pub dma_map_ns: u64,
    pub total_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PcsimReg {
    pub va: u64,
    pub len: u64,
    pub access: u32,
    pub hook_step: u32,
    pub hook_action: u32,
    pub hook_ms: u32,
    pub hook_va: u64,
    pub sg: u64,
    pub sg_max: u32,
    pub sg_count: u32,
    pub handle: u32,
    pub core_context: u32,
    pub page_size: u64,
    pub client: [u8; NAME_MAX],
    pub flags: u32,
    pub reserved: u32,
    pub times: PcsimTimes,
}

/// `PcsimReg::flags`: a QP/CQ buffer (invalidation clients not asked).
pub const REG_QP_BUFFER: u32 = 1;

impl Default for PcsimReg {
    fn default() -> Self {
        Self {
            va: 0,
            len: 0,
            access: 0,
            hook_step: 0,
            hook_action: 0,
            hook_ms: 0,
            hook_va: 0,
            sg: 0,
            sg_max: 0,
            sg_count: 0,
            handle: 0,
            core_context: 0,
            page_size: 0,
            client: [0; NAME_MAX],
            flags: 0,
            reserved: 0,
            times: PcsimTimes::default(),
        }
    }
}

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct PcsimHandle {
    pub handle: u32,
    pub reserved: u32,
}

/// A timed deregistration (ns out).
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct PcsimDereg {
    pub handle: u32,
    pub reserved: u32,
    pub dma_unmap_ns: u64,
    pub put_pages_ns: u64,
    pub release_ns: u64,
    pub total_ns: u64,
}

pub const STATE_MAPPED: u32 = 1;
pub const STATE_INVALIDATED: u32 = 2;
pub const STATE_UNMAPPED: u32 = 3;

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct PcsimQuery {
    pub handle: u32,
    pub state: u32,
    pub sg: u64,
    pub sg_max: u32,
    pub sg_count: u32,
}

pub const PCSIM_IOC_REG: u64 = iowr::<PcsimReg>(b'P', 1);
pub const PCSIM_IOC_DEREG: u64 = iow::<PcsimHandle>(b'P', 2);
pub const PCSIM_IOC_DMA_CHECK: u64 = iow::<PcsimHandle>(b'P', 3);
pub const PCSIM_IOC_STATS: u64 = iowr::<SimText>(b'P', 4);
pub const PCSIM_IOC_RESET: u64 = io(b'P', 5);
pub const PCSIM_IOC_QUERY: u64 = iowr::<PcsimQuery>(b'P', 6);
pub const PCSIM_IOC_DISASSOCIATE: u64 = iow::<PcsimHandle>(b'P', 7);
pub const PCSIM_IOC_DEREG_TIMED: u64 = iowr::<PcsimDereg>(b'P', 8);

/// The HCA's DMA through a registration's SG list.
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct PcsimDma {
    pub handle: u32,
    pub write: u32,
    pub va: u64,
    pub len: u64,
    pub buf: u64,
}

pub const PCSIM_IOC_DMA: u64 = iow::<PcsimDma>(b'P', 9);

// The same sizes as the C header's static_asserts.
const _: () = {
    use std::mem::size_of;
    assert!(size_of::<SimText>() == 16);
    assert!(size_of::<NvsimAlloc>() == 24);
    assert!(size_of::<NvsimFree>() == 8);
    assert!(size_of::<NvsimFault>() == 16);
    assert!(size_of::<NvsimDelay>() == 8);
    assert!(size_of::<PcsimSge>() == 16);
    assert!(size_of::<PcsimTimes>() == 40);
    assert!(size_of::<PcsimReg>() == 184);
    assert!(size_of::<PcsimDereg>() == 40);
    assert!(size_of::<NvsimCost>() == 40);
    assert!(size_of::<NvsimShare>() == 16);
    assert!(size_of::<NvsimHook>() == 16);
    assert!(size_of::<PcsimHandle>() == 8);
    assert!(size_of::<PcsimQuery>() == 24);
    assert!(size_of::<NvsimMemcpy>() == 32);
    assert!(size_of::<PcsimDma>() == 32);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_c_macros() {
        // _IOWR('N', 1, 24 bytes), _IOW('N', 2, 8), _IO('N', 6), _IOWR('P', 1, 184).
        assert_eq!(NVSIM_IOC_ALLOC, 0xc018_4e01);
        assert_eq!(NVSIM_IOC_FREE, 0x4008_4e02);
        assert_eq!(NVSIM_IOC_RESET, 0x0000_4e06);
        assert_eq!(PCSIM_IOC_REG, 0xc0b8_5001);
        assert_eq!(PCSIM_IOC_DEREG_TIMED, 0xc028_5008);
        assert_eq!(NVSIM_IOC_COST, 0xc028_4e08);
        assert_eq!(NVSIM_IOC_SHARE, 0x4010_4e09);
        assert_eq!(NVSIM_IOC_HOOK, 0x4010_4e07);
        assert_eq!(PCSIM_IOC_DMA_CHECK, 0x4008_5003);
        assert_eq!(NVSIM_IOC_MEMCPY, 0x4020_4e0a);
        assert_eq!(PCSIM_IOC_DMA, 0x4020_5009);
    }
}
