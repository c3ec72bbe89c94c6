//! peermem-probe: does GPUDirect RDMA work on this host, and if not, why?

mod render;

use clap::{Args, Parser, Subcommand, ValueEnum};
use peermem_probe::{bench, check, doctor, pair, report, root::SysRoot};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Prove GPUDirect RDMA works on this host, or say exactly why not.
///
/// Exit status of every subcommand: 0 = everything tested passed,
/// 1 = something failed (the output says why and what to do),
/// 2 = could not test (no CUDA, no GPU, no RDMA device, ...).
#[derive(Parser, Debug)]
#[command(
    name = "peermem-probe",
    version,
    about,
    long_about,
    propagate_version = true
)]
struct Cli {
    /// Print one JSON document instead of tables.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Register GPU memory with each RDMA device and verify RDMA writes
    /// host->GPU, GPU->host and GPU->GPU over a loopback QP pair, through
    /// ibv_reg_mr (peer memory) and through dma-buf.
    #[command(
        long_about = "For each RDMA device and GPU: allocate GPU memory (cuMemAlloc, rounded \
up to 64 KiB), register it (ibv_reg_mr), connect two RC QPs of the device to each other and \
RDMA-WRITE host->GPU, GPU->host and GPU->GPU, reading back and comparing every byte. Then the same \
with the memory exported as dma-buf (cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr). A host->host \
baseline runs first on each device. Every failed path names the failed step, its errno and the likely \
cause and remedy."
    )]
    Check(CheckArgs),
    /// Read the system (modules, peer-memory clients, PCIe paths and ACS,
    /// IOMMU, BAR1, driver, kernel, limits) and give a verdict per item.
    Doctor(DoctorArgs),
    /// Measure ibv_reg_mr/ibv_dereg_mr latency (p50, p99) by size on host
    /// and GPU memory, and RDMA-write bandwidth over a loopback pair.
    Bench(BenchArgs),
    /// Run the write/verify test between two hosts over the RDMA CM: one
    /// side `--listen`s, the other `--connect`s to it.
    Pair(PairArgs),
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum OnlyArg {
    /// ibv_reg_mr on GPU memory (needs a peer-memory client).
    Peermem,
    /// ibv_reg_dmabuf_mr on exported GPU memory.
    Dmabuf,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// Test host memory only (no CUDA needed): proves the RDMA device works.
    #[arg(long)]
    host_only: bool,
    /// Bytes per buffer (K, M, G suffixes); GPU buffers are rounded up to 64 KiB.
    #[arg(long, default_value = "1M", value_parser = report::parse_size)]
    size: u64,
    /// Test only this RDMA device (repeatable). Default: all.
    #[arg(long = "device", short = 'd', value_name = "NAME")]
    devices: Vec<String>,
    /// Test only this CUDA device ordinal (repeatable). Default: all.
    #[arg(long = "gpu", short = 'g', value_name = "N")]
    gpus: Vec<i32>,
    /// Run only one of the two registration paths.
    #[arg(long, value_enum)]
    only: Option<OnlyArg>,
    /// Seconds to wait for a completion before declaring the path dead.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

#[derive(Args, Debug)]
struct DoctorArgs {
    /// Read /sys, /proc and /boot under this directory instead of / (for
    /// inspecting a saved copy of another host's trees).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// RDMA device to use. Default: the first one.
    #[arg(long, short = 'd', value_name = "NAME")]
    device: Option<String>,
    /// CUDA device ordinal for the GPU-memory rows.
    #[arg(long, short = 'g', default_value_t = 0, value_name = "N")]
    gpu: i32,
    /// Host memory only (no CUDA needed).
    #[arg(long)]
    host_only: bool,
    /// Registration sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4K,64K,1M,16M", value_parser = report::parse_size)]
    sizes: Vec<u64>,
    /// Registrations per size.
    #[arg(long, default_value_t = 50)]
    iters: usize,
    /// Bytes per RDMA write in the bandwidth test.
    #[arg(long, default_value = "1M", value_parser = report::parse_size)]
    bw_size: u64,
    /// RDMA writes in the bandwidth test.
    #[arg(long, default_value_t = 200)]
    bw_iters: usize,
    /// Seconds to wait for a completion.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("role").required(true).args(["listen", "connect"])))]
struct PairArgs {
    /// Serve one test on this address (default 0.0.0.0) and exit.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "0.0.0.0")]
    listen: Option<String>,
    /// Connect to a `--listen`ing peer (name or address).
    #[arg(long, value_name = "HOST")]
    connect: Option<String>,
    /// RDMA CM port.
    #[arg(long, default_value_t = pair::DEFAULT_PORT)]
    port: u16,
    /// Client: local address to connect from (selects the RDMA device).
    #[arg(long, value_name = "ADDR")]
    bind: Option<String>,
    /// Bytes to write in each direction (the client's size wins).
    #[arg(long, default_value = "1M", value_parser = report::parse_size)]
    size: u64,
    /// Use GPU memory of this CUDA device instead of host memory.
    #[arg(long, short = 'g', value_name = "N")]
    gpu: Option<i32>,
    /// Seconds to wait for the peer at each step.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{host}' has no address"))
}

/// Runs the command; Err is a one-line message for exit status 2.
fn run(cli: Cli) -> Result<i32, String> {
    let json = cli.json;
    let emit = |out: String| print!("{out}");
    match cli.cmd {
        Cmd::Check(a) => {
            let opts = check::CheckOptions {
                size: a.size as usize,
                host_only: a.host_only,
                devices: a.devices,
                gpus: a.gpus,
                only: match a.only {
                    None => check::Only::All,
                    Some(OnlyArg::Peermem) => check::Only::PeerMem,
                    Some(OnlyArg::Dmabuf) => check::Only::DmaBuf,
                },
                timeout: Duration::from_secs(a.timeout.max(1)),
                seed: 0x5eed_0000_0000_0001 ^ std::process::id() as u64,
            };
            let r = check::run(&opts);
            emit(if json {
                render::json(&r)?
            } else {
                render::check(&r)
            });
            Ok(r.exit_code)
        }
        Cmd::Doctor(a) => {
            let root = match a.sysroot {
                Some(d) if !d.is_dir() => {
                    return Err(format!("--sysroot {}: not a directory", d.display()))
                }
                Some(d) => SysRoot::at(d),
                None => SysRoot::live(),
            };
            let r = doctor::run(&root);
            emit(if json {
                render::json(&r)?
            } else {
                render::doctor(&r)
            });
            Ok(r.exit_code)
        }
        Cmd::Bench(a) => {
            let opts = bench::BenchOptions {
                device: a.device,
                gpu: a.gpu,
                host_only: a.host_only,
                sizes: a.sizes.iter().map(|s| *s as usize).collect(),
                iters: a.iters.max(1),
                bw_size: a.bw_size as usize,
                bw_iters: a.bw_iters.max(1),
                timeout: Duration::from_secs(a.timeout.max(1)),
            };
            let mut bar = render::Bar::new(json);
            let r = bench::run(&opts, &mut bar);
            bar.done();
            emit(if json {
                render::json(&r)?
            } else {
                render::bench(&r)
            });
            Ok(r.exit_code)
        }
        Cmd::Pair(a) => {
            let timeout = Duration::from_secs(a.timeout.max(1));
            let bind = a.bind.as_deref().map(|b| resolve(b, 0)).transpose()?;
            let server = a.listen.is_some();
            let host = a.listen.or(a.connect).unwrap_or_default();
            let opts = pair::PairOptions {
                addr: resolve(&host, a.port)?,
                bind,
                size: a.size as usize,
                gpu: a.gpu,
                timeout,
            };
            let r = if server {
                // On stderr even with --json: scripts wait for this line.
                pair::serve(&opts, &mut |addr| {
                    eprintln!("peermem-probe pair: listening on {addr}")
                })
            } else {
                pair::connect(&opts)
            };
            emit(if json {
                render::json(&r)?
            } else {
                render::pair(&r)
            });
            Ok(r.exit_code)
        }
    }
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown".into());
        eprintln!("peermem-probe: internal error: {msg} (please report this)");
    }));
    let cli = Cli::parse();
    let code = match std::panic::catch_unwind(|| run(cli)) {
        Ok(Ok(code)) => code,
        Ok(Err(msg)) => {
            eprintln!("peermem-probe: error: {msg}");
            report::EXIT_UNTESTED
        }
        Err(_) => report::EXIT_FAIL,
    };
    std::process::exit(code);
}
