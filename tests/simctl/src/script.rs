//! Scripts: statements run in one process, so the control files (and the
//! allocations and registrations made through them) live across them.
//!
//! ```text
//! # comment                        statements end at a newline or ';'
//! A=gpu alloc 2M fragmented:4      NAME=... captures the VA / handle
//! H=core reg $A+0x1000 1M          $NAME, ${NAME}, $NAME+N, $NAME-N
//! !EINVAL core reg $A+1 0          must fail (with that errno; `!` alone: any)
//! & core reg $A 2M --hook ...      runs in a background thread
//! ? core dma-check $H              a failure is printed and ignored
//! wait                             joins the background threads
//! repeat 10 core dma-check $H      runs a command N times
//! set X 0x1000                     sets a variable
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::dev::{errno_name, errno_value, Devices};
use crate::num;

/// One parsed statement.
#[derive(Debug, PartialEq, Eq)]
pub struct Stmt {
    pub background: bool,
    /// `?`: a failure is reported and ignored.
    pub may_fail: bool,
    /// `Some(None)`: must fail; `Some(Some(e))`: must fail with errno e.
    pub expect_fail: Option<Option<i32>>,
    pub capture: Option<String>,
    pub words: Vec<String>,
    pub text: String,
}

/// Splits a script into statements.
pub fn parse(src: &str) -> Result<Vec<Stmt>, String> {
    let mut out = Vec::new();
    for line in src.lines() {
        let line = line.split('#').next().unwrap_or("");
        for part in line.split(';') {
            let text = part.trim();
            if text.is_empty() {
                continue;
            }
            out.push(parse_stmt(text)?);
        }
    }
    Ok(out)
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

fn parse_stmt(text: &str) -> Result<Stmt, String> {
    let mut words: Vec<String> = text.split_whitespace().map(String::from).collect();
    let mut s = Stmt {
        background: false,
        may_fail: false,
        expect_fail: None,
        capture: None,
        words: Vec::new(),
        text: text.to_string(),
    };
    while let Some(first) = words.first().cloned() {
        if first == "&" {
            s.background = true;
            words.remove(0);
        } else if let Some(rest) = first.strip_prefix('?') {
            s.may_fail = true;
            if rest.is_empty() {
                words.remove(0);
            } else {
                words[0] = rest.to_string();
            }
        } else if let Some(e) = first.strip_prefix('!') {
            s.expect_fail = Some(if e.is_empty() {
                None
            } else {
                Some(errno_value(e).ok_or_else(|| format!("unknown errno {e} in: {text}"))?)
            });
            words.remove(0);
        } else if let Some((name, rest)) = first.split_once('=').filter(|(n, _)| is_ident(n)) {
            s.capture = Some(name.to_string());
            if rest.is_empty() {
                words.remove(0);
            } else {
                words[0] = rest.to_string();
            }
        } else {
            break;
        }
    }
    if words.is_empty() {
        return Err(format!("empty statement: {text}"));
    }
    s.words = words;
    Ok(s)
}

/// Expands `$NAME`, `${NAME}`, `$NAME+N`, `$NAME-N` in a word.
pub fn expand(word: &str, vars: &HashMap<String, u64>) -> Result<String, String> {
    let Some(rest) = word.strip_prefix('$') else {
        return Ok(word.to_string());
    };
    let (name, tail) = if let Some(r) = rest.strip_prefix('{') {
        r.split_once('}')
            .ok_or_else(|| format!("unterminated ${{ in {word}"))?
    } else {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        rest.split_at(end)
    };
    let base = *vars
        .get(name)
        .ok_or_else(|| format!("undefined variable ${name}"))?;
    let v = if tail.is_empty() {
        base
    } else if let Some(n) = tail.strip_prefix('+') {
        base.wrapping_add(num::parse(n).ok_or_else(|| format!("bad offset in {word}"))?)
    } else if let Some(n) = tail.strip_prefix('-') {
        base.wrapping_sub(num::parse(n).ok_or_else(|| format!("bad offset in {word}"))?)
    } else {
        return Err(format!("cannot expand {word}"));
    };
    Ok(format!("{v:#x}"))
}

/// A running script: devices, variables, background threads.
pub struct Runner {
    pub dev: Arc<Devices>,
    vars: Arc<Mutex<HashMap<String, u64>>>,
    bg: Mutex<Vec<JoinHandle<bool>>>,
    next_bg: AtomicUsize,
}

impl Default for Runner {
    fn default() -> Self {
        Self {
            dev: Arc::new(Devices::default()),
            vars: Arc::new(Mutex::new(HashMap::new())),
            bg: Mutex::new(Vec::new()),
            next_bg: AtomicUsize::new(1),
        }
    }
}

/// Runs one statement in the current thread; false if it failed.
fn exec(dev: &Devices, vars: &Mutex<HashMap<String, u64>>, s: &Stmt, prefix: &str) -> bool {
    let out = |line: String| println!("{prefix}{line}");
    let fail = |msg: String| {
        eprintln!("{prefix}simctl: {}: {}", s.text, msg);
        false
    };
    let words: Result<Vec<String>, String> = {
        let v = vars.lock().unwrap_or_else(|e| e.into_inner());
        s.words.iter().map(|w| expand(w, &v)).collect()
    };
    let words = match words {
        Ok(w) => w,
        // `?stmt` may fail: also when it names a variable an earlier
        // statement that was allowed to fail never set.
        Err(e) if s.may_fail => {
            out(format!("ignored-error: {e}"));
            return true;
        }
        Err(e) => return fail(e),
    };
    // `repeat N COMMAND` runs it N times; `until MS COMMAND` retries it
    // until it does what the statement expects (succeeds, or fails with the
    // `!ERRNO` given), for at most MS milliseconds.
    let (reps, until, words) = match words[0].as_str() {
        "repeat" | "until" => match words.get(1).and_then(|n| num::parse(n)) {
            Some(n) if words.len() > 2 && words[0] == "repeat" => (n, None, words[2..].to_vec()),
            Some(n) if words.len() > 2 => (1, Some(n), words[2..].to_vec()),
            _ => return fail(format!("{} N COMMAND", words[0])),
        },
        _ => (1, None, words),
    };
    if words[0] == "set" {
        let (Some(name), Some(v)) = (words.get(1), words.get(2).and_then(|v| num::parse(v))) else {
            return fail("set NAME VALUE".into());
        };
        vars.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.clone(), v);
        return true;
    }
    let deadline = until.map(|ms| Instant::now() + Duration::from_millis(ms));
    for _ in 0..reps {
        loop {
            match attempt(dev, vars, s, &words, &out) {
                Ok(()) => break,
                Err(_) if deadline.is_some_and(|d| Instant::now() < d) => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(msg) => return fail(msg),
            }
        }
    }
    true
}

/// Runs `words` once and checks the outcome against what `s` expects;
/// `Err` says why it does not match.
fn attempt(
    dev: &Devices,
    vars: &Mutex<HashMap<String, u64>>,
    s: &Stmt,
    words: &[String],
    out: &dyn Fn(String),
) -> Result<(), String> {
    let r = cmd::run(dev, words, out);
    match (r, s.expect_fail) {
        (Ok(v), None) => {
            if let (Some(name), Some(v)) = (&s.capture, v) {
                vars.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.clone(), v);
            }
        }
        (Ok(_), Some(_)) => return Err("succeeded but was expected to fail".into()),
        (Err(e), Some(want)) => match (e.errno(), want) {
            (Some(got), Some(w)) if got != w => {
                return Err(format!(
                    "failed with {} but {} was expected: {e}",
                    errno_name(got),
                    errno_name(w)
                ))
            }
            (None, _) => return Err(e.to_string()),
            (Some(got), _) => out(format!("expected-error {}: {}", errno_name(got), s.text)),
        },
        (Err(e), None) if s.may_fail => out(format!(
            "ignored-error {}: {e}",
            e.errno().map_or("E?", errno_name)
        )),
        (Err(e), None) => return Err(e.to_string()),
    }
    Ok(())
}

impl Runner {
    /// Runs statements in order; stops at the first failure.
    pub fn run(&self, stmts: Vec<Stmt>) -> bool {
        for s in stmts {
            if s.words == ["wait"] {
                if !self.wait() {
                    return false;
                }
                continue;
            }
            if s.background {
                let n = self.next_bg.fetch_add(1, Ordering::Relaxed);
                let (dev, vars) = (self.dev.clone(), self.vars.clone());
                let h = std::thread::spawn(move || exec(&dev, &vars, &s, &format!("[bg{n}] ")));
                self.bg.lock().unwrap_or_else(|e| e.into_inner()).push(h);
                continue;
            }
            if !exec(&self.dev, &self.vars, &s, "") {
                self.wait();
                return false;
            }
        }
        self.wait()
    }

    /// Joins every background statement; false if one failed.
    pub fn wait(&self) -> bool {
        let handles: Vec<_> = self
            .bg
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        let mut ok = true;
        for h in handles {
            ok &= h.join().unwrap_or(false);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements() {
        let s = parse(
            "A=gpu alloc 2M fragmented:4 # c\n !EINVAL core reg $A+1 0; & core dereg 1\nwait",
        )
        .unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].capture.as_deref(), Some("A"));
        assert_eq!(s[0].words, ["gpu", "alloc", "2M", "fragmented:4"]);
        assert_eq!(s[1].expect_fail, Some(Some(22)));
        assert_eq!(s[1].words[2], "$A+1");
        assert!(s[2].background);
        assert_eq!(s[3].words, ["wait"]);
        let s = parse("H= core reg 1 2\n! gpu free 0\n& ? core dereg 1").unwrap();
        assert!(s[2].background && s[2].may_fail);
        assert_eq!(s[0].capture.as_deref(), Some("H"));
        assert_eq!(s[0].words[0], "core");
        assert_eq!(s[1].expect_fail, Some(None));
        let s = parse("& ?core dereg 1").unwrap();
        assert!(s[0].background && s[0].may_fail && s[0].words[0] == "core");
        assert!(parse("!EWHAT gpu free 0").is_err());
    }

    #[test]
    fn variables() {
        let mut v = HashMap::new();
        v.insert("A".to_string(), 0x30_0000_0000u64);
        assert_eq!(expand("$A", &v).unwrap(), "0x3000000000");
        assert_eq!(expand("${A}+64K", &v).unwrap(), "0x3000010000");
        assert_eq!(expand("$A-0x1000", &v).unwrap(), "0x2ffffff000");
        assert_eq!(expand("plain", &v).unwrap(), "plain");
        assert!(expand("$B", &v).is_err());
    }
}
