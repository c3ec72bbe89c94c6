//! Human-readable tables, JSON, and the progress bar.

use indicatif::{ProgressBar, ProgressStyle};
use peermem_probe::bench::{BenchReport, Progress};
use peermem_probe::check::CheckReport;
use peermem_probe::doctor::DoctorReport;
use peermem_probe::pair::PairReport;
use peermem_probe::report::{human_bytes, Status, Table};
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

pub fn check(r: &CheckReport) -> String {
    let mut out = headline("check", r.status, r.exit_code);
    out.push_str(&format!("buffer size {}\n", human_bytes(r.size)));
    if r.host_only {
        out.push_str("CUDA: not used (--host-only)\n");
    } else if r.cuda.available {
        out.push_str(&format!(
            "CUDA: driver API {}\n",
            r.cuda.driver_version.as_deref().unwrap_or("?")
        ));
        for g in &r.gpus {
            out.push_str(&format!(
                "GPU {}: {} at {} (dma-buf {})\n",
                g.ordinal,
                g.name,
                g.pci_bus_id,
                if g.dma_buf_supported {
                    "supported"
                } else {
                    "not supported"
                }
            ));
        }
    } else {
        out.push_str(&format!(
            "CUDA: unavailable ({})\n",
            r.cuda.error.as_deref().unwrap_or("?")
        ));
    }
    for d in &r.rdma_devices {
        match (&d.port, &d.error) {
            (Some(p), _) => out.push_str(&format!(
                "RDMA {}: port {} {}{}\n",
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
    let mut t = Table::new(&[
        "DEVICE",
        "GPU",
        "PATH",
        "REGISTRATION",
        "RESULT",
        "VERIFIED",
        "TIME",
    ]);
    let mut last = Vec::new();
    for p in &r.results {
        t.row(vec![
            p.rdma_device.clone(),
            p.gpu.map(|g| g.to_string()).unwrap_or_else(|| "-".into()),
            p.path.clone(),
            p.registration.clone(),
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
    out
}

fn f1(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into())
}

pub fn bench(r: &BenchReport) -> String {
    let mut out = headline("bench", r.status, r.exit_code);
    out.push_str(&format!(
        "RDMA device {}",
        r.rdma_device.as_deref().unwrap_or("-")
    ));
    out.push_str(&format!(", GPU {}\n\n", r.gpu.as_deref().unwrap_or("-")));
    let mut t = Table::new(&[
        "MEMORY",
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
            human_bytes(x.size),
            x.status.word().into(),
            x.iterations.to_string(),
            f1(x.reg_p50_us),
            f1(x.reg_p99_us),
            f1(x.dereg_p50_us),
            f1(x.dereg_p99_us),
        ]);
        notes(&mut t, &mut last, &x.error, &x.cause, &x.remedy);
    }
    out.push_str(&t.render());
    out.push('\n');
    let mut t = Table::new(&["PATH", "SIZE", "WRITES", "RESULT", "Gbit/s"]);
    let mut last = Vec::new();
    for b in &r.bandwidth {
        t.row(vec![
            b.path.into(),
            human_bytes(b.size),
            b.iterations.to_string(),
            b.status.word().into(),
            b.gbit_per_s
                .map(|g| format!("{g:.2}"))
                .unwrap_or_else(|| "-".into()),
        ]);
        notes(&mut t, &mut last, &b.error, &None, &None);
    }
    out.push_str(&t.render());
    out
}

pub fn pair(r: &PairReport) -> String {
    let mut out = headline(&format!("pair ({})", r.role), r.status, r.exit_code);
    let what = if r.role == "server" {
        "listening on"
    } else {
        "peer"
    };
    out.push_str(&format!(
        "{what} {}, RDMA device {}, {} memory, {}\n\n",
        r.address,
        r.rdma_device.as_deref().unwrap_or("-"),
        r.memory,
        human_bytes(r.size)
    ));
    let mut t = Table::new(&["DIRECTION", "RESULT", "VERIFIED", "TIME"]);
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
