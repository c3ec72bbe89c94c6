//! The command line's rough edges (issue 23): contradictory flags and bad
//! numbers exit 2 with a message naming the fix; a host without an RDMA
//! device is blamed, not "the hosts"; every report has `verdict.summary`;
//! `doctor --save` writes a tree `--sysroot` reads back.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_peermem-probe");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run peermem-probe")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

/// No RDMA device on this host (the build host; not the bench's VMs).
fn no_rdma_here() -> bool {
    std::fs::read_dir("/sys/class/infiniband").map_or(true, |mut d| d.next().is_none())
}

#[test]
fn contradictory_flags_exit_2_naming_both() {
    for (args, a, b) in [
        (
            &["check", "--host-only", "--only", "dmabuf"][..],
            "--host-only",
            "--only",
        ),
        (&["check", "--host-only", "-g", "1"], "--host-only", "--gpu"),
        (
            &["check", "--host-only", "--alloc", "cumemcreate"],
            "--host-only",
            "--alloc",
        ),
        (
            &["bench", "--host-only", "--dmabuf"],
            "--host-only",
            "--dmabuf",
        ),
        (&["bench", "--host-only", "-g", "0"], "--host-only", "--gpu"),
        (
            &["pair", "--listen", "--bind", "192.0.2.1"],
            "--listen",
            "--bind",
        ),
        (
            &["pair", "--connect", "192.0.2.1", "--max-size", "2G"],
            "--connect",
            "--max-size",
        ),
    ] {
        let o = run(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(a) && e.contains(b), "{args:?}: {e}");
    }
}

#[test]
fn bad_numbers_and_addresses_exit_2_with_a_tailored_message() {
    for (args, says) in [
        (
            &["bench", "--iters", "0"][..],
            "the number of iterations is 1 or more",
        ),
        (
            &["bench", "--bw-iters", "0"],
            "the number of iterations is 1 or more",
        ),
        (&["bench", "--iters", "-3"], "'-3' is negative"),
        (
            &["check", "--timeout", "0"],
            "a timeout in seconds is 1 or more",
        ),
        (&["check", "--timeout", "-1"], "'-1' is negative"),
        (&["bench", "--timeout", "x"], "'x' is not a whole number"),
        (
            &["pair", "--connect", "h", "--timeout", "0"],
            "a timeout in seconds",
        ),
        (
            &["pair", "--connect", "h", "--port", "0"],
            "a port is 1 to 65535",
        ),
        (
            &["pair", "--listen", "--port", "70000"],
            "a port is 1 to 65535",
        ),
        (
            &["pair", "--listen", "--port", "-5"],
            "a port is 1 to 65535",
        ),
        (&["check", "--size", "-1"], "'-1' is negative"),
        (&["bench", "--sizes", "4K,-1"], "'-1' is negative"),
        (&["pair", "--connect", "1.2.3"], "not an IPv4 address"),
        (&["pair", "--connect", "10.0.0.256"], "not an IPv4 address"),
        (&["pair", "--connect", "fe80::1::2"], "not an IPv6 address"),
        (&["pair", "--connect", "a_b!"], "not a host name"),
        (&["pair", "--listen", "1.2.3"], "not an IPv4 address"),
        (
            &["pair", "--connect", "192.0.2.1", "--bind", "300.1.1.1"],
            "not an IPv4 address",
        ),
    ] {
        let o = run(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(says), "{args:?}: wanted '{says}' in: {e}");
    }
    // The JSON document of a usage error carries the same message.
    let o = run(&["--json", "bench", "--iters", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let v = json(&o);
    assert!(v["error"].as_str().unwrap().contains("1 or more"), "{v}");
    // Good values still parse (no device here: could not test, not 2).
    for args in [
        &[
            "pair",
            "--connect",
            "192.0.2.1",
            "--port",
            "1",
            "--timeout",
            "1",
        ][..],
        &["pair", "--connect", "fe80::1", "--timeout", "1"],
    ] {
        if no_rdma_here() {
            assert_eq!(run(args).status.code(), Some(3), "{args:?}");
        }
    }
}

#[test]
fn pair_without_a_local_device_blames_this_host_and_traces() {
    if !no_rdma_here() {
        return;
    }
    let o = run(&[
        "--json",
        "-v",
        "pair",
        "--connect",
        "192.0.2.1",
        "--timeout",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(3));
    let v = json(&o);
    let cause = v["results"][0]["cause"].as_str().unwrap_or_default();
    assert!(cause.contains("no RDMA device is visible"), "{v}");
    assert!(!cause.contains("between the hosts"), "{v}");
    let s = v["verdict"]["summary"].as_str().unwrap_or_default();
    assert!(
        s.starts_with("could not test: setup (no RDMA device"),
        "{v}"
    );
    assert_eq!(v["verdict"]["exit_code"], 3);
    let e = stderr(&o);
    assert!(
        e.contains("pair: libibverbs lists"),
        "--verbose traced nothing: {e}"
    );
}

#[test]
fn check_shows_the_gpu_rows_untested_without_a_device_and_traces() {
    if !no_rdma_here() {
        return;
    }
    let o = run(&["--json", "-v", "check"]);
    assert_eq!(o.status.code(), Some(3));
    let v = json(&o);
    let mechs: Vec<(&str, &str)> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["mechanism"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        mechs,
        [
            ("host", "untested"),
            ("peer_memory", "untested"),
            ("dma_buf", "untested")
        ],
        "{v}"
    );
    for r in v["results"].as_array().unwrap() {
        assert!(
            r["cause"].as_str().unwrap().contains("no RDMA device"),
            "{r}"
        );
    }
    assert!(
        stderr(&o).contains("check: libibverbs lists"),
        "{}",
        stderr(&o)
    );
    // --only keeps to the mechanism asked for; --host-only to the host row.
    let v = json(&run(&["--json", "check", "--only", "peermem"]));
    assert_eq!(v["results"].as_array().unwrap().len(), 2, "{v}");
    let v = json(&run(&["--json", "check", "--host-only"]));
    assert_eq!(v["results"].as_array().unwrap().len(), 1, "{v}");
}

#[test]
fn bench_json_has_a_verdict_summary() {
    if !no_rdma_here() {
        return;
    }
    let o = run(&["--json", "bench", "--host-only"]);
    let v = json(&o);
    assert_eq!(v["verdict"]["exit_code"], v["exit_code"]);
    assert_eq!(v["verdict"]["status"], v["status"]);
    let s = v["verdict"]["summary"].as_str().unwrap_or_default();
    assert!(s.contains("no RDMA device"), "{v}");
    let t = String::from_utf8_lossy(&run(&["bench", "--host-only"]).stdout).into_owned();
    assert!(
        t.lines()
            .nth(1)
            .unwrap_or_default()
            .starts_with("verdict: could not test"),
        "{t}"
    );
}

#[test]
fn doctor_save_writes_a_tree_sysroot_reads_back() {
    let fx = format!(
        "{}/../probe-lib/tests/fixtures/switch",
        env!("CARGO_MANIFEST_DIR")
    );
    let dir = std::env::temp_dir().join(format!("pmprobe-cli-save-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let a = run(&["--json", "doctor", "--sysroot", &fx, "--save", d]);
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert!(stderr(&a).contains("--sysroot"), "{}", stderr(&a));
    let b = run(&["--json", "doctor", "--sysroot", d]);
    assert_eq!(json(&a), json(&b));
    // A second save into the same directory would mix two trees: refused.
    let c = run(&["doctor", "--sysroot", &fx, "--save", d]);
    assert_eq!(c.status.code(), Some(2), "{}", stderr(&c));
    assert!(stderr(&c).contains("not an empty directory"));
    std::fs::remove_dir_all(&dir).unwrap();
    // A directory that cannot be written is the caller's error, said before
    // the run (issue 33: it was "internal error", exit 4, after it).  A
    // regular file as a parent cannot hold a directory, root or not.
    let file = std::env::temp_dir().join(format!("pmprobe-cli-save-file-{}", std::process::id()));
    std::fs::write(&file, "").unwrap();
    let under = file.join("tree");
    let e = run(&[
        "doctor",
        "--sysroot",
        &fx,
        "--save",
        under.to_str().unwrap(),
    ]);
    assert_eq!(e.status.code(), Some(2), "{}", stderr(&e));
    assert!(stderr(&e).contains("cannot write there"), "{}", stderr(&e));
    std::fs::remove_file(&file).unwrap();
}
