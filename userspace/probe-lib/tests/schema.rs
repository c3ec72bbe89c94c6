//! JSON schema stability: the field names scripts rely on. Each report's
//! key paths (`a.b`, `list[].c`) must equal tests/golden/<name>.keys.
//! After an intended change: `UPDATE_GOLDEN=1 cargo test --test schema`.

use peermem_probe::bench::{BenchReport, BwRow, RegRow, SetupFailure};
use peermem_probe::check::{CheckReport, CudaSummary, DeviceSummary, PathResult};
use peermem_probe::cuda::{Allocation, Gpu};
use peermem_probe::loopback::{parse_gid, PortChoice};
use peermem_probe::pair::{PairReport, PairRow};
use peermem_probe::report::{RunVerdict, Status};
use peermem_probe::root::SysRoot;
use peermem_probe::verdict::Mechanism;
use serde_json::Value;
use std::collections::BTreeSet;

fn paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(p.clone());
                paths(x, &p, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                paths(x, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

fn golden(name: &str, v: &Value) {
    let mut keys = BTreeSet::new();
    paths(v, "", &mut keys);
    let got: Vec<String> = keys.into_iter().collect();
    let file = format!("{}/tests/golden/{name}.keys", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&file, got.join("\n") + "\n").unwrap();
        return;
    }
    let want: Vec<String> = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .lines()
        .map(str::to_string)
        .collect();
    let missing: Vec<&String> = want.iter().filter(|k| !got.contains(k)).collect();
    let added: Vec<&String> = got.iter().filter(|k| !want.contains(k)).collect();
    assert!(
        missing.is_empty() && added.is_empty(),
        "{name}: removed {missing:?}, added {added:?}"
    );
}

/// Absent values are null, never a placeholder string.
fn no_placeholders(v: &Value, at: &str) {
    match v {
        Value::String(s) => assert!(
            s != "-" && s != "?" && !s.is_empty(),
            "{at}: placeholder string {s:?} (use null)"
        ),
        Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| no_placeholders(x, &format!("{at}.{k}"))),
        Value::Array(a) => a
            .iter()
            .for_each(|x| no_placeholders(x, &format!("{at}[]"))),
        _ => {}
    }
}

fn versioned(v: &Value) {
    assert_eq!(v["schema_version"], peermem_probe::report::SCHEMA_VERSION);
}

fn row(status: Status, mech: Mechanism) -> PathResult {
    let mut r = PathResult::new(Some("mlx5_0"), Some(0), mech, 65536)
        .path("host->gpu")
        .alloc(Some(Allocation::CuMemCreate));
    r.status = status;
    r.verified_bytes = 65536;
    r.micros = Some(12);
    r
}

#[test]
fn check_report_fields() {
    let gid = "0000:0000:0000:0000:0000:ffff:c000:0201";
    let mut failed = row(Status::Fail, Mechanism::PeerMemory);
    failed.wc_status = Some("IBV_WC_REM_ACCESS_ERR (remote access error)".into());
    failed.vendor_err = Some(0x88);
    let mut r = CheckReport {
        schema_version: peermem_probe::report::SCHEMA_VERSION,
        command: "check",
        version: "0",
        status: Status::Pass,
        exit_code: 0,
        verdict: peermem_probe::verdict::overall(&[], false),
        mechanisms: vec![],
        host_only: false,
        size: 65536,
        cuda: CudaSummary {
            available: true,
            driver_version: Some("12.8".into()),
            error: None,
        },
        gpus: vec![Gpu {
            ordinal: 0,
            name: "GPU".into(),
            pci_bus_id: "0000:03:00.0".into(),
            dma_buf_supported: true,
            gpu_direct_rdma_supported: Some(true),
            gpu_direct_rdma_with_vmm: Some(true),
            flush_writes_options: Some(vec!["host"]),
            writes_ordering: Some("owner"),
            integrated: Some(false),
            host_page_tables: Some(false),
            platform: peermem_probe::platform::Kind::Discrete,
        }],
        rdma_devices: vec![DeviceSummary {
            name: "mlx5_0".into(),
            port: Some(PortChoice {
                port: 1,
                link_layer: "Ethernet",
                gid_index: Some(3),
                gid: gid.into(),
                lid: 0,
                gid_raw: parse_gid(gid).unwrap(),
                mtu: 3,
                max_msg: 1 << 30,
            }),
            dma_buf_mr_supported: Some(true),
            error: None,
        }],
        results: vec![
            row(Status::Pass, Mechanism::Host),
            failed,
            row(Status::Pass, Mechanism::DmaBuf),
        ],
    };
    peermem_probe::check::finish(&mut r);
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["results"][1]["status"], "fail");
    assert_eq!(v["results"][1]["mechanism"], "peer_memory");
    assert_eq!(v["results"][1]["allocation"], "cu_mem_create");
    assert_eq!(v["verdict"]["via"][0], "dma_buf");
    assert_eq!(v["verdict"]["works"], true);
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["mechanisms"][1]["verdict"], "fails");
    versioned(&v);
    golden("check", &v);
}

#[test]
fn doctor_report_fields() {
    for tree in [
        "switch",
        "sockets",
        "dmabuf-only",
        "peermem-loaded",
        "port-down",
        "geforce",
    ] {
        let root = SysRoot::at(format!(
            "{}/tests/fixtures/{tree}",
            env!("CARGO_MANIFEST_DIR")
        ));
        let v = serde_json::to_value(peermem_probe::doctor::run(&root)).unwrap();
        versioned(&v);
        no_placeholders(&v, tree);
    }
    let root = SysRoot::at(format!(
        "{}/tests/fixtures/switch",
        env!("CARGO_MANIFEST_DIR")
    ));
    let v = serde_json::to_value(peermem_probe::doctor::run(&root)).unwrap();
    assert_eq!(v["pairs"][0]["topology"]["verdict"], "same_switch");
    assert_eq!(v["nccl"][0]["path_type"], "PIX");
    assert_eq!(v["rdma_devices"][0]["ports"][0]["state"], "ACTIVE");
    assert_eq!(v["verdict"]["exit_code"], v["exit_code"]);
    assert_eq!(v["peer_clients"][0]["origin"], "peermem_rs");
    assert!(v["rdma_stack"]["version"].is_null(), "unknown is null: {v}");
    golden("doctor", &v);
}

#[test]
fn bench_report_fields() {
    let r = BenchReport {
        schema_version: peermem_probe::report::SCHEMA_VERSION,
        command: "bench",
        version: "0",
        status: Status::Pass,
        exit_code: 0,
        verdict: RunVerdict::from_rows(&[]),
        rdma_device: Some("rxe0".into()),
        gpu: None,
        gpu_allocation: Some(Allocation::CuMemAlloc),
        // Pins setup's field names (a real report has it or rows, not both).
        setup: Some(SetupFailure {
            status: Status::Untested,
            error: Some("no RDMA devices".into()),
            cause: Some("c".into()),
            remedy: Some("r".into()),
        }),
        registration: vec![RegRow {
            memory: "host",
            registration: "ibv_reg_mr",
            size: 4096,
            status: Status::Pass,
            iterations: Some(10),
            reg_p50_us: Some(3.0),
            reg_p99_us: Some(9.0),
            dereg_p50_us: Some(2.0),
            dereg_p99_us: Some(4.0),
            error: None,
            cause: None,
            remedy: None,
        }],
        bandwidth: vec![BwRow {
            path: "gpu->gpu",
            op: "read",
            size: 1 << 20,
            qps: 2,
            status: Status::Pass,
            iterations: Some(10),
            gbit_per_s: Some(1.5),
            mb_per_s: Some(187.5),
            msg_rate_mpps: Some(0.01),
            gpu_vs_host: Some(0.9),
            error: None,
        }],
    };
    let v = serde_json::to_value(&r).unwrap();
    versioned(&v);
    assert_eq!(v["verdict"]["exit_code"], v["exit_code"]);
    golden("bench", &v);
}

#[test]
fn pair_report_fields() {
    let r = PairReport {
        schema_version: peermem_probe::report::SCHEMA_VERSION,
        command: "pair",
        version: "0",
        role: "client",
        status: Status::Pass,
        exit_code: 0,
        verdict: RunVerdict::from_rows(&[]),
        address: "198.51.100.1:18515".into(),
        listening: false,
        rdma_device: Some("rxe1".into()),
        memory: "host".into(),
        size: 1 << 20,
        results: vec![PairRow {
            direction: "client->server",
            status: Status::Pass,
            bytes: 1 << 20,
            verified_bytes: 1 << 20,
            micros: Some(100),
            gbit_per_s: Some(83.9),
            error: None,
            cause: None,
            remedy: None,
        }],
    };
    let v = serde_json::to_value(&r).unwrap();
    versioned(&v);
    assert_eq!(v["verdict"]["exit_code"], v["exit_code"]);
    golden("pair", &v);
}
