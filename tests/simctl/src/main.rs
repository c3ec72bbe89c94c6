//! simctl: drives the peermem-rs simulators from userspace.
//!
//! ```text
//! simctl COMMAND...            one command (control files closed at exit)
//! simctl run 'STMT; STMT...'   statements in one process (see script.rs)
//! simctl script FILE|-         the same from a file or stdin
//! simctl bench LEN [OPTIONS]   registration cost, as JSON (see bench.rs)
//! simctl bench-mixed LEN ...  a mixed load: registrations beside another
//!                             process's deregistrations (see mixed.rs)
//! simctl bench-gda ...        many small long-lived registrations, then an
//!                             exit holding many (see gda.rs)
//! ```
//! Commands (output is "key=value" text, one fact per line):
//! ```text
//! gpu alloc LEN [contiguous|fragmented:K|shuffled] [--at VA]   -> alloc va=...
//! gpu free VA | gpu fault get_pages|dma_map|persistent|put|put_persistent|unmap N [ERRNO]
//! gpu hook map_prologue|map_epilogue|unmap|put|get_pages|get_pages_return [COUNT] [WAIT_MS]
//! gpu delay US_PER_PAGE | gpu stats | gpu get KEY | gpu reset
//! core reg VA LEN [--access rw|ro|N] [--hook STEP:ACTION[:MS[:VA]]] [--sg-max N]
//!      -> reg handle=H client=... core_context=N page_size=... nents=N; sg ... lines
//! core dereg H | core dma-check H | core query H | core stats | core get KEY | core reset
//! core disassociate H | core reg ... --qp
//! fork COMMAND... | handoff gpu|core | send-fd gpu|core | exec STMT [+ STMT]...
//! open gpu|core | close gpu|core | check [KIND=N|KIND+]... | write PATH VALUE | read PATH
//! sleep MS | echo TEXT
//! data fill|verify VA LEN SEED | data write|read H VA LEN SEED   (see data.rs)
//! ```
//! Exit status: 0 if every statement did what it should, 1 otherwise, 2 on
//! a usage error.

mod bench;
mod cmd;
mod data;
mod dev;
mod fuzz;
mod gda;
mod mixed;
mod num;
mod proc;
mod rng;
mod script;
mod stress;
mod stress_mps;
mod stress_ops;
mod uapi;

use std::io::Read;
use std::process::ExitCode;

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let src = match args.first().map(String::as_str) {
        None | Some("-h") | Some("--help") | Some("help") => {
            println!("{}", include_str!("usage.txt"));
            return ExitCode::SUCCESS;
        }
        Some("bench") => return exit(bench::main(&args[1..])),
        Some("bench-worker") => return exit(bench::worker_main(&args[1..])),
        Some("bench-mixed") => return exit(mixed::main(&args[1..])),
        Some("bench-mixed-peer") => return exit(mixed::peer_main(&args[1..])),
        Some("bench-gda") => return exit(gda::main(&args[1..])),
        Some("bench-gda-peer") => return exit(gda::peer_main(&args[1..])),
        Some("stress") => {
            return if stress::main(&args[1..]) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Some("fuzz") => {
            return if fuzz::main(&args[1..]) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Some("run") => args[1..].join(" "),
        Some("script") => {
            let mut s = String::new();
            let r = match args.get(1).map(String::as_str) {
                None | Some("-") => std::io::stdin().read_to_string(&mut s).map(|_| ()),
                Some(f) => std::fs::read_to_string(f).map(|t| s = t),
            };
            if let Err(e) = r {
                eprintln!("simctl: {e}");
                return ExitCode::from(2);
            }
            s
        }
        Some(_) => args.join(" "),
    };
    let stmts = match script::parse(&src) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("simctl: {e}");
            return ExitCode::from(2);
        }
    };
    if script::Runner::default().run(stmts) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
