//! The binary itself: exit codes, rendering and JSON over the sysfs
//! fixtures, usage errors, and a closed stdout.

use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_peermem-probe");

fn fixture(name: &str) -> String {
    format!(
        "{}/../probe-lib/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run peermem-probe")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn doctor(tree: &str) -> Output {
    run(&["doctor", "--sysroot", &fixture(tree)])
}

#[test]
fn doctor_exit_codes_follow_the_host() {
    for (tree, code) in [
        ("dmabuf-only", 0),
        ("peermem-loaded", 0),
        ("switch", 0),
        ("port-down", 1),
        ("switch-acs", 1),
    ] {
        let o = doctor(tree);
        assert_eq!(o.status.code(), Some(code), "{tree}:\n{}", text(&o));
        assert!(
            o.stderr.is_empty(),
            "{tree}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let empty = std::env::temp_dir().join(format!("pmprobe-cli-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = run(&["doctor", "--sysroot", empty.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "nothing to assess: could not test"
    );
    std::fs::remove_dir_all(&empty).unwrap();
}

#[test]
fn usage_errors_and_only_those_exit_2() {
    for args in [
        &["check", "--size", "0"][..],
        &["check", "--size", "65G"],
        &["check", "--bogus"],
        &["pair"],
        &["pair", "--connect", "x", "--dmabuf"],
        &["bench", "--qps", "0"],
        &["doctor", "--sysroot", "/nonexistent/pmprobe"],
    ] {
        let o = run(args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert_eq!(run(&["--version"]).status.code(), Some(0));
}

#[test]
fn doctor_text_names_things_and_shows_the_matrix() {
    let t = text(&doctor("sockets"));
    assert!(
        t.contains("NCCL's GPUDirect RDMA decision (NCCL_NET_GDR_LEVEL default PXB):"),
        "{t}"
    );
    let m: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.starts_with("GPU \\ NIC"))
        .collect();
    assert!(
        m[0].contains("mlx5_0") && m[0].contains("mlx5_1") && m[0].contains("rxe0"),
        "{m:?}"
    );
    assert!(
        m[1].starts_with("0000:01:00.0")
            && m[1].contains("SYS no GDR")
            && m[1].contains("NODE no GDR")
            && m[1].contains("soft (no GDR)"),
        "{m:?}"
    );
    let t = text(&doctor("port-down"));
    assert!(
        t.lines().any(|l| l.starts_with("rdma")
            && l.contains("mlx5_0 port 1")
            && l.contains("FAIL")
            && l.contains("DOWN, Disabled, Ethernet")),
        "{t}"
    );
    assert!(t.contains("ip link set ens1f0np0 up"), "{t}");
    assert!(!t.contains("eth0"), "no invented netdev names:\n{t}");
    let t = text(&doctor("peermem-loaded"));
    assert!(
        t.contains("modprobe") || t.contains("nvidia_peermem loaded"),
        "{t}"
    );
    assert!(
        !t.contains("modprobe peermem_rs"),
        "no Rust module advice without CONFIG_RUST:\n{t}"
    );
}

#[test]
fn doctor_names_what_module_name_tests_miss_and_what_it_cannot_read() {
    // switch: peermem_rs loaded under its own name, no on-demand paging.
    let t = text(&doctor("switch"));
    let gloo = t
        .lines()
        .find(|l| l.starts_with("libraries") && l.contains("PyTorch Gloo (ibverbs)"))
        .unwrap_or_else(|| panic!("no gloo row:\n{t}"));
    assert!(gloo.contains("WARN"), "{gloo}");
    assert!(t.contains("make PEERMEM_NAME=nvidia_peermem"), "{t}");
    assert!(
        t.lines().any(|l| l.starts_with("cuda")
            && l.contains("GPUDirect attributes")
            && l.contains("unknown (doctor reads a saved tree")),
        "a saved tree gives no CUDA verdict:\n{t}"
    );
    let o = run(&["--json", "doctor", "--sysroot", &fixture("switch")]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let w = v["verdict"]["warnings"].to_string();
    assert!(
        w.contains("libraries/PyTorch Gloo (ibverbs) GPU 0000:03:00.0 x mlx5_0"),
        "{w}"
    );
    assert!(w.contains("libraries/NCCL GIN (GDAKI)"), "{w}");
    assert!(!w.contains("cuda/"), "unknown is not a warning: {w}");
}

#[test]
fn doctor_json_is_versioned_and_typed() {
    let o = run(&["--json", "doctor", "--sysroot", &fixture("peermem-loaded")]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["exit_code"], 0);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(v["rdma_devices"][0]["ports"][0]["link_layer"], "InfiniBand");
    assert_eq!(v["rdma_devices"][0]["ports"][0]["sm_lid"], 1);
    assert_eq!(v["nccl"][0]["path_type"], "PIX");
    assert_eq!(v["nccl"][0]["gdr_by_default"], true);
    assert_eq!(v["nccl"][0]["gdr_level_to_enable"], serde_json::Value::Null);
    let found: Vec<bool> = v["detection"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| !d["found"].is_null())
        .collect();
    assert_eq!(found, [true, false, true, false, true]);
}

#[test]
fn verbose_traces_on_stderr_only() {
    let o = run(&["--verbose", "check", "--host-only", "--timeout", "1"]);
    // No RDMA device (or no libibverbs) in a build environment: could not test.
    if o.status.code() == Some(3) {
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.lines()
                .all(|l| l.starts_with('[') || l.starts_with("peermem-probe")),
            "{e}"
        );
        assert!(
            text(&o).starts_with("peermem-probe check: could not test"),
            "{}",
            text(&o)
        );
    }
}

#[test]
fn check_without_rdma_devices_could_not_test() {
    let o = run(&["--json", "check", "--host-only"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["schema_version"], 2);
    if v["rdma_devices"].as_array().unwrap().is_empty() {
        assert_eq!(o.status.code(), Some(3), "{v}");
        assert_eq!(v["verdict"]["works"], false);
        assert!(
            v["results"][0]["rdma_device"].is_null(),
            "null, not \"-\": {v}"
        );
        assert_eq!(v["results"][0]["status"], "untested");
    }
}

/// A pipe whose reader is already gone.
fn dead_pipe() -> std::os::fd::OwnedFd {
    let mut fds = [0i32; 2];
    // SAFETY: pipe() fills two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: closing our own read end.
    unsafe { libc::close(fds[0]) };
    use std::os::fd::FromRawFd;
    // SAFETY: the write end is ours and handed over once.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[1]) }
}

#[test]
fn a_closed_stderr_changes_nothing() {
    let o = Command::new(BIN)
        .args(["--verbose", "doctor", "--sysroot", "/nonexistent/pmprobe"])
        .stderr(Stdio::from(dead_pipe()))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "the usage error's code, not a panic's"
    );
    let o = Command::new(BIN)
        .args(["--verbose", "check", "--host-only"])
        .stderr(Stdio::from(dead_pipe()))
        .output()
        .unwrap();
    assert_ne!(
        o.status.code(),
        Some(4),
        "no internal error from a trace line"
    );
}

#[test]
fn a_closed_stdout_is_quiet() {
    // A pipe whose reader is gone before the tool writes: EPIPE.
    let mut fds = [0i32; 2];
    // SAFETY: pipe() fills two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: closing our own read end.
    unsafe { libc::close(fds[0]) };
    use std::os::fd::FromRawFd;
    // SAFETY: the write end is ours and handed over once.
    let w = unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[1]) };
    let o = Command::new(BIN)
        .args(["doctor", "--sysroot", &fixture("port-down")])
        .stdout(Stdio::from(w))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        o.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "the verdict's exit code, not an error's"
    );
}

#[test]
fn negative_gpu_indices_are_refused_clearly() {
    for args in [
        &["check", "--gpu", "-1"][..],
        &["check", "--gpu=-1"],
        &["check", "-g", "0", "-g", "-2"],
        &["bench", "-g", "-1"],
        &["bench", "--gpu", "x"],
        &["pair", "--connect", "192.0.2.1", "--gpu", "-1"],
    ] {
        let o = run(args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains("CUDA device ordinal"),
            "{args:?}: the message says what a GPU index is: {e}"
        );
        assert!(
            o.stdout.is_empty(),
            "{args:?}: nothing on stdout without --json"
        );
    }
}

#[test]
fn every_failure_under_json_is_json() {
    for (args, code, cmd) in [
        (&["--json", "check", "--gpu", "-1"][..], 2, "check"),
        (&["check", "--json", "--size", "0"], 2, "check"),
        (&["--json", "bench", "--sizes", "0"], 2, "bench"),
        (
            &["--json", "doctor", "--sysroot", "/nonexistent/pmprobe"],
            2,
            "doctor",
        ),
        (&["--json", "pair"], 2, "pair"),
        (&["--json", "frobnicate"], 2, "peermem-probe"),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", text(&o)));
        assert_eq!(v["schema_version"], 2, "{args:?}");
        assert!(
            text(&o)
                .trim_start()
                .starts_with("{\n  \"schema_version\": 2,\n  \"command\": "),
            "{args:?}: the header comes first, as in every document: {}",
            text(&o)
        );
        assert_eq!(v["command"], cmd, "{args:?}");
        assert_eq!(v["status"], "error", "{args:?}");
        assert_eq!(v["exit_code"], code, "{args:?}");
        let msg = v["error"].as_str().unwrap_or_default();
        assert!(!msg.is_empty(), "{args:?}: {v}");
        assert!(
            !o.stderr.is_empty(),
            "{args:?}: the message goes to stderr too"
        );
    }
    let o = run(&["--json", "doctor", "--sysroot", "/nonexistent/pmprobe"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("not a directory"),
        "{v}"
    );
    // Help and version are not failures: text, exit 0.
    assert_eq!(run(&["--json", "--version"]).status.code(), Some(0));
}

#[test]
fn doctor_summarises_like_check() {
    let o = run(&["--json", "doctor", "--sysroot", &fixture("switch-acs")]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(v["verdict"]["exit_code"], 1);
    assert_eq!(v["verdict"]["status"], "fail");
    let s = v["verdict"]["summary"].as_str().unwrap();
    assert!(s.contains("modules/peer-memory clients"), "{s}");
    let t = text(&doctor("switch-acs"));
    assert_eq!(
        t.lines().nth(1),
        Some(s),
        "the text shows the same line:\n{t}"
    );
    let o = run(&["--json", "doctor", "--sysroot", &fixture("peermem-loaded")]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["peer_clients"][0]["module"], "nvidia_peermem");
    assert_eq!(v["peer_clients"][0]["origin"], "nvidia");
    assert_eq!(v["rdma_stack"]["version"], "25.10-1.2.8");
    let t = text(&doctor("peermem-loaded"));
    assert!(
        t.lines().any(|l| l.starts_with("modules")
            && l.contains("nvidia_peermem")
            && l.contains("NVIDIA's nvidia-peermem 580.95.05")),
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.contains("MLNX_OFED/DOCA-OFED") && l.contains("25.10-1.2.8")),
        "{t}"
    );
}

#[test]
fn verbose_doctor_traces_its_steps() {
    let o = run(&["--verbose", "doctor", "--sysroot", &fixture("switch")]);
    assert_eq!(o.status.code(), Some(0));
    let e = String::from_utf8_lossy(&o.stderr);
    for step in [
        "doctor: reading the system",
        "doctor: RDMA ports",
        "doctor: PCIe paths",
    ] {
        assert!(
            e.lines().any(|l| l.starts_with('[') && l.contains(step)),
            "{step}: {e}"
        );
    }
    assert!(
        !text(&o).contains("doctor: RDMA ports"),
        "the trace stays off stdout"
    );
    // Without --verbose: nothing on stderr.
    assert!(doctor("switch").stderr.is_empty());
}

#[test]
fn bench_without_a_device_has_no_zero_byte_row() {
    let o = run(&[
        "--json",
        "bench",
        "--host-only",
        "--device",
        "pmprobe-no-such-dev",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(o.status.code(), Some(3), "{v}");
    assert_eq!(v["registration"].as_array().unwrap().len(), 0, "{v}");
    assert_eq!(v["bandwidth"].as_array().unwrap().len(), 0, "{v}");
    assert_eq!(v["setup"]["status"], "untested", "{v}");
    assert!(v["setup"]["error"].as_str().unwrap().len() > 3, "{v}");
    let o = run(&["bench", "--host-only", "--device", "pmprobe-no-such-dev"]);
    let t = text(&o);
    assert!(t.contains("setup: UNTESTED"), "{t}");
    assert!(!t.contains(" 0 B "), "no 0-byte row:\n{t}");
    assert!(!t.contains("MEMORY  REGISTRATION"), "no empty table:\n{t}");
}
