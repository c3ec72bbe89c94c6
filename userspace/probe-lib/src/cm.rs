//! Owned librdmacm objects: an event channel, connection identifiers and
//! the QP the CM creates on one.

use crate::verbs::ffi::{self, CmEvent, ConnParam, Ptr, RdmaCm};
use crate::verbs::{errno_text, Context, Cq, Pd, VerbsError};
use std::ffi::CStr;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn fail(call: &'static str) -> VerbsError {
    VerbsError {
        call,
        errno: errno(),
    }
}

/// `sockaddr_in` / `sockaddr_in6` storage for an address.
pub fn sockaddr(addr: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above for sockaddr_in6.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
        }
    }
    ss
}

/// An event channel.
pub struct Channel {
    ch: *mut libc::c_int,
    cm: &'static RdmaCm,
}

/// A CM event, copied out and acknowledged.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: u32,
    pub name: String,
    pub status: i32,
    pub id: Ptr,
    pub private: Vec<u8>,
}

impl Channel {
    pub fn new() -> Result<Channel, String> {
        let cm = RdmaCm::get().map_err(|e| format!("librdmacm.so.1 cannot be loaded: {e}"))?;
        // SAFETY: no arguments; NULL on failure.
        let ch = unsafe { (cm.create_event_channel)() };
        if ch.is_null() {
            return Err(fail("rdma_create_event_channel").to_string());
        }
        Ok(Channel { ch, cm })
    }

    pub fn cm(&self) -> &'static RdmaCm {
        self.cm
    }

    pub fn create_id(&self) -> Result<CmId, VerbsError> {
        let mut id: Ptr = std::ptr::null_mut();
        // SAFETY: live channel; out-pointer.
        let rc = unsafe {
            (self.cm.create_id)(self.ch, &mut id, std::ptr::null_mut(), ffi::RDMA_PS_TCP)
        };
        if rc != 0 {
            return Err(fail("rdma_create_id"));
        }
        Ok(CmId { id, cm: self.cm })
    }

    /// Waits up to `timeout` for the next event.
    pub fn next(&self, timeout: Duration) -> Result<Event, String> {
        // SAFETY: struct rdma_event_channel starts with its fd.
        let fd = unsafe { *self.ch };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n == 0 {
            return Err(format!("no RDMA CM event within {} s", timeout.as_secs()));
        }
        let mut ev: *mut CmEvent = std::ptr::null_mut();
        // SAFETY: readable channel; out-pointer.
        if unsafe { (self.cm.get_cm_event)(self.ch, &mut ev) } != 0 {
            return Err(fail("rdma_get_cm_event").to_string());
        }
        // SAFETY: ev is valid until acknowledged; private data has the
        // stated length.
        let out = unsafe {
            let e = &*ev;
            let private = if e.conn.private_data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    e.conn.private_data as *const u8,
                    e.conn.private_data_len as usize,
                )
                .to_vec()
            };
            let name = CStr::from_ptr((self.cm.event_str)(e.event))
                .to_string_lossy()
                .into_owned();
            Event {
                kind: e.event,
                name,
                status: e.status,
                id: e.id,
                private,
            }
        };
        // SAFETY: acknowledges the event once.
        unsafe { (self.cm.ack_cm_event)(ev) };
        Ok(out)
    }

    /// Waits for an event of `kind`; any other event is an error.
    pub fn expect(&self, kind: u32, timeout: Duration) -> Result<Event, String> {
        let e = self.next(timeout)?;
        if e.kind != kind {
            let st = if e.status < 0 {
                errno_text(-e.status)
            } else {
                e.status.to_string()
            };
            // SAFETY: event_str returns a static string.
            let want = unsafe { CStr::from_ptr((self.cm.event_str)(kind)) }
                .to_string_lossy()
                .into_owned();
            return Err(format!("expected {want}, got {} (status {st})", e.name));
        }
        Ok(e)
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: every id of this channel was dropped before (callers
        // declare the channel first).
        unsafe { (self.cm.destroy_event_channel)(self.ch) };
    }
}

/// A connection identifier.
pub struct CmId {
    id: Ptr,
    cm: &'static RdmaCm,
}

impl CmId {
    /// Takes ownership of an id delivered by a CONNECT_REQUEST event.
    pub fn from_event(id: Ptr, cm: &'static RdmaCm) -> CmId {
        CmId { id, cm }
    }

    pub fn ptr(&self) -> Ptr {
        self.id
    }

    fn ck(&self, rc: i32, call: &'static str) -> Result<(), VerbsError> {
        if rc != 0 {
            return Err(fail(call));
        }
        Ok(())
    }

    pub fn bind(&self, addr: &SocketAddr) -> Result<(), VerbsError> {
        let ss = sockaddr(addr);
        // SAFETY: live id and a filled sockaddr.
        self.ck(
            unsafe { (self.cm.bind_addr)(self.id, &ss as *const _ as *const libc::sockaddr) },
            "rdma_bind_addr",
        )
    }

    pub fn listen(&self) -> Result<(), VerbsError> {
        // SAFETY: live, bound id.
        self.ck(unsafe { (self.cm.listen)(self.id, 4) }, "rdma_listen")
    }

    pub fn resolve_addr(
        &self,
        src: Option<&SocketAddr>,
        dst: &SocketAddr,
        ms: i32,
    ) -> Result<(), VerbsError> {
        let d = sockaddr(dst);
        let s = src.map(sockaddr);
        let sp = s
            .as_ref()
            .map_or(std::ptr::null(), |s| s as *const _ as *const libc::sockaddr);
        // SAFETY: live id; sockaddrs outlive the call.
        self.ck(
            unsafe {
                (self.cm.resolve_addr)(self.id, sp, &d as *const _ as *const libc::sockaddr, ms)
            },
            "rdma_resolve_addr",
        )
    }

    pub fn resolve_route(&self, ms: i32) -> Result<(), VerbsError> {
        // SAFETY: live id with a resolved address.
        self.ck(
            unsafe { (self.cm.resolve_route)(self.id, ms) },
            "rdma_resolve_route",
        )
    }

    /// The device context the CM bound this id to.
    pub fn context(&self) -> Option<Context> {
        // SAFETY: the id's first field is its verbs context (may be NULL).
        let verbs = unsafe { *(self.id as *const u8).add(ffi::CM_ID_VERBS).cast::<Ptr>() };
        if verbs.is_null() {
            return None;
        }
        Some(Context::borrowed(verbs, String::from("(rdma_cm)")))
    }

    fn conn_param(private: &[u8]) -> ConnParam {
        ConnParam {
            private_data: private.as_ptr() as *const libc::c_void,
            private_data_len: private.len().min(56) as u8,
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        }
    }

    pub fn connect(&self, private: &[u8]) -> Result<(), VerbsError> {
        let mut p = Self::conn_param(private);
        // SAFETY: live id with a QP; private data outlives the call.
        self.ck(
            unsafe { (self.cm.connect)(self.id, &mut p) },
            "rdma_connect",
        )
    }

    pub fn accept(&self, private: &[u8]) -> Result<(), VerbsError> {
        let mut p = Self::conn_param(private);
        // SAFETY: as for connect.
        self.ck(unsafe { (self.cm.accept)(self.id, &mut p) }, "rdma_accept")
    }

    /// Refuses a connection request (the client sees REJECTED).
    pub fn reject(&self) {
        // SAFETY: live id of a connect request; no private data.
        unsafe { (self.cm.reject)(self.id, std::ptr::null(), 0) };
    }

    pub fn disconnect(&self) {
        // SAFETY: live id; failure (already disconnected) is harmless.
        unsafe { (self.cm.disconnect)(self.id) };
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: its QP guard was dropped first; events were acknowledged.
        unsafe { (self.cm.destroy_id)(self.id) };
    }
}

/// The RC QP that rdma_create_qp attached to an id.
pub struct CmQp {
    id: Ptr,
    qp: Ptr,
    ctx: Ptr,
    cm: &'static RdmaCm,
    _pd: Rc<Pd>,
    _cq: Rc<Cq>,
}

impl CmQp {
    pub fn create(id: &CmId, pd: &Rc<Pd>, cq: &Rc<Cq>, depth: u32) -> Result<CmQp, VerbsError> {
        let mut attr = ffi::QpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.ptr(),
            recv_cq: cq.ptr(),
            srq: std::ptr::null_mut(),
            cap: ffi::QpCap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: live id; PD and CQ of the id's device.
        if unsafe { (id.cm.create_qp)(id.id, pd.ptr(), &mut attr) } != 0 {
            return Err(fail("rdma_create_qp"));
        }
        // SAFETY: rdma_create_qp stored the QP in the id.
        let qp = unsafe { *(id.id as *const u8).add(ffi::CM_ID_QP).cast::<Ptr>() };
        Ok(CmQp {
            id: id.id,
            qp,
            ctx: pd.context().ptr(),
            cm: id.cm,
            _pd: pd.clone(),
            _cq: cq.clone(),
        })
    }

    pub fn post_send(&self, wr: &mut ffi::SendWr) -> Result<(), VerbsError> {
        crate::verbs::post_send(self.qp, self.ctx, wr)
    }

    pub fn post_recv(&self, wr: &mut ffi::RecvWr) -> Result<(), VerbsError> {
        crate::verbs::post_recv(self.qp, self.ctx, wr)
    }
}

impl Drop for CmQp {
    fn drop(&mut self) {
        // SAFETY: the QP created on this (still live) id.
        unsafe { (self.cm.destroy_qp)(self.id) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_v4_layout() {
        let ss = sockaddr(&"192.0.2.7:18515".parse().unwrap());
        // SAFETY: written as sockaddr_in above.
        let sin = unsafe { *(&ss as *const _ as *const libc::sockaddr_in) };
        assert_eq!(sin.sin_family as i32, libc::AF_INET);
        assert_eq!(u16::from_be(sin.sin_port), 18515);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [192, 0, 2, 7]);
    }
}
