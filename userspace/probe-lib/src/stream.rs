//! Streams of RDMA WRITE or READ work requests over connected QPs, with
//! every completion matched to the work request it belongs to.

use crate::verbs::{ffi, wc_status_name, Cq, PollError, VerbsError};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The RDMA operation of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// local -> remote.
    Write,
    /// remote -> local.
    Read,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "RDMA WRITE",
            Op::Read => "RDMA READ",
        }
    }
}

/// Why a transfer did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XferError {
    Post(VerbsError),
    Poll(PollError),
    /// A completion for a work request this stream did not post (or
    /// already completed): the CQ is not trustworthy.
    Stray(u64),
}

impl std::fmt::Display for XferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            XferError::Post(e) => write!(f, "{e}"),
            XferError::Poll(PollError::Verbs(e)) => write!(f, "{e}"),
            XferError::Poll(PollError::Wc(w)) => write!(
                f,
                "work request {} completed with {} (vendor_err 0x{:x})",
                w.wr_id,
                wc_status_name(w.status),
                w.vendor_err
            ),
            XferError::Poll(PollError::Timeout(t)) => {
                write!(f, "timeout: no completion within {} s", t.as_secs_f64())
            }
            XferError::Stray(id) => write!(f, "completion for unknown work request {id}"),
        }
    }
}

/// What to stream.
#[derive(Debug, Clone, Copy)]
pub struct Stream {
    pub op: Op,
    /// Local buffer address and lkey.
    pub local: (u64, u32),
    /// Remote buffer address and rkey.
    pub remote: (u64, u32),
    /// Bytes per operation; split into messages of at most `max_msg`.
    pub len: usize,
    pub count: usize,
    pub max_msg: u32,
    /// Work requests in flight per QP.
    pub depth: usize,
    pub timeout: Duration,
}

/// The messages of a stream: (offset, length) pairs.
pub fn messages(len: usize, count: usize, max_msg: u32) -> Vec<(u64, usize)> {
    let msg = (max_msg as usize).clamp(4096, 1 << 30);
    let mut out = Vec::new();
    for _ in 0..count {
        let mut off = 0;
        while off < len {
            let n = (len - off).min(msg);
            out.push((off as u64, n));
            off += n;
        }
    }
    out
}

/// Work-request ids of this process's streams: unique across streams so a
/// late completion of an earlier stream is recognised as stray.
fn next_base(n: usize) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1 << 32);
    NEXT.fetch_add(n as u64 + 1, Ordering::Relaxed)
}

/// Posts one work request on one QP.
pub type PostFn<'a> = &'a dyn Fn(&mut ffi::SendWr) -> Result<(), VerbsError>;

/// Posts every message of `s` round-robin over `posts` (one per QP),
/// keeping up to `depth` in flight per QP, and waits for each completion
/// by its work-request id. A timeout is reported as a timeout.
pub fn rdma_stream(posts: &[PostFn], cq: &Cq, s: Stream) -> Result<Duration, XferError> {
    let msgs = messages(s.len, s.count, s.max_msg);
    let base = next_base(msgs.len());
    let nq = posts.len().max(1);
    let mut outstanding: HashSet<u64> = HashSet::new();
    let mut per_qp = vec![0usize; nq];
    let start = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    let depth = s.depth.max(1);
    crate::trace!(
        "{} {} x {} bytes over {} QP(s), {} work requests",
        s.op.name(),
        s.count,
        s.len,
        nq,
        msgs.len()
    );
    while done < msgs.len() {
        while posted < msgs.len() && per_qp[posted % nq] < depth {
            let (off, n) = msgs[posted];
            let mut sge = ffi::Sge {
                addr: s.local.0 + off,
                length: n as u32,
                lkey: s.local.1,
            };
            let mut wr = ffi::SendWr::zeroed();
            wr.wr_id = base + posted as u64;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = match s.op {
                Op::Write => ffi::WR_RDMA_WRITE,
                Op::Read => ffi::WR_RDMA_READ,
            };
            wr.send_flags = ffi::SEND_SIGNALED;
            wr.remote_addr = s.remote.0 + off;
            wr.rkey = s.remote.1;
            posts[posted % nq](&mut wr).map_err(XferError::Post)?;
            outstanding.insert(wr.wr_id);
            per_qp[posted % nq] += 1;
            posted += 1;
        }
        let got = cq.wait(1, s.timeout).map_err(XferError::Poll)?;
        for id in got {
            if !outstanding.remove(&id) {
                return Err(XferError::Stray(id));
            }
            let i = (id - base) as usize;
            per_qp[i % nq] -= 1;
            done += 1;
        }
    }
    Ok(start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_split_at_max_msg() {
        assert_eq!(
            messages(10_000, 1, 4096),
            [(0, 4096), (4096, 4096), (8192, 1808)]
        );
        assert_eq!(messages(100, 2, 0), [(0, 100), (0, 100)]);
        assert!(messages(0, 3, 4096).is_empty());
    }

    #[test]
    fn stream_ids_never_repeat() {
        let a = next_base(10);
        let b = next_base(10);
        assert!(b >= a + 11);
    }

    #[test]
    fn errors_read_as_what_happened() {
        let t = XferError::Poll(PollError::Timeout(Duration::from_secs(10)));
        assert_eq!(t.to_string(), "timeout: no completion within 10 s");
        let w = XferError::Poll(PollError::Wc(crate::verbs::WcError {
            status: 12,
            wr_id: 7,
            vendor_err: 0x81,
        }));
        assert_eq!(
            w.to_string(),
            "work request 7 completed with IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded) (vendor_err 0x81)"
        );
    }
}
