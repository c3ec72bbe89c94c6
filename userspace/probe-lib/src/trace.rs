//! `--verbose`: a trace of every step on stderr, with the time since
//! start, so a hang or a slow step shows where it happens.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

static ON: AtomicBool = AtomicBool::new(false);

fn start() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// Turns the trace on (for the rest of the process).
pub fn enable() {
    start();
    ON.store(true, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// One trace line: `[  0.012345] msg`.
pub fn line(msg: std::fmt::Arguments) {
    if enabled() {
        use std::io::Write;
        // A closed stderr must not end the run (eprintln! would panic).
        let _ = writeln!(
            std::io::stderr(),
            "[{:>11.6}] {msg}",
            start().elapsed().as_secs_f64()
        );
    }
}

/// `trace!("ibv_reg_mr {len} bytes")`: formats only when tracing is on.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => {
        if $crate::trace::enabled() {
            $crate::trace::line(format_args!($($arg)*));
        }
    };
}
