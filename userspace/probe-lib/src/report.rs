//! Verdicts, exit codes and the plain-text table every subcommand prints.

use serde::Serialize;

/// The verdict of one row (a path, a doctor item, a measurement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Works (for doctor: nothing to fix).
    Pass,
    /// Works, or not applicable, with a caveat worth reading.
    Warn,
    /// Broken: the row's `cause` and `remedy` say why and what to do.
    Fail,
    /// Could not be tested here (no CUDA, no GPU, no RDMA device, ...).
    Untested,
    /// The mechanism does not exist on this host (e.g. no peer-memory
    /// interface in the kernel): not a failure.
    NotAvailable,
    /// Left out on request (`--host-only`, `--only`).
    Skipped,
    /// A fact, no verdict.
    Info,
}

impl Status {
    pub fn word(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Untested => "UNTESTED",
            Status::NotAvailable => "N/A",
            Status::Skipped => "SKIPPED",
            Status::Info => "info",
        }
    }
}

/// Process exit codes shared by every subcommand (documented in
/// userspace/README.md and `--help`).
///
/// 0: works; 1: does not work (the output says why and what to do);
/// 2: usage error (bad arguments, from the argument parser only);
/// 3: could not test (no CUDA, no GPU, no RDMA device, ...);
/// 4: internal error of the tool.
pub const EXIT_PASS: i32 = 0;
pub const EXIT_FAIL: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_UNTESTED: i32 = 3;
pub const EXIT_INTERNAL: i32 = 4;

/// Version of the JSON documents: bumped when a field changes meaning or
/// is removed (adding fields keeps it).
pub const SCHEMA_VERSION: u32 = 2;

/// 1 if anything failed, else 3 if something that mattered could not be
/// tested, else 0.
pub fn exit_code<I: IntoIterator<Item = Status>>(statuses: I) -> i32 {
    let mut code = EXIT_PASS;
    for s in statuses {
        match s {
            Status::Fail => return EXIT_FAIL,
            Status::Untested => code = EXIT_UNTESTED,
            _ => {}
        }
    }
    code
}

/// The overall verdict that matches an exit code.
pub fn overall(code: i32) -> Status {
    match code {
        EXIT_PASS => Status::Pass,
        EXIT_FAIL => Status::Fail,
        _ => Status::Untested,
    }
}

/// The overall answer of `bench` and `pair` (as `check` and `doctor` give
/// theirs): the status, the exit code and one sentence.
#[derive(Debug, Clone, Serialize)]
pub struct RunVerdict {
    pub status: Status,
    pub exit_code: i32,
    pub summary: String,
}

/// One row as the summary sees it: its name, verdict and cause.
pub struct Outcome<'a> {
    pub name: String,
    pub status: Status,
    pub cause: Option<&'a str>,
}

impl RunVerdict {
    /// From the rows: the exit code of the worst, and a sentence naming the
    /// failed (else the untested) rows with their causes, or the count of
    /// passed rows.
    pub fn from_rows(rows: &[Outcome<'_>]) -> RunVerdict {
        let code = exit_code(rows.iter().map(|r| r.status));
        let named = |st: Status| -> Vec<String> {
            rows.iter()
                .filter(|r| r.status == st)
                .map(|r| match r.cause {
                    Some(c) => format!("{} ({c})", r.name),
                    None => r.name.clone(),
                })
                .collect()
        };
        let list = |v: Vec<String>| {
            let n = v.len();
            let mut s = v.into_iter().take(3).collect::<Vec<_>>().join("; ");
            if n > 3 {
                s.push_str(&format!("; and {} more", n - 3));
            }
            s
        };
        let passed = rows.iter().filter(|r| r.status == Status::Pass).count();
        let summary = match code {
            EXIT_FAIL => {
                let f = named(Status::Fail);
                format!("{} failed: {}", f.len(), list(f))
            }
            EXIT_UNTESTED => format!("could not test: {}", list(named(Status::Untested))),
            _ if rows.is_empty() => "nothing was run".to_string(),
            _ => {
                let w = named(Status::Warn);
                if w.is_empty() {
                    format!("{passed} of {} passed", rows.len())
                } else {
                    format!("{passed} of {} passed; warnings: {}", rows.len(), list(w))
                }
            }
        };
        RunVerdict {
            status: overall(code),
            exit_code: code,
            summary,
        }
    }
}

/// A text table: left-aligned columns separated by two spaces; each row may
/// carry indented note lines (cause, remedy) printed under it.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<(Vec<String>, Vec<String>)>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push((cells, Vec::new()));
    }

    /// A note under the last row, e.g. "cause: ...".
    pub fn note(&mut self, line: String) {
        if let Some(last) = self.rows.last_mut() {
            last.1.push(line);
        }
    }

    pub fn render(&self) -> String {
        let n = self.header.len();
        let mut width: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for (cells, _) in &self.rows {
            for (i, c) in cells.iter().enumerate().take(n) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                if i + 1 == n {
                    s.push_str(c);
                } else {
                    s.push_str(&format!("{c:<w$}  ", w = width[i]));
                }
            }
            s.trim_end().to_string()
        };
        let mut out = line(&self.header);
        out.push('\n');
        for (cells, notes) in &self.rows {
            out.push_str(&line(cells));
            out.push('\n');
            for note in notes {
                out.push_str("    ");
                out.push_str(note);
                out.push('\n');
            }
        }
        out
    }
}

/// Bytes in a human unit (KiB, MiB, GiB).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Parses a size such as `64K`, `1M`, `1MiB`, `2g` or `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (examples: 4096, 64K, 1M, 1G)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (use K, M or G)")),
    };
    n.checked_mul(mult)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("'{s}' is not a usable size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_worst_row() {
        assert_eq!(exit_code([Status::Pass, Status::Info, Status::Warn]), 0);
        assert_eq!(exit_code([Status::Pass, Status::Untested]), 3);
        assert_eq!(exit_code([Status::Untested, Status::Fail, Status::Pass]), 1);
        assert_eq!(exit_code([]), 0);
        assert_eq!(overall(3), Status::Untested);
        assert_eq!(overall(4), Status::Untested);
    }

    #[test]
    fn table_aligns_and_indents_notes() {
        let mut t = Table::new(&["PATH", "RESULT", "DETAIL"]);
        t.row(vec!["host->gpu".into(), "PASS".into(), "ok".into()]);
        t.row(vec!["gpu->gpu".into(), "FAIL".into(), "EFAULT".into()]);
        t.note("remedy: load it".into());
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "PATH       RESULT  DETAIL");
        assert_eq!(lines[2], "gpu->gpu   FAIL    EFAULT");
        assert_eq!(lines[3], "    remedy: load it");
    }

    #[test]
    fn run_verdict_names_the_worst_rows() {
        let o = |name: &str, status, cause| Outcome {
            name: name.into(),
            status,
            cause,
        };
        let v = RunVerdict::from_rows(&[
            o("host->host", Status::Pass, None),
            o("gpu write", Status::Untested, Some("no CUDA")),
        ]);
        assert_eq!((v.exit_code, v.status), (3, Status::Untested));
        assert_eq!(v.summary, "could not test: gpu write (no CUDA)");
        let v = RunVerdict::from_rows(&[
            o("a", Status::Fail, Some("EFAULT")),
            o("b", Status::Untested, None),
            o("c", Status::Fail, None),
        ]);
        assert_eq!(v.exit_code, 1);
        assert_eq!(v.summary, "2 failed: a (EFAULT); c");
        let v = RunVerdict::from_rows(&[
            o("a", Status::Pass, None),
            o("b", Status::Warn, Some("slow")),
        ]);
        assert_eq!(
            (v.exit_code, v.summary.as_str()),
            (0, "1 of 2 passed; warnings: b (slow)")
        );
        assert_eq!(RunVerdict::from_rows(&[]).summary, "nothing was run");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("big").is_err());
        assert_eq!(human_bytes(65536), "64 KiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(100), "100 B");
    }
}
