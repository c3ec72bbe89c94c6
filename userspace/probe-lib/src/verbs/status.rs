//! Names of what the verbs layer reports: the failed step, errno values
//! and completion statuses. Plain facts, no advice: the diagnosis layer
//! (`remedy`) turns them into causes and remedies.

/// The verbs step of a test that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// ibv_reg_mr on host memory.
    RegHost,
    /// ibv_reg_mr on GPU memory (the peer-memory path).
    RegGpu,
    /// ibv_reg_dmabuf_mr on an exported GPU dma-buf.
    RegDmabuf,
    /// Opening the RDMA device.
    OpenDevice,
    /// Creating the loopback/connected QPs and CQ.
    CreateQp,
    /// Moving the QPs to RTR/RTS.
    ConnectQp,
}

/// The symbolic name of an errno value (EFAULT, ...).
pub fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        524 => "ENOTSUPP",
        _ => "errno",
    }
}

/// `EFAULT (Bad address)`.
pub fn errno_text(e: i32) -> String {
    let msg = std::io::Error::from_raw_os_error(e).to_string();
    let msg = msg.split(" (os error").next().unwrap_or(&msg).to_string();
    format!("{} ({msg})", errno_name(e))
}

/// `IBV_WC_...` name and libibverbs' description of a completion status.
pub fn wc_status_name(status: u32) -> String {
    let (name, text) = match status {
        0 => ("SUCCESS", "success"),
        1 => ("LOC_LEN_ERR", "local length error"),
        2 => ("LOC_QP_OP_ERR", "local QP operation error"),
        3 => ("LOC_EEC_OP_ERR", "local EE context operation error"),
        4 => ("LOC_PROT_ERR", "local protection error"),
        5 => ("WR_FLUSH_ERR", "work request flushed error"),
        6 => ("MW_BIND_ERR", "memory window bind error"),
        7 => ("BAD_RESP_ERR", "bad response error"),
        8 => ("LOC_ACCESS_ERR", "local access error"),
        9 => ("REM_INV_REQ_ERR", "remote invalid request error"),
        10 => ("REM_ACCESS_ERR", "remote access error"),
        11 => ("REM_OP_ERR", "remote operation error"),
        12 => ("RETRY_EXC_ERR", "transport retry counter exceeded"),
        13 => ("RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"),
        14 => ("LOC_RDD_VIOL_ERR", "local RDD violation error"),
        15 => ("REM_INV_RD_REQ_ERR", "remote invalid RD request"),
        16 => ("REM_ABORT_ERR", "aborted error"),
        17 => ("INV_EECN_ERR", "invalid EE context number"),
        18 => ("INV_EEC_STATE_ERR", "invalid EE context state"),
        19 => ("FATAL_ERR", "fatal error"),
        20 => ("RESP_TIMEOUT_ERR", "response timeout error"),
        21 => ("GENERAL_ERR", "general error"),
        22 => ("TM_ERR", "tag matching error"),
        23 => ("TM_RNDV_INCOMPLETE", "tag matching rendezvous incomplete"),
        _ => return format!("unknown completion status {status}"),
    };
    format!("IBV_WC_{name} ({text})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_texts() {
        assert_eq!(errno_text(libc::EFAULT), "EFAULT (Bad address)");
        assert_eq!(errno_name(libc::EOPNOTSUPP), "EOPNOTSUPP");
        assert_eq!(errno_name(524), "ENOTSUPP");
    }

    #[test]
    fn completion_statuses_are_decoded() {
        assert_eq!(
            wc_status_name(10),
            "IBV_WC_REM_ACCESS_ERR (remote access error)"
        );
        assert_eq!(
            wc_status_name(5),
            "IBV_WC_WR_FLUSH_ERR (work request flushed error)"
        );
        assert_eq!(wc_status_name(99), "unknown completion status 99");
    }
}
