//! JSON schema stability: the field names scripts rely on. Each report's
//! key paths (`a.b`, `list[].c`) must equal tests/golden/<name>.keys.
//! After an intended change: `UPDATE_GOLDEN=1 cargo test --test schema`.

use peermem_probe::bench::{BenchReport, BwRow, RegRow};
use peermem_probe::check::{CheckReport, CudaSummary, DeviceSummary, PathResult};
use peermem_probe::cuda::Gpu;
use peermem_probe::loopback::{parse_gid, PortChoice};
use peermem_probe::pair::{PairReport, PairRow};
use peermem_probe::report::Status;
use peermem_probe::root::SysRoot;
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

fn row(status: Status) -> PathResult {
    PathResult {
        rdma_device: "mlx5_0".into(),
        gpu: Some(0),
        path: "host->gpu".into(),
        registration: "ibv_reg_mr".into(),
        status,
        bytes: 65536,
        verified_bytes: 65536,
        micros: Some(12),
        failed_step: None,
        error: None,
        errno: None,
        cause: None,
        remedy: None,
    }
}

#[test]
fn check_report_fields() {
    let gid = "0000:0000:0000:0000:0000:ffff:c000:0201";
    let r = CheckReport {
        command: "check",
        version: "0",
        status: Status::Pass,
        exit_code: 0,
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
            error: None,
        }],
        results: vec![row(Status::Pass), row(Status::Fail)],
    };
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["results"][1]["status"], "fail");
    golden("check", &v);
}

#[test]
fn doctor_report_fields() {
    let root = SysRoot::at(format!(
        "{}/tests/fixtures/switch",
        env!("CARGO_MANIFEST_DIR")
    ));
    let v = serde_json::to_value(peermem_probe::doctor::run(&root)).unwrap();
    assert_eq!(v["pairs"][0]["topology"]["verdict"], "same_switch");
    golden("doctor", &v);
}

#[test]
fn bench_report_fields() {
    let r = BenchReport {
        command: "bench",
        version: "0",
        status: Status::Pass,
        exit_code: 0,
        rdma_device: Some("rxe0".into()),
        gpu: None,
        registration: vec![RegRow {
            memory: "host",
            size: 4096,
            status: Status::Pass,
            iterations: 10,
            reg_p50_us: Some(3.0),
            reg_p99_us: Some(9.0),
            dereg_p50_us: Some(2.0),
            dereg_p99_us: Some(4.0),
            error: None,
            cause: None,
            remedy: None,
        }],
        bandwidth: vec![BwRow {
            path: "host->host",
            size: 1 << 20,
            status: Status::Pass,
            iterations: 10,
            gbit_per_s: Some(1.5),
            error: None,
        }],
    };
    golden("bench", &serde_json::to_value(&r).unwrap());
}

#[test]
fn pair_report_fields() {
    let r = PairReport {
        command: "pair",
        version: "0",
        role: "client",
        status: Status::Pass,
        exit_code: 0,
        address: "198.51.100.1:18515".into(),
        rdma_device: Some("rxe1".into()),
        memory: "host".into(),
        size: 1 << 20,
        results: vec![PairRow {
            direction: "client->server",
            status: Status::Pass,
            bytes: 1 << 20,
            verified_bytes: 1 << 20,
            micros: Some(100),
            error: None,
            cause: None,
            remedy: None,
        }],
    };
    golden("pair", &serde_json::to_value(&r).unwrap());
}
