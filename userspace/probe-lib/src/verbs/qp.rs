//! Queue pairs and the data-path calls, which libibverbs implements as
//! inline functions over the provider's ops table.

use super::ffi::{self, Ptr, Verbs};
use super::{last_errno, rc_errno, Cq, Pd, VerbsError};
use std::rc::Rc;

/// Posts on a QP through the provider's ops table.
pub(crate) fn post_send(qp: Ptr, ctx: Ptr, wr: &mut ffi::SendWr) -> Result<(), VerbsError> {
    let mut bad: *mut ffi::SendWr = std::ptr::null_mut();
    // SAFETY: see Cq::wait for the ops table; qp is a live QP of ctx and
    // wr (with its SGEs) outlives the call, which copies it.
    let rc = unsafe {
        let f =
            *((ctx as *const u8).add(ffi::CTX_OPS + ffi::OPS_POST_SEND) as *const ffi::PostSendFn);
        f(qp, wr, &mut bad)
    };
    if rc != 0 {
        return Err(VerbsError {
            call: "ibv_post_send",
            errno: rc_errno(rc),
        });
    }
    Ok(())
}

pub(crate) fn post_recv(qp: Ptr, ctx: Ptr, wr: &mut ffi::RecvWr) -> Result<(), VerbsError> {
    let mut bad: *mut ffi::RecvWr = std::ptr::null_mut();
    // SAFETY: as in post_send.
    let rc = unsafe {
        let f =
            *((ctx as *const u8).add(ffi::CTX_OPS + ffi::OPS_POST_RECV) as *const ffi::PostRecvFn);
        f(qp, wr, &mut bad)
    };
    if rc != 0 {
        return Err(VerbsError {
            call: "ibv_post_recv",
            errno: rc_errno(rc),
        });
    }
    Ok(())
}

/// A reliable-connected QP created with ibv_create_qp.
pub struct Qp {
    ptr: Ptr,
    pd: Rc<Pd>,
    _cq: Rc<Cq>,
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Ok(v) = Verbs::get() {
            // SAFETY: created by ibv_create_qp, destroyed once.
            unsafe { (v.destroy_qp)(self.ptr) };
        }
    }
}

impl Qp {
    pub fn create_rc(pd: &Rc<Pd>, cq: &Rc<Cq>, depth: u32) -> Result<Qp, VerbsError> {
        let v = Verbs::get().map_err(|_| VerbsError {
            call: "ibv_create_qp",
            errno: libc::ENOSYS,
        })?;
        let mut attr = ffi::QpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.ptr,
            recv_cq: cq.ptr,
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
        // SAFETY: valid PD and CQ of one context; attr is initialised.
        let qp = unsafe { (v.create_qp)(pd.ptr, &mut attr) };
        if qp.is_null() {
            return Err(VerbsError {
                call: "ibv_create_qp",
                errno: last_errno(),
            });
        }
        Ok(Qp {
            ptr: qp,
            pd: pd.clone(),
            _cq: cq.clone(),
        })
    }

    pub fn qp_num(&self) -> u32 {
        // SAFETY: ptr is a live ibv_qp.
        unsafe { (*(self.ptr as *const ffi::QpHead)).qp_num }
    }

    pub fn modify(&self, attr: &mut ffi::QpAttr, mask: i32) -> Result<(), VerbsError> {
        let v = Verbs::get().map_err(|_| VerbsError {
            call: "ibv_modify_qp",
            errno: libc::ENOSYS,
        })?;
        // SAFETY: live QP, initialised attributes.
        let rc = unsafe { (v.modify_qp)(self.ptr, attr, mask) };
        if rc != 0 {
            return Err(VerbsError {
                call: "ibv_modify_qp",
                errno: rc_errno(rc),
            });
        }
        Ok(())
    }

    pub fn post_send(&self, wr: &mut ffi::SendWr) -> Result<(), VerbsError> {
        post_send(self.ptr, self.pd.ctx.ptr(), wr)
    }
}
