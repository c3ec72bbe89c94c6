//! peermem-probe: does GPUDirect RDMA work on this host, and if not, why?

mod render;

use clap::{Args, Parser, Subcommand, ValueEnum};
use peermem_probe::cuda::Allocation;
use peermem_probe::{bench, check, doctor, pair, report, root::SysRoot};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Prove GPUDirect RDMA works on this host, or say exactly why not.
///
/// Exit status: 0 = works (check: some GPUDirect mechanism works),
/// 1 = does not work (the output says why and what to do),
/// 2 = usage error, 3 = could not test (no CUDA, no GPU, no RDMA
/// device, ...), 4 = internal error of this tool.
#[derive(Parser, Debug)]
#[command(
    name = "peermem-probe",
    version,
    about,
    long_about,
    propagate_version = true,
    after_help = "Bugs: the project's issue tracker; attach `peermem-probe doctor --save DIR`."
)]
struct Cli {
    /// Print one JSON document instead of tables.
    #[arg(long, global = true)]
    json: bool,

    /// Trace every step on stderr.
    #[arg(long, short = 'v', global = true)]
    verbose: bool,

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
enum AllocArg {
    /// cuMemAlloc (perftest --use_cuda).
    Cumemalloc,
    /// cuMemCreate + cuMemMap (NCCL's default since 2.19).
    Cumemcreate,
    /// Both.
    All,
}

/// Sizes up to 64 GiB.
fn size_arg(s: &str) -> Result<u64, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!("'{s}' is negative: a size is 1 byte or more"));
    }
    let v = report::parse_size(s)?;
    if v > 64 << 30 {
        return Err(format!("'{s}' is larger than 64 GiB"));
    }
    Ok(v)
}

/// A CUDA device ordinal: 0 or more (as `nvidia-smi -L` numbers them).
fn gpu_arg(s: &str) -> Result<i32, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n < 0 => Err(format!(
            "'{s}' is negative: a GPU is named by its CUDA device ordinal, 0 or more (nvidia-smi -L lists them)"
        )),
        Ok(n) if n > i32::MAX as i64 => Err(format!("'{s}' is not a CUDA device ordinal")),
        Ok(n) => Ok(n as i32),
        Err(_) => Err(format!(
            "'{s}' is not a GPU index (a CUDA device ordinal: 0, 1, ...)"
        )),
    }
}

/// A whole number of at least 1; `what` names it in the message ("a
/// timeout in seconds").
fn positive(s: &str, what: &str) -> Result<u64, String> {
    match s.trim().parse::<i128>() {
        Ok(n) if n < 0 => Err(format!("'{s}' is negative: {what} is 1 or more")),
        Ok(0) => Err(format!("'{s}': {what} is 1 or more")),
        Ok(n) if n > u32::MAX as i128 => Err(format!("'{s}' is too large for {what}")),
        Ok(n) => Ok(n as u64),
        Err(_) => Err(format!("'{s}' is not a whole number ({what} is 1 or more)")),
    }
}

/// `--timeout`: seconds, at least 1.
fn seconds_arg(s: &str) -> Result<u64, String> {
    positive(s, "a timeout in seconds")
}

/// `--iters`, `--bw-iters`: at least one measurement.
fn iters_arg(s: &str) -> Result<usize, String> {
    positive(s, "the number of iterations").map(|n| n as usize)
}

/// `--port`: an RDMA CM port, 1 to 65535.
fn port_arg(s: &str) -> Result<u16, String> {
    match s.trim().parse::<i128>() {
        Ok(n) if (1..=u16::MAX as i128).contains(&n) => Ok(n as u16),
        _ => Err(format!("'{s}' is not a port: a port is 1 to 65535")),
    }
}

/// A host name or an IP address. Digits and dots must form a whole IPv4
/// address (the resolver would take "10.1" for 10.0.0.1), anything with a
/// colon an IPv6 address.
fn host_arg(s: &str) -> Result<String, String> {
    let t = s.trim();
    let bad = |kind: &str| Err(format!("'{s}' is not {kind}"));
    if t.is_empty() {
        return bad("a host name or an address");
    }
    if t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return match t.parse::<std::net::Ipv4Addr>() {
            Ok(_) => Ok(t.to_string()),
            Err(_) => bad("an IPv4 address (four numbers 0-255, e.g. 192.0.2.1)"),
        };
    }
    if t.contains(':') {
        return match t.parse::<std::net::Ipv6Addr>() {
            Ok(_) => Ok(t.to_string()),
            Err(_) => bad("an IPv6 address"),
        };
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if t.len() > 253 || !t.trim_end_matches('.').split('.').all(label_ok) {
        return bad("a host name (letters, digits, '-' and '.') or an IP address");
    }
    Ok(t.to_string())
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum BenchAlloc {
    /// cuMemAlloc (perftest --use_cuda).
    Cumemalloc,
    /// cuMemCreate + cuMemMap (NCCL's default since 2.19).
    Cumemcreate,
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
    /// Not with --only, --gpu or --alloc, which choose GPU paths.
    #[arg(long, conflicts_with_all = ["only", "gpus", "alloc"])]
    host_only: bool,
    /// Bytes per buffer (K, M, G suffixes, at most 64G); GPU buffers are
    /// rounded up to 64 KiB (cuMemCreate: to the allocation granularity).
    #[arg(long, default_value = "1M", value_parser = size_arg, allow_hyphen_values = true)]
    size: u64,
    /// GPU allocations to test.
    #[arg(long = "alloc", value_enum, default_value = "all")]
    alloc: AllocArg,
    /// Test only this RDMA device (repeatable). Default: all.
    #[arg(long = "device", short = 'd', value_name = "NAME")]
    devices: Vec<String>,
    /// Test only this CUDA device ordinal (repeatable). Default: all.
    #[arg(long = "gpu", short = 'g', value_name = "N", value_parser = gpu_arg, allow_hyphen_values = true)]
    gpus: Vec<i32>,
    /// Run only one of the two registration paths.
    #[arg(long, value_enum)]
    only: Option<OnlyArg>,
    /// Seconds to wait for a completion before declaring the path dead.
    #[arg(long, default_value = "10", value_parser = seconds_arg, allow_hyphen_values = true)]
    timeout: u64,
    /// Test hook: one extra host->host write with a wrong rkey first (it
    /// must FAIL with a decoded status and not poison the next path).
    #[arg(long, hide = true)]
    inject_bad_rkey: bool,
}

#[derive(Args, Debug)]
struct DoctorArgs {
    /// Read /sys, /proc and /boot under this directory instead of / (for
    /// inspecting a saved copy of another host's trees).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
    /// Also copy every file doctor read (sysfs, procfs, /boot, module
    /// files) into DIR, a new or empty directory, for `--sysroot DIR` on
    /// another machine (attach it to a bug report).
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// RDMA device to use. Default: the first one.
    #[arg(long, short = 'd', value_name = "NAME")]
    device: Option<String>,
    /// CUDA device ordinal for the GPU-memory rows.
    #[arg(long, short = 'g', default_value = "0", value_name = "N", value_parser = gpu_arg, allow_hyphen_values = true)]
    gpu: i32,
    /// Host memory only (no CUDA needed); not with --gpu, --dmabuf or --alloc.
    #[arg(long, conflicts_with_all = ["gpu", "dmabuf", "alloc"])]
    host_only: bool,
    /// Registration sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4K,64K,1M,16M", value_parser = size_arg, allow_hyphen_values = true)]
    sizes: Vec<u64>,
    /// Registrations per size.
    #[arg(long, default_value = "50", value_parser = iters_arg, allow_hyphen_values = true)]
    iters: usize,
    /// Message sizes of the bandwidth sweep (RDMA WRITE and READ each).
    #[arg(long, value_delimiter = ',', default_value = "64K,1M", value_parser = size_arg, allow_hyphen_values = true)]
    bw_sizes: Vec<u64>,
    /// Messages per size and operation (perftest -n).
    #[arg(long, default_value = "200", value_parser = iters_arg, allow_hyphen_values = true)]
    bw_iters: usize,
    /// QPs the messages are spread over (perftest -q).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    qps: u16,
    /// Register GPU memory through dma-buf (perftest --use_cuda_dmabuf).
    #[arg(long)]
    dmabuf: bool,
    /// GPU allocation: cuMemAlloc (perftest) or cuMemCreate (NCCL).
    #[arg(long = "alloc", value_enum, default_value = "cumemalloc")]
    alloc: BenchAlloc,
    /// Seconds to wait for a completion.
    #[arg(long, default_value = "30", value_parser = seconds_arg, allow_hyphen_values = true)]
    timeout: u64,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("role").required(true).args(["listen", "connect"])))]
struct PairArgs {
    /// Serve one test on this address (default 0.0.0.0) and exit.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "0.0.0.0",
          value_parser = host_arg, conflicts_with_all = ["bind"])]
    listen: Option<String>,
    /// Connect to a `--listen`ing peer (name or address).
    #[arg(long, value_name = "HOST", value_parser = host_arg, conflicts_with = "max_size")]
    connect: Option<String>,
    /// RDMA CM port.
    #[arg(long, default_value_t = pair::DEFAULT_PORT, value_parser = port_arg, allow_hyphen_values = true)]
    port: u16,
    /// Client: local address to connect from (selects the RDMA device);
    /// a server's address is --listen's.
    #[arg(long, value_name = "ADDR", value_parser = host_arg)]
    bind: Option<String>,
    /// Bytes to write in each direction (the client's size wins, up to the
    /// server's --max-size).
    #[arg(long, default_value = "1M", value_parser = size_arg, allow_hyphen_values = true)]
    size: u64,
    /// Server: the largest buffer a client may ask for (not with --connect).
    #[arg(long, default_value = "1G", value_parser = size_arg, allow_hyphen_values = true)]
    max_size: u64,
    /// Use GPU memory of this CUDA device instead of host memory.
    #[arg(long, short = 'g', value_name = "N", value_parser = gpu_arg, allow_hyphen_values = true)]
    gpu: Option<i32>,
    /// With --gpu: register the GPU buffer through dma-buf.
    #[arg(long, requires = "gpu")]
    dmabuf: bool,
    /// Seconds to wait for the peer at each step.
    #[arg(long, default_value = "60", value_parser = seconds_arg, allow_hyphen_values = true)]
    timeout: u64,
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{host}' has no address"))
}

/// Writes the report to stdout. A reader that went away (closed pipe) is
/// not an error worth a message.
fn emit(out: &str) -> Result<(), (i32, String)> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_all(out.as_bytes()).and_then(|_| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err((report::EXIT_INTERNAL, format!("writing the output: {e}"))),
    }
}

/// One line on stderr; a closed stderr is ignored (eprintln! would panic).
fn say(line: std::fmt::Arguments) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Makes `d` (and its parents) and checks that a file can be written in it.
fn writable_dir(d: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(d)?;
    let probe = d.join(".peermem-probe-write-test");
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(probe)
}

fn internal(e: String) -> (i32, String) {
    (report::EXIT_INTERNAL, e)
}

/// The document `--json` prints when a run could not produce its report
/// (a usage error, an unresolvable address, an internal error): the
/// common header and the message, so a script always gets JSON.
fn error_json(command: &str, code: i32, msg: &str) -> String {
    let status = match code {
        report::EXIT_FAIL => "fail",
        report::EXIT_UNTESTED => "untested",
        _ => "error",
    };
    /// The common header of every document, then the message.
    #[derive(serde::Serialize)]
    struct ErrorDoc<'a> {
        schema_version: u32,
        command: &'a str,
        version: &'static str,
        status: &'static str,
        exit_code: i32,
        error: &'a str,
    }
    let v = ErrorDoc {
        schema_version: report::SCHEMA_VERSION,
        command,
        version: env!("CARGO_PKG_VERSION"),
        status,
        exit_code: code,
        error: msg,
    };
    let v = serde_json::to_string_pretty(&v).unwrap_or_default();
    format!("{v}\n")
}

/// `--json` among the arguments (before a `--`), for errors found before or
/// without a parsed command line.
fn wants_json(args: &[String]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// The subcommand named on the command line, if any.
fn command_of(args: &[String]) -> &str {
    args.iter()
        .skip(1)
        .map(String::as_str)
        .find(|a| matches!(*a, "check" | "doctor" | "bench" | "pair"))
        .unwrap_or("peermem-probe")
}

/// Runs the command; Err is an exit status and a one-line message.
fn run(cli: Cli) -> Result<i32, (i32, String)> {
    let json = cli.json;
    if cli.verbose {
        peermem_probe::trace::enable();
    }
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
                allocations: match a.alloc {
                    AllocArg::Cumemalloc => vec![Allocation::CuMemAlloc],
                    AllocArg::Cumemcreate => vec![Allocation::CuMemCreate],
                    AllocArg::All => vec![Allocation::CuMemAlloc, Allocation::CuMemCreate],
                },
                timeout: Duration::from_secs(a.timeout),
                seed: 0x5eed_0000_0000_0001 ^ std::process::id() as u64,
                inject_bad_rkey: a.inject_bad_rkey,
            };
            let r = check::run(&opts);
            emit(&if json {
                render::json(&r).map_err(internal)?
            } else {
                render::check(&r)
            })?;
            Ok(r.exit_code)
        }
        Cmd::Doctor(a) => {
            let root = match a.sysroot {
                Some(d) if !d.is_dir() => {
                    return Err((
                        report::EXIT_USAGE,
                        format!("--sysroot {}: not a directory", d.display()),
                    ))
                }
                Some(d) => SysRoot::at(d),
                None => SysRoot::live(),
            };
            if let Some(d) = &a.save {
                let used = std::fs::read_dir(d).map(|mut e| e.next().is_some());
                if d.exists() && !matches!(used, Ok(false)) {
                    return Err((
                        report::EXIT_USAGE,
                        format!(
                            "--save {}: exists and is not an empty directory (a saved tree must hold one host's files only)",
                            d.display()
                        ),
                    ));
                }
                // Found out before the run, not after it: a directory that
                // cannot be made or written is the caller's to change.
                writable_dir(d).map_err(|e| {
                    (
                        report::EXIT_USAGE,
                        format!(
                            "--save {}: cannot write there ({e}): name a directory you can write, e.g. /tmp/peermem-doctor",
                            d.display()
                        ),
                    )
                })?;
            }
            let root = if a.save.is_some() {
                root.recording()
            } else {
                root
            };
            let r = doctor::run(&root);
            if let Some(d) = &a.save {
                // The directory was writable a moment ago: a failure now is
                // the filesystem's (full, removed), not ours.
                let n = root.save(d).map_err(|e| {
                    (
                        report::EXIT_USAGE,
                        format!("--save {}: the copy failed part-way ({e})", d.display()),
                    )
                })?;
                say(format_args!(
                    "peermem-probe doctor: saved {n} paths under {}; read them back with `peermem-probe doctor --sysroot {}`",
                    d.display(),
                    d.display()
                ));
            }
            emit(&if json {
                render::json(&r).map_err(internal)?
            } else {
                render::doctor(&r)
            })?;
            Ok(r.exit_code)
        }
        Cmd::Bench(a) => {
            let opts = bench::BenchOptions {
                device: a.device,
                gpu: a.gpu,
                host_only: a.host_only,
                sizes: a.sizes.iter().map(|s| *s as usize).collect(),
                iters: a.iters,
                bw_sizes: a.bw_sizes.iter().map(|s| *s as usize).collect(),
                bw_iters: a.bw_iters,
                qps: a.qps as usize,
                dmabuf: a.dmabuf,
                alloc: match a.alloc {
                    BenchAlloc::Cumemalloc => Allocation::CuMemAlloc,
                    BenchAlloc::Cumemcreate => Allocation::CuMemCreate,
                },
                timeout: Duration::from_secs(a.timeout),
            };
            let mut bar = render::Bar::new(json);
            let r = bench::run(&opts, &mut bar);
            bar.done();
            emit(&if json {
                render::json(&r).map_err(internal)?
            } else {
                render::bench(&r)
            })?;
            Ok(r.exit_code)
        }
        Cmd::Pair(a) => {
            let timeout = Duration::from_secs(a.timeout);
            let unresolved = |e| (report::EXIT_UNTESTED, e);
            let bind = a
                .bind
                .as_deref()
                .map(|b| resolve(b, 0))
                .transpose()
                .map_err(unresolved)?;
            let server = a.listen.is_some();
            let host = a.listen.or(a.connect).unwrap_or_default();
            let opts = pair::PairOptions {
                addr: resolve(&host, a.port).map_err(unresolved)?,
                bind,
                size: a.size as usize,
                max_size: a.max_size as usize,
                gpu: a.gpu,
                dmabuf: a.dmabuf,
                timeout,
            };
            let r = if server {
                // On stderr even with --json: scripts wait for this line.
                pair::serve(&opts, &mut |addr| {
                    say(format_args!("peermem-probe pair: listening on {addr}"))
                })
            } else {
                pair::connect(&opts)
            };
            emit(&if json {
                render::json(&r).map_err(internal)?
            } else {
                render::pair(&r)
            })?;
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
        say(format_args!(
            "peermem-probe: internal error: {msg} (please report this)"
        ));
    }));
    let args: Vec<String> = std::env::args().collect();
    let json = wants_json(&args);
    let cmd = command_of(&args).to_string();
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) if json => {
            let msg = e.kind().to_string();
            let detail = e.to_string();
            let first = detail
                .lines()
                .next()
                .unwrap_or(&msg)
                .trim_start_matches("error: ");
            say(format_args!("{}", detail.trim_end()));
            let _ = emit(&error_json(&cmd, report::EXIT_USAGE, first));
            std::process::exit(report::EXIT_USAGE);
        }
        Err(e) => e.exit(),
    };
    let code = match std::panic::catch_unwind(|| run(cli)) {
        Ok(Ok(code)) => code,
        Ok(Err((code, msg))) => {
            say(format_args!("peermem-probe: error: {msg}"));
            if json {
                let _ = emit(&error_json(&cmd, code, &msg));
            }
            code
        }
        Err(_) => {
            if json {
                let _ = emit(&error_json(
                    &cmd,
                    report::EXIT_INTERNAL,
                    "internal error (see stderr; please report this)",
                ));
            }
            report::EXIT_INTERNAL
        }
    };
    std::process::exit(code);
}
