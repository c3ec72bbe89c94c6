//! One verdict per GPUDirect mechanism (peer memory, dma-buf, host
//! memory) from the rows of a check, and the overall answer with its exit
//! code: "GPUDirect RDMA works via X" as soon as one GPU mechanism works.

use crate::report::{Status, EXIT_FAIL, EXIT_PASS, EXIT_UNTESTED};
use serde::Serialize;

/// How the RDMA device reaches the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// ibv_reg_mr on a GPU address, served by a peer-memory client
    /// (nvidia-peermem, peermem_rs, nv_peer_mem).
    PeerMemory,
    /// cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr.
    DmaBuf,
    /// Host memory: proves the RDMA device itself works.
    Host,
}

impl Mechanism {
    pub fn label(self) -> &'static str {
        match self {
            Mechanism::PeerMemory => "peer memory",
            Mechanism::DmaBuf => "dma-buf",
            Mechanism::Host => "host memory",
        }
    }
    pub fn is_gpu(self) -> bool {
        self != Mechanism::Host
    }
}

/// The answer for one mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Works,
    Fails,
    NotAvailable,
    Untested,
    Skipped,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Works => "works",
            Verdict::Fails => "FAILS",
            Verdict::NotAvailable => "not available",
            Verdict::Untested => "not tested",
            Verdict::Skipped => "skipped",
        }
    }
}

/// What a verdict is computed from: one row of a check.
#[derive(Debug, Clone)]
pub struct RowView<'a> {
    pub mechanism: Mechanism,
    pub rdma_device: Option<&'a str>,
    pub status: Status,
    pub cause: Option<&'a str>,
    pub remedy: Option<&'a str>,
}

/// A mechanism's verdict on one RDMA device, over all GPUs and paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MechanismVerdict {
    pub mechanism: Mechanism,
    pub rdma_device: Option<String>,
    pub verdict: Verdict,
    /// Rows that passed, and all rows.
    pub passed: usize,
    pub rows: usize,
    pub cause: Option<String>,
    pub remedy: Option<String>,
}

/// Groups rows by (device, mechanism) in first-seen order: any failed row
/// fails the mechanism; else it works when some row passed; else it is
/// not available, untested or skipped (the first such row's cause).
pub fn per_mechanism(rows: &[RowView]) -> Vec<MechanismVerdict> {
    let mut out: Vec<MechanismVerdict> = Vec::new();
    for r in rows {
        let dev = r.rdma_device.map(str::to_string);
        let i = match out
            .iter()
            .position(|m| m.mechanism == r.mechanism && m.rdma_device == dev)
        {
            Some(i) => i,
            None => {
                out.push(MechanismVerdict {
                    mechanism: r.mechanism,
                    rdma_device: dev,
                    verdict: Verdict::Skipped,
                    passed: 0,
                    rows: 0,
                    cause: None,
                    remedy: None,
                });
                out.len() - 1
            }
        };
        let m = &mut out[i];
        m.rows += 1;
        let rank = |v: Verdict| match v {
            Verdict::Fails => 5,
            Verdict::Works => 4,
            Verdict::NotAvailable => 3,
            Verdict::Untested => 2,
            Verdict::Skipped => 1,
        };
        let v = match r.status {
            Status::Pass | Status::Warn | Status::Info => {
                m.passed += 1;
                Verdict::Works
            }
            Status::Fail => Verdict::Fails,
            Status::NotAvailable => Verdict::NotAvailable,
            Status::Untested => Verdict::Untested,
            Status::Skipped => Verdict::Skipped,
        };
        if rank(v) > rank(m.verdict) {
            m.verdict = v;
            m.cause = r.cause.map(str::to_string);
            m.remedy = r.remedy.map(str::to_string);
        }
    }
    out
}

/// The overall answer of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Overall {
    /// True when some GPU mechanism works (or, with --host-only, the host
    /// path works).
    pub works: bool,
    /// The GPU mechanisms that work, e.g. ["dma_buf"].
    pub via: Vec<Mechanism>,
    pub exit_code: i32,
    /// One sentence.
    pub summary: String,
}

/// The overall answer from the per-mechanism verdicts.
pub fn overall(mechs: &[MechanismVerdict], host_only: bool) -> Overall {
    let mut via: Vec<Mechanism> = Vec::new();
    for m in mechs {
        if m.mechanism.is_gpu() && m.verdict == Verdict::Works && !via.contains(&m.mechanism) {
            via.push(m.mechanism);
        }
    }
    let any = |v: Verdict, gpu: Option<bool>| {
        mechs
            .iter()
            .find(|m| m.verdict == v && gpu.is_none_or(|g| m.mechanism.is_gpu() == g))
    };
    let devs = |mech: Mechanism| {
        let d: Vec<&str> = mechs
            .iter()
            .filter(|m| m.mechanism == mech && m.verdict == Verdict::Works)
            .filter_map(|m| m.rdma_device.as_deref())
            .collect();
        d.join(", ")
    };
    let done = |works: bool, via: Vec<Mechanism>, code: i32, summary: String| Overall {
        works,
        via,
        exit_code: code,
        summary,
    };
    if host_only {
        return match (any(Verdict::Fails, None), any(Verdict::Works, Some(false))) {
            (Some(f), _) => done(
                false,
                via,
                EXIT_FAIL,
                format!(
                    "the RDMA device{} does not work with host memory",
                    f.rdma_device
                        .as_deref()
                        .map(|d| format!(" {d}"))
                        .unwrap_or_default()
                ),
            ),
            (None, Some(_)) => done(
                true,
                via,
                EXIT_PASS,
                format!(
                    "RDMA works with host memory on {} (GPU memory not tested: --host-only)",
                    devs(Mechanism::Host)
                ),
            ),
            (None, None) => done(
                false,
                via,
                EXIT_UNTESTED,
                "could not test: no usable RDMA device".into(),
            ),
        };
    }
    if !via.is_empty() {
        let parts: Vec<String> = via
            .iter()
            .map(|m| format!("{} ({})", m.label(), devs(*m)))
            .collect();
        return done(
            true,
            via,
            EXIT_PASS,
            format!("GPUDirect RDMA works via {}", parts.join(" and ")),
        );
    }
    if let Some(f) = any(Verdict::Fails, None) {
        return done(
            false,
            via,
            EXIT_FAIL,
            format!(
                "GPUDirect RDMA does not work: {} fails{}",
                f.mechanism.label(),
                f.cause
                    .as_deref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            ),
        );
    }
    if let Some(u) = any(Verdict::Untested, Some(true)) {
        return done(
            false,
            via,
            EXIT_UNTESTED,
            format!(
                "could not test GPUDirect RDMA{}",
                u.cause
                    .as_deref()
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default()
            ),
        );
    }
    if any(Verdict::NotAvailable, Some(true)).is_some() {
        return done(
            false,
            via,
            EXIT_FAIL,
            "GPUDirect RDMA does not work: neither peer memory nor dma-buf is available on this host"
                .into(),
        );
    }
    done(
        false,
        via,
        EXIT_UNTESTED,
        "could not test: no usable RDMA device".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use Mechanism::*;
    use Status::*;

    fn r(mechanism: Mechanism, status: Status, cause: &str) -> RowView<'_> {
        RowView {
            mechanism,
            rdma_device: Some("mlx5_0"),
            status,
            cause: (!cause.is_empty()).then_some(cause),
            remedy: None,
        }
    }

    fn verdicts(rows: &[RowView]) -> Vec<(Mechanism, Verdict)> {
        per_mechanism(rows)
            .iter()
            .map(|m| (m.mechanism, m.verdict))
            .collect()
    }

    #[test]
    fn dmabuf_only_kernel_works_via_dmabuf() {
        // Upstream/Ubuntu >= 6.8: no peer-memory interface, dma-buf works.
        let rows = [
            r(Host, Pass, ""),
            r(PeerMemory, NotAvailable, "no peer-memory interface"),
            r(PeerMemory, NotAvailable, "no peer-memory interface"),
            r(DmaBuf, Pass, ""),
            r(DmaBuf, Pass, ""),
        ];
        let m = per_mechanism(&rows);
        assert_eq!(
            verdicts(&rows),
            [
                (Host, Verdict::Works),
                (PeerMemory, Verdict::NotAvailable),
                (DmaBuf, Verdict::Works)
            ]
        );
        assert_eq!(m[1].cause.as_deref(), Some("no peer-memory interface"));
        let o = overall(&m, false);
        assert_eq!(o.exit_code, 0);
        assert!(o.works);
        assert_eq!(o.via, [DmaBuf]);
        assert_eq!(o.summary, "GPUDirect RDMA works via dma-buf (mlx5_0)");
    }

    #[test]
    fn one_failing_mechanism_does_not_fail_a_working_host() {
        // DOCA-OFED + nvidia-peermem, proprietary driver: dma-buf export
        // refused, peer memory works.
        let rows = [
            r(Host, Pass, ""),
            r(PeerMemory, Pass, ""),
            r(DmaBuf, Fail, "proprietary module"),
        ];
        let o = overall(&per_mechanism(&rows), false);
        assert_eq!((o.exit_code, o.via.clone()), (0, vec![PeerMemory]));
    }

    #[test]
    fn failures_beat_untested_and_not_available() {
        let rows = [
            r(Host, Pass, ""),
            r(PeerMemory, Pass, ""),
            r(PeerMemory, Fail, "verify: bytes differ"),
            r(DmaBuf, NotAvailable, "no dma-buf MRs"),
        ];
        let m = per_mechanism(&rows);
        assert_eq!(m[1].verdict, Verdict::Fails);
        assert_eq!(m[1].passed, 1);
        let o = overall(&m, false);
        assert_eq!(o.exit_code, 1);
        assert!(
            o.summary.contains("peer memory fails (verify"),
            "{}",
            o.summary
        );
    }

    #[test]
    fn nothing_available_is_a_no_and_untested_is_code_3() {
        let rows = [
            r(Host, Pass, ""),
            r(PeerMemory, NotAvailable, "x"),
            r(DmaBuf, NotAvailable, "y"),
        ];
        assert_eq!(overall(&per_mechanism(&rows), false).exit_code, 1);
        let rows = [
            r(Host, Pass, ""),
            r(PeerMemory, NotAvailable, "x"),
            r(DmaBuf, Untested, "libcuda.so not found"),
        ];
        let o = overall(&per_mechanism(&rows), false);
        assert_eq!(o.exit_code, 3);
        assert_eq!(
            o.summary,
            "could not test GPUDirect RDMA: libcuda.so not found"
        );
        assert_eq!(overall(&[], false).exit_code, 3);
    }

    #[test]
    fn host_only() {
        let m = per_mechanism(&[r(Host, Pass, "")]);
        let o = overall(&m, true);
        assert_eq!(o.exit_code, 0);
        assert!(o
            .summary
            .starts_with("RDMA works with host memory on mlx5_0"));
        let m = per_mechanism(&[r(Host, Fail, "retry exceeded")]);
        assert_eq!(overall(&m, true).exit_code, 1);
        assert_eq!(overall(&[], true).exit_code, 3);
    }

    #[test]
    fn skipped_rows_never_decide() {
        let rows = [
            r(Host, Pass, ""),
            r(PeerMemory, Skipped, ""),
            r(DmaBuf, Pass, ""),
        ];
        let o = overall(&per_mechanism(&rows), false);
        assert_eq!((o.exit_code, o.via.clone()), (0, vec![DmaBuf]));
    }
}
