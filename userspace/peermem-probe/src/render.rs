//! Human-readable tables, JSON, and the progress bar.

use indicatif::{ProgressBar, ProgressStyle};
use peermem_probe::bench::{BenchReport, Progress};
use peermem_probe::check::CheckReport;
use peermem_probe::doctor::DoctorReport;
use peermem_probe::pair::PairReport;
use peermem_probe::platform::Kind;
use peermem_probe::report::{human_bytes, Status, Table};
use peermem_probe::verdict::{Mechanism, Verdict};
use serde::Serialize;

pub fn json<T: Serialize>(r: &T) -> Result<String, String> {
    serde_json::to_string_pretty(r)
        .map(|s| s + "\n")
        .map_err(|e| format!("JSON output: {e}"))
}

fn headline(cmd: &str, status: Status, code: i32) -> String {
    format!("peermem-probe {cmd}: {} (exit {code})\n", status.word())
}

/// Adds cause/remedy/error notes under the last row, skipping notes equal
/// to the previous row's (so ten rows with one cause print it once).
fn notes(
    t: &mut Table,
    last: &mut Vec<String>,
    error: &Option<String>,
    cause: &Option<String>,
    remedy: &Option<String>,
) {
    let mut now = Vec::new();
    if let Some(e) = error {
        now.push(format!("error:  {e}"));
    }
    if let Some(c) = cause {
        now.push(format!("cause:  {c}"));
    }
    if let Some(r) = remedy {
        now.push(format!("remedy: {r}"));
    }
    if now != *last {
        for n in &now {
            t.note(n.clone());
        }
    }
    *last = now;
}

fn us(v: Option<u64>) -> String {
    v.map(|u| format!("{u} us")).unwrap_or_else(|| "-".into())
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

pub fn check(r: &CheckReport) -> String {
    let mut out = format!(
        "peermem-probe check: {} (exit {})\n",
        r.verdict.summary, r.exit_code
    );
    out.push_str(&format!("buffer size {}\n", human_bytes(r.size)));
    if r.host_only {
        out.push_str("CUDA: not used (--host-only)\n");
    } else if r.cuda.available {
        out.push_str(&format!(
            "CUDA: driver API {}\n",
            r.cuda.driver_version.as_deref().unwrap_or("unknown")
        ));
        for g in &r.gpus {
            out.push_str(&format!(
                "GPU {}: {} at {}: GPUDirect RDMA {}, on cuMemCreate memory {}, dma-buf {}{}{}\n",
                g.ordinal,
                g.name,
                g.pci_bus_id,
                yes_no(g.gpu_direct_rdma_supported),
                yes_no(g.gpu_direct_rdma_with_vmm),
                yes_no(Some(g.dma_buf_supported)),
                g.flush_writes_options
                    .as_ref()
                    .map(|f| format!(", flush options [{}]", f.join(",")))
                    .unwrap_or_default(),
                g.writes_ordering
                    .map(|o| format!(", writes ordering {o}"))
                    .unwrap_or_default()
            ));
            if g.platform != Kind::Discrete {
                out.push_str(&format!(
                    "GPU {}: {}: {}\n",
                    g.ordinal,
                    g.platform.label(),
                    g.platform.meaning()
                ));
            }
        }
    } else {
        out.push_str(&format!(
            "CUDA: unavailable ({})\n",
            r.cuda.error.as_deref().unwrap_or("unknown error")
        ));
    }
    for d in &r.rdma_devices {
        let dmabuf = match d.dma_buf_mr_supported {
            Some(true) => ", dma-buf MRs supported",
            Some(false) => ", dma-buf MRs not supported",
            None => "",
        };
        match (&d.port, &d.error) {
            (Some(p), _) => out.push_str(&format!(
                "RDMA {}: port {} {}{}{dmabuf}\n",
                d.name,
                p.port,
                p.link_layer,
                p.gid_index
                    .map(|i| format!(", GID {i} {}", p.gid))
                    .unwrap_or_else(|| format!(", LID {}", p.lid))
            )),
            (None, e) => out.push_str(&format!(
                "RDMA {}: {}\n",
                d.name,
                e.as_deref().unwrap_or("unusable")
            )),
        }
    }
    out.push('\n');
    let mut t = Table::new(&["MECHANISM", "DEVICE", "VERDICT", "PATHS"]);
    for m in &r.mechanisms {
        t.row(vec![
            m.mechanism.label().into(),
            m.rdma_device.clone().unwrap_or_else(|| "-".into()),
            m.verdict.word().into(),
            format!("{}/{} passed", m.passed, m.rows),
        ]);
        if m.verdict != Verdict::Works {
            if let Some(c) = &m.cause {
                t.note(format!("cause:  {c}"));
            }
            if let Some(x) = &m.remedy {
                t.note(format!("remedy: {x}"));
            }
        }
    }
    out.push_str(&t.render());
    out.push('\n');
    let mut t = Table::new(&[
        "DEVICE",
        "GPU",
        "MEMORY",
        "PATH",
        "MECHANISM",
        "RESULT",
        "VERIFIED",
        "TIME",
    ]);
    let mut last = Vec::new();
    for p in &r.results {
        t.row(vec![
            p.rdma_device.clone().unwrap_or_else(|| "-".into()),
            p.gpu.map(|g| g.to_string()).unwrap_or_else(|| "-".into()),
            match (p.mechanism, p.allocation) {
                (Mechanism::Host, _) => "host".into(),
                (_, Some(a)) => a.label().into(),
                (_, None) => "-".into(),
            },
            p.path.clone().unwrap_or_else(|| "all".into()),
            p.mechanism.label().into(),
            p.status.word().into(),
            if p.status == Status::Pass || p.verified_bytes > 0 {
                human_bytes(p.verified_bytes)
            } else {
                "-".into()
            },
            us(p.micros),
        ]);
        let err = p.error.as_ref().map(|e| match &p.failed_step {
            Some(s) if !e.starts_with(s.as_str()) => format!("{s}: {e}"),
            _ => e.clone(),
        });
        notes(&mut t, &mut last, &err, &p.cause, &p.remedy);
    }
    out.push_str(&t.render());
    out
}

pub fn doctor(r: &DoctorReport) -> String {
    let mut out = headline("doctor", r.status, r.exit_code);
    out.push_str(&format!("{}\n", r.verdict.summary));
    out.push_str(&format!("kernel {}\n\n", r.kernel));
    let mut t = Table::new(&["AREA", "ITEM", "STATUS", "VALUE"]);
    for i in &r.items {
        t.row(vec![
            i.area.into(),
            i.name.clone(),
            i.status.word().into(),
            i.value.clone(),
        ]);
        if let Some(d) = &i.detail {
            t.note(format!("detail: {d}"));
        }
        if let Some(m) = &i.remedy {
            t.note(format!("remedy: {m}"));
        }
    }
    out.push_str(&t.render());
    out.push_str(&matrix(r));
    out
}

/// GPU x NIC: path type and NCCL's default GPUDirect RDMA decision.
fn matrix(r: &DoctorReport) -> String {
    if r.nccl.is_empty() {
        return String::new();
    }
    let mut gpus: Vec<&str> = Vec::new();
    let mut nics: Vec<&str> = Vec::new();
    for n in &r.nccl {
        if !gpus.contains(&n.gpu.as_str()) {
            gpus.push(&n.gpu);
        }
        if !nics.contains(&n.rdma_device.as_str()) {
            nics.push(&n.rdma_device);
        }
    }
    let mut head = vec!["GPU \\ NIC"];
    head.extend(nics.iter().copied());
    let mut t = Table::new(&head);
    for g in &gpus {
        let mut row = vec![g.to_string()];
        for nic in &nics {
            let cell = r
                .nccl
                .iter()
                .find(|n| n.gpu == *g && n.rdma_device == *nic)
                .map(|n| match n.path_type {
                    None => "soft (no GDR)".to_string(),
                    Some(p) if n.gdr_by_default => format!("{} GDR", p.name()),
                    Some(p) => format!("{} no GDR", p.name()),
                })
                .unwrap_or_default();
            row.push(cell);
        }
        t.row(row);
    }
    format!(
        "\nNCCL's GPUDirect RDMA decision (NCCL_NET_GDR_LEVEL default PXB):\n{}",
        t.render()
    )
}

fn f1(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into())
}

pub fn bench(r: &BenchReport) -> String {
    let mut out = headline("bench", r.status, r.exit_code);
    out.push_str(&format!("verdict: {}\n", r.verdict.summary));
    out.push_str(&format!(
        "RDMA device {}",
        r.rdma_device.as_deref().unwrap_or("-")
    ));
    out.push_str(&format!(
        ", GPU {}{}\n\n",
        r.gpu.as_deref().unwrap_or("-"),
        r.gpu_allocation
            .filter(|_| r.gpu.is_some())
            .map(|a| format!(" ({} memory)", a.label()))
            .unwrap_or_default()
    ));
    if let Some(f) = &r.setup {
        out.push_str(&format!("setup: {}\n", f.status.word()));
        for (k, v) in [
            ("error:  ", &f.error),
            ("cause:  ", &f.cause),
            ("remedy: ", &f.remedy),
        ] {
            if let Some(v) = v {
                out.push_str(&format!("    {k}{v}\n"));
            }
        }
        return out;
    }
    let mut t = Table::new(&[
        "MEMORY",
        "REGISTRATION",
        "SIZE",
        "RESULT",
        "ITERS",
        "REG p50 us",
        "REG p99 us",
        "DEREG p50 us",
        "DEREG p99 us",
    ]);
    let mut last = Vec::new();
    for x in &r.registration {
        t.row(vec![
            x.memory.into(),
            x.registration.into(),
            human_bytes(x.size),
            x.status.word().into(),
            x.iterations.map_or("-".into(), |n| n.to_string()),
            f1(x.reg_p50_us),
            f1(x.reg_p99_us),
            f1(x.dereg_p50_us),
            f1(x.dereg_p99_us),
        ]);
        notes(&mut t, &mut last, &x.error, &x.cause, &x.remedy);
    }
    out.push_str(&t.render());
    out.push('\n');
    let mut t = Table::new(&[
        "PATH", "OP", "SIZE", "QPS", "ITERS", "RESULT", "Gbit/s", "MB/s", "Mmsg/s", "GPU/HOST",
    ]);
    let mut last = Vec::new();
    let f = |v: Option<f64>, p: usize| v.map(|x| format!("{x:.p$}")).unwrap_or_else(|| "-".into());
    for b in &r.bandwidth {
        t.row(vec![
            b.path.into(),
            b.op.into(),
            human_bytes(b.size),
            b.qps.to_string(),
            b.iterations.map_or("-".into(), |n| n.to_string()),
            b.status.word().into(),
            f(b.gbit_per_s, 2),
            f(b.mb_per_s, 1),
            f(b.msg_rate_mpps, 6),
            f(b.gpu_vs_host, 2),
        ]);
        notes(&mut t, &mut last, &b.error, &None, &None);
    }
    out.push_str(&t.render());
    out
}

pub fn pair(r: &PairReport) -> String {
    let mut out = headline(&format!("pair ({})", r.role), r.status, r.exit_code);
    out.push_str(&format!("verdict: {}\n", r.verdict.summary));
    let what = match (r.role, r.listening) {
        ("server", true) => "listening on",
        ("server", false) => "could not listen on",
        _ => "peer",
    };
    out.push_str(&format!(
        "{what} {}, RDMA device {}, {} memory, {}\n\n",
        r.address,
        r.rdma_device.as_deref().unwrap_or("-"),
        r.memory,
        human_bytes(r.size)
    ));
    let mut t = Table::new(&["DIRECTION", "RESULT", "VERIFIED", "TIME", "Gbit/s"]);
    let mut last = Vec::new();
    for x in &r.results {
        t.row(vec![
            x.direction.into(),
            x.status.word().into(),
            if x.verified_bytes > 0 {
                human_bytes(x.verified_bytes)
            } else {
                "-".into()
            },
            us(x.micros),
            x.gbit_per_s
                .map(|g| format!("{g:.2}"))
                .unwrap_or_else(|| "-".into()),
        ]);
        notes(&mut t, &mut last, &x.error, &x.cause, &x.remedy);
    }
    out.push_str(&t.render());
    out
}

/// indicatif on stderr; hidden with --json or when stderr is no terminal.
pub struct Bar {
    bar: Option<ProgressBar>,
    hidden: bool,
}

impl Bar {
    pub fn new(json: bool) -> Bar {
        Bar {
            bar: None,
            hidden: json,
        }
    }
    pub fn done(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn start(&mut self, total: u64) {
        if self.hidden {
            return;
        }
        let b = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}") {
            b.set_style(style);
        }
        self.bar = Some(b);
    }
    fn tick(&mut self, msg: &str) {
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
            b.inc(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peermem_probe::check::{CheckReport, CudaSummary, PathResult};
    use peermem_probe::remedy::Diagnosis;

    fn report(rows: Vec<PathResult>) -> CheckReport {
        let mut r = CheckReport {
            schema_version: 2,
            command: "check",
            version: "0",
            status: Status::Pass,
            exit_code: 0,
            verdict: peermem_probe::verdict::overall(&[], false),
            mechanisms: vec![],
            host_only: false,
            size: 1 << 20,
            cuda: CudaSummary {
                available: false,
                driver_version: None,
                error: Some("libcuda.so not found".into()),
            },
            gpus: vec![],
            rdma_devices: vec![],
            results: rows,
        };
        peermem_probe::check::finish(&mut r);
        r
    }

    fn d(c: &str) -> Diagnosis {
        Diagnosis {
            cause: c.into(),
            remedy: format!("fix {c}"),
        }
    }

    #[test]
    fn a_server_that_never_listened_does_not_say_listening() {
        use peermem_probe::pair::PairReport;
        let mut r = PairReport {
            schema_version: 2,
            command: "pair",
            version: "0",
            role: "server",
            status: Status::Fail,
            exit_code: 1,
            verdict: peermem_probe::report::RunVerdict::from_rows(&[]),
            address: "192.0.2.7:18515".into(),
            listening: false,
            rdma_device: None,
            memory: "host".into(),
            size: 1 << 20,
            results: vec![],
        };
        let t = pair(&r);
        assert!(t.contains("could not listen on 192.0.2.7:18515"), "{t}");
        assert!(!t.contains("\nlistening on"), "{t}");
        r.listening = true;
        assert!(pair(&r).contains("\nlistening on 192.0.2.7:18515"));
    }

    #[test]
    fn check_table_leads_with_the_verdict_per_mechanism() {
        let mut host =
            PathResult::new(Some("mlx5_0"), None, Mechanism::Host, 1 << 20).path("host->host");
        host.verified_bytes = 1 << 20;
        let mut dmabuf = PathResult::new(Some("mlx5_0"), Some(0), Mechanism::DmaBuf, 1 << 20)
            .path("gpu->gpu")
            .alloc(Some(peermem_probe::cuda::Allocation::CuMemCreate));
        dmabuf.verified_bytes = 1 << 20;
        let peer = PathResult::new(Some("mlx5_0"), Some(0), Mechanism::PeerMemory, 1 << 20)
            .not_available(d("no interface"));
        let t = check(&report(vec![host, peer, dmabuf]));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "peermem-probe check: GPUDirect RDMA works via dma-buf (mlx5_0) (exit 0)"
        );
        assert!(
            t.contains("\nMECHANISM    DEVICE  VERDICT        PATHS\n"),
            "{t}"
        );
        assert!(t.contains("\npeer memory  mlx5_0  not available  0/1 passed\n    cause:  no interface\n    remedy: fix no interface\n"), "{t}");
        assert!(
            t.contains("\ndma-buf      mlx5_0  works          1/1 passed\n"),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.starts_with("mlx5_0  0    cuMemCreate  gpu->gpu    dma-buf      PASS")),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.starts_with("mlx5_0  0    -            all         peer memory  N/A")),
            "{t}"
        );
    }

    #[test]
    fn a_failing_mechanism_alone_is_exit_1() {
        let mut host =
            PathResult::new(Some("rxe0"), None, Mechanism::Host, 4096).path("host->host");
        host.verified_bytes = 4096;
        let mut bad = PathResult::new(Some("rxe0"), Some(0), Mechanism::PeerMemory, 4096)
            .path("host->gpu")
            .fail(Status::Fail, "rdma write", "work request 7 completed with IBV_WC_REM_ACCESS_ERR (remote access error) (vendor_err 0x88)".into(), None, d("access"));
        bad.vendor_err = Some(0x88);
        let r = report(vec![host, bad]);
        assert_eq!(r.exit_code, 1);
        let t = check(&r);
        assert!(t.starts_with("peermem-probe check: GPUDirect RDMA does not work: peer memory fails (access) (exit 1)\n"), "{t}");
        assert!(t.contains("error:  rdma write: work request 7 completed with IBV_WC_REM_ACCESS_ERR (remote access error) (vendor_err 0x88)"), "{t}");
    }
}
