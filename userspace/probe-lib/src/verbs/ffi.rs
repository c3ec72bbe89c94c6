//! The slice of the libibverbs / librdmacm C ABI this tool uses, loaded
//! with dlopen at run time so that building needs no rdma-core headers or
//! native tools. Layouts follow rdma-core's stable ABI on LP64 Linux; the
//! tests pin sizes and offsets.

#![allow(non_camel_case_types)]

use libloading::Library;
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

pub type Ptr = *mut c_void;

/// `union ibv_gid`: 16 bytes, 8-byte aligned (it overlays two u64).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Gid(pub [u8; 16]);

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct GlobalRoute {
    pub dgid: Gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct AhAttr {
    pub grh: GlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct QpAttr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: QpCap,
    pub ah_attr: AhAttr,
    pub alt_ah_attr: AhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct QpInitAttr {
    pub qp_context: Ptr,
    pub send_cq: Ptr,
    pub recv_cq: Ptr,
    pub srq: Ptr,
    pub cap: QpCap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_port_attr`, with room for fields newer libraries append.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PortAttr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
    pub reserved: [u8; 64],
}

/// The public head of `struct ibv_mr`.
#[repr(C)]
pub struct Mr {
    pub context: Ptr,
    pub pd: Ptr,
    pub addr: Ptr,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// The public head of `struct ibv_qp`.
#[repr(C)]
pub struct QpHead {
    pub context: Ptr,
    pub qp_context: Ptr,
    pub pd: Ptr,
    pub send_cq: Ptr,
    pub recv_cq: Ptr,
    pub srq: Ptr,
    pub handle: u32,
    pub qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` with the `rdma` member of its `wr` union spelled out.
#[repr(C)]
pub struct SendWr {
    pub wr_id: u64,
    pub next: *mut SendWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub wr_pad: [u32; 5],
    pub qp_type: u32,
    pub qp_type_pad: u32,
    pub tail: [u64; 6],
}

impl SendWr {
    pub fn zeroed() -> Self {
        SendWr {
            wr_id: 0,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
            opcode: 0,
            send_flags: 0,
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            wr_pad: [0; 5],
            qp_type: 0,
            qp_type_pad: 0,
            tail: [0; 6],
        }
    }
}

#[repr(C)]
pub struct RecvWr {
    pub wr_id: u64,
    pub next: *mut RecvWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ConnParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// The head of `struct rdma_cm_event` (the `conn` member of its union).
#[repr(C)]
pub struct CmEvent {
    pub id: Ptr,
    pub listen_id: Ptr,
    pub event: u32,
    pub status: c_int,
    pub conn: ConnParam,
}

/// Offsets into `struct rdma_cm_id`: the verbs context and the QP.
pub const CM_ID_VERBS: usize = 0;
pub const CM_ID_QP: usize = 24;

/// Offsets of the data-path entries inside `struct ibv_context`: `ops`
/// starts after the device pointer.
pub const CTX_OPS: usize = 8;
pub const OPS_POLL_CQ: usize = 88;
pub const OPS_POST_SEND: usize = 200;
pub const OPS_POST_RECV: usize = 208;

pub type PollCqFn = unsafe extern "C" fn(Ptr, c_int, *mut Wc) -> c_int;
pub type PostSendFn = unsafe extern "C" fn(Ptr, *mut SendWr, *mut *mut SendWr) -> c_int;
pub type PostRecvFn = unsafe extern "C" fn(Ptr, *mut RecvWr, *mut *mut RecvWr) -> c_int;

// Constants of verbs.h / rdma_cma.h.
pub const QPS_INIT: u32 = 1;
pub const QPS_RTR: u32 = 2;
pub const QPS_RTS: u32 = 3;
pub const QPT_RC: u32 = 2;
pub const QP_STATE: c_int = 1;
pub const QP_ACCESS_FLAGS: c_int = 8;
pub const QP_PKEY_INDEX: c_int = 16;
pub const QP_PORT: c_int = 32;
pub const QP_AV: c_int = 128;
pub const QP_PATH_MTU: c_int = 256;
pub const QP_TIMEOUT: c_int = 512;
pub const QP_RETRY_CNT: c_int = 1024;
pub const QP_RNR_RETRY: c_int = 2048;
pub const QP_RQ_PSN: c_int = 4096;
pub const QP_MAX_QP_RD_ATOMIC: c_int = 8192;
pub const QP_MIN_RNR_TIMER: c_int = 32768;
pub const QP_SQ_PSN: c_int = 65536;
pub const QP_MAX_DEST_RD_ATOMIC: c_int = 131072;
pub const QP_DEST_QPN: c_int = 1048576;
pub const ACCESS_LOCAL_WRITE: c_int = 1;
pub const ACCESS_REMOTE_WRITE: c_int = 2;
pub const ACCESS_REMOTE_READ: c_int = 4;
pub const WR_RDMA_WRITE: u32 = 0;
pub const WR_SEND: u32 = 2;
pub const WR_RDMA_READ: u32 = 4;
pub const SEND_SIGNALED: u32 = 2;
pub const LINK_LAYER_INFINIBAND: u8 = 1;
pub const LINK_LAYER_ETHERNET: u8 = 2;
pub const PORT_ACTIVE: u32 = 4;
pub const RDMA_PS_TCP: c_int = 0x0106;

pub const CM_ADDR_RESOLVED: u32 = 0;
pub const CM_ROUTE_RESOLVED: u32 = 2;
pub const CM_CONNECT_REQUEST: u32 = 4;
pub const CM_ESTABLISHED: u32 = 9;
pub const CM_DISCONNECTED: u32 = 10;

/// libibverbs entry points.
pub struct Verbs {
    _lib: Library,
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut Ptr,
    pub free_device_list: unsafe extern "C" fn(*mut Ptr),
    pub get_device_name: unsafe extern "C" fn(Ptr) -> *const c_char,
    pub open_device: unsafe extern "C" fn(Ptr) -> Ptr,
    pub close_device: unsafe extern "C" fn(Ptr) -> c_int,
    pub query_port: unsafe extern "C" fn(Ptr, u8, *mut PortAttr) -> c_int,
    pub query_gid: unsafe extern "C" fn(Ptr, u8, c_int, *mut Gid) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(Ptr) -> Ptr,
    pub dealloc_pd: unsafe extern "C" fn(Ptr) -> c_int,
    pub reg_mr: unsafe extern "C" fn(Ptr, Ptr, usize, c_int) -> *mut Mr,
    /// Missing before rdma-core 34.
    pub reg_dmabuf_mr: Option<unsafe extern "C" fn(Ptr, u64, usize, u64, c_int, c_int) -> *mut Mr>,
    pub dereg_mr: unsafe extern "C" fn(*mut Mr) -> c_int,
    pub create_cq: unsafe extern "C" fn(Ptr, c_int, Ptr, Ptr, c_int) -> Ptr,
    pub destroy_cq: unsafe extern "C" fn(Ptr) -> c_int,
    pub create_qp: unsafe extern "C" fn(Ptr, *mut QpInitAttr) -> Ptr,
    pub modify_qp: unsafe extern "C" fn(Ptr, *mut QpAttr, c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(Ptr) -> c_int,
}

/// librdmacm entry points.
pub struct RdmaCm {
    _lib: Library,
    pub create_event_channel: unsafe extern "C" fn() -> *mut c_int,
    pub destroy_event_channel: unsafe extern "C" fn(*mut c_int),
    pub create_id: unsafe extern "C" fn(*mut c_int, *mut Ptr, Ptr, c_int) -> c_int,
    pub destroy_id: unsafe extern "C" fn(Ptr) -> c_int,
    pub bind_addr: unsafe extern "C" fn(Ptr, *const libc::sockaddr) -> c_int,
    pub listen: unsafe extern "C" fn(Ptr, c_int) -> c_int,
    pub resolve_addr:
        unsafe extern "C" fn(Ptr, *const libc::sockaddr, *const libc::sockaddr, c_int) -> c_int,
    pub resolve_route: unsafe extern "C" fn(Ptr, c_int) -> c_int,
    pub create_qp: unsafe extern "C" fn(Ptr, Ptr, *mut QpInitAttr) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(Ptr),
    pub connect: unsafe extern "C" fn(Ptr, *mut ConnParam) -> c_int,
    pub accept: unsafe extern "C" fn(Ptr, *mut ConnParam) -> c_int,
    pub disconnect: unsafe extern "C" fn(Ptr) -> c_int,
    pub reject: unsafe extern "C" fn(Ptr, *const c_void, u8) -> c_int,
    pub get_cm_event: unsafe extern "C" fn(*mut c_int, *mut *mut CmEvent) -> c_int,
    pub ack_cm_event: unsafe extern "C" fn(*mut CmEvent) -> c_int,
    pub event_str: unsafe extern "C" fn(u32) -> *const c_char,
}

/// Looks up `name` as a function of type `T`.
///
/// # Safety
/// `T` must be the C prototype of the exported function `name`.
unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    // SAFETY: the caller guarantees that T matches the symbol.
    unsafe { lib.get::<T>(&n) }
        .map(|s| *s)
        .map_err(|e| format!("{name}: {e}"))
}

/// Opens the first of `names` that loads. On failure the error is the
/// first name's (the real soname: its error says what is wrong, e.g. a
/// missing dependency), not the last fallback's "not found".
fn open_lib(names: &[&str]) -> Result<Library, String> {
    let mut first: Option<String> = None;
    for n in names {
        // SAFETY: loading rdma-core's libraries runs only their (and their
        // providers') constructors, which have no preconditions.
        match unsafe { Library::new(n) } {
            Ok(l) => return Ok(l),
            Err(e) => {
                crate::trace!("dlopen {n}: {e}");
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
    Err(first.unwrap_or_else(|| "no library name to load".into()))
}

impl Verbs {
    fn load() -> Result<Verbs, String> {
        let lib = open_lib(&["libibverbs.so.1", "libibverbs.so"])?;
        // SAFETY: every field's type below is the C prototype of the
        // rdma-core function it is looked up by.
        unsafe {
            let reg_dmabuf_mr = sym(&lib, "ibv_reg_dmabuf_mr").ok();
            Ok(Verbs {
                get_device_list: sym(&lib, "ibv_get_device_list")?,
                free_device_list: sym(&lib, "ibv_free_device_list")?,
                get_device_name: sym(&lib, "ibv_get_device_name")?,
                open_device: sym(&lib, "ibv_open_device")?,
                close_device: sym(&lib, "ibv_close_device")?,
                query_port: sym(&lib, "ibv_query_port")?,
                query_gid: sym(&lib, "ibv_query_gid")?,
                alloc_pd: sym(&lib, "ibv_alloc_pd")?,
                dealloc_pd: sym(&lib, "ibv_dealloc_pd")?,
                reg_mr: sym(&lib, "ibv_reg_mr")?,
                reg_dmabuf_mr,
                dereg_mr: sym(&lib, "ibv_dereg_mr")?,
                create_cq: sym(&lib, "ibv_create_cq")?,
                destroy_cq: sym(&lib, "ibv_destroy_cq")?,
                create_qp: sym(&lib, "ibv_create_qp")?,
                modify_qp: sym(&lib, "ibv_modify_qp")?,
                destroy_qp: sym(&lib, "ibv_destroy_qp")?,
                _lib: lib,
            })
        }
    }

    /// The process-wide libibverbs, loaded on first use.
    pub fn get() -> Result<&'static Verbs, String> {
        static V: OnceLock<Result<Verbs, String>> = OnceLock::new();
        V.get_or_init(Verbs::load).as_ref().map_err(|e| e.clone())
    }
}

impl RdmaCm {
    fn load() -> Result<RdmaCm, String> {
        let lib = open_lib(&["librdmacm.so.1", "librdmacm.so"])?;
        // SAFETY: as in Verbs::load.
        unsafe {
            Ok(RdmaCm {
                create_event_channel: sym(&lib, "rdma_create_event_channel")?,
                destroy_event_channel: sym(&lib, "rdma_destroy_event_channel")?,
                create_id: sym(&lib, "rdma_create_id")?,
                destroy_id: sym(&lib, "rdma_destroy_id")?,
                bind_addr: sym(&lib, "rdma_bind_addr")?,
                listen: sym(&lib, "rdma_listen")?,
                resolve_addr: sym(&lib, "rdma_resolve_addr")?,
                resolve_route: sym(&lib, "rdma_resolve_route")?,
                create_qp: sym(&lib, "rdma_create_qp")?,
                destroy_qp: sym(&lib, "rdma_destroy_qp")?,
                connect: sym(&lib, "rdma_connect")?,
                accept: sym(&lib, "rdma_accept")?,
                disconnect: sym(&lib, "rdma_disconnect")?,
                reject: sym(&lib, "rdma_reject")?,
                get_cm_event: sym(&lib, "rdma_get_cm_event")?,
                ack_cm_event: sym(&lib, "rdma_ack_cm_event")?,
                event_str: sym(&lib, "rdma_event_str")?,
                _lib: lib,
            })
        }
    }

    pub fn get() -> Result<&'static RdmaCm, String> {
        static C: OnceLock<Result<RdmaCm, String>> = OnceLock::new();
        C.get_or_init(RdmaCm::load).as_ref().map_err(|e| e.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_first_load_error_is_reported() {
        let Err(e) = open_lib(&["libpmprobe-first-missing.so.1", "libpmprobe-second.so"]) else {
            panic!("neither library exists");
        };
        assert!(e.contains("libpmprobe-first-missing.so.1"), "{e}");
        assert!(!e.contains("libpmprobe-second"), "{e}");
    }

    /// Sizes and offsets of rdma-core's x86_64 ABI (checked against the
    /// C headers): a change here breaks every call.
    #[test]
    fn abi_layouts() {
        assert_eq!(size_of::<Gid>(), 16);
        assert_eq!(size_of::<GlobalRoute>(), 24);
        assert_eq!(size_of::<AhAttr>(), 32);
        assert_eq!(size_of::<QpAttr>(), 144);
        assert_eq!(offset_of!(QpAttr, cap), 36);
        assert_eq!(offset_of!(QpAttr, ah_attr), 56);
        assert_eq!(offset_of!(QpAttr, alt_ah_attr), 88);
        assert_eq!(offset_of!(QpAttr, pkey_index), 120);
        assert_eq!(offset_of!(QpAttr, min_rnr_timer), 128);
        assert_eq!(offset_of!(QpAttr, rate_limit), 136);
        assert_eq!(size_of::<QpInitAttr>(), 64);
        assert_eq!(offset_of!(QpInitAttr, qp_type), 52);
        assert_eq!(size_of::<SendWr>(), 128);
        assert_eq!(offset_of!(SendWr, remote_addr), 40);
        assert_eq!(offset_of!(SendWr, qp_type), 72);
        assert_eq!(size_of::<RecvWr>(), 32);
        assert_eq!(size_of::<Sge>(), 16);
        assert_eq!(size_of::<Wc>(), 48);
        assert_eq!(offset_of!(Wc, qp_num), 28);
        assert_eq!(offset_of!(Wc, wc_flags), 36);
        assert_eq!(offset_of!(PortAttr, lid), 34);
        assert_eq!(offset_of!(PortAttr, link_layer), 46);
        assert_eq!(offset_of!(PortAttr, active_mtu), 8);
        assert_eq!(offset_of!(Mr, addr), 16);
        assert_eq!(offset_of!(Mr, lkey), 36);
        assert_eq!(offset_of!(Mr, rkey), 40);
        assert_eq!(offset_of!(QpHead, qp_num), 52);
        assert_eq!(size_of::<ConnParam>(), 24);
        assert_eq!(offset_of!(ConnParam, qp_num), 16);
        assert_eq!(offset_of!(CmEvent, event), 16);
        assert_eq!(offset_of!(CmEvent, status), 20);
        assert_eq!(offset_of!(CmEvent, conn), 24);
    }
}
