//! The module layers listed in src/lib.rs hold in the sources: no module
//! names a module of a higher layer (`crate::m`, `super::m` reaching the
//! crate root, `crate::{m, ..}`), and no modules name each other in a
//! circle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layers of lib.rs's doc comment, bottom first: each numbered line
/// (`//! 2. `a`, `b`: ...`) names its modules in backticks before the
/// first colon.
fn layers(lib: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("//! ") else {
            continue;
        };
        let Some((num, item)) = rest.split_once(". ") else {
            continue;
        };
        if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let names = item.split(':').next().unwrap_or("");
        let mods: Vec<String> = names
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        assert!(!mods.is_empty(), "layer line without modules: {line}");
        out.push(mods);
    }
    out
}

/// The modules lib.rs declares (`pub mod x;`, `mod x;`).
fn declared(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| {
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
        })
        .filter_map(|l| l.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segment of each item of a `{a, b::c, d}` group.
fn group(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, true);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => break,
            '}' => depth -= 1,
            ',' if depth == 1 => start = true,
            c if start && depth == 1 && !c.is_whitespace() => {
                out.push(ident(&s[i..]).to_string());
                start = false;
            }
            _ => {}
        }
    }
    out
}

/// The crate-root names one line of code refers to, with `depth` the
/// nesting of its file below src/ (src/x.rs: 0, src/x/y.rs: 1): after
/// `crate::`, or after depth + 1 `super::`.
fn root_refs(code: &str, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut take = |rest: &str| {
        if rest.starts_with('{') {
            out.extend(group(rest));
        } else {
            out.push(ident(rest).to_string());
        }
    };
    let word_start =
        |i: usize| !code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
    for (i, _) in code.match_indices("crate::") {
        if word_start(i) {
            take(&code[i + "crate::".len()..]);
        }
    }
    let supers = "super::".repeat(depth + 1);
    for (i, _) in code.match_indices(&supers) {
        let rest = &code[i + supers.len()..];
        let before = &code[..i];
        if word_start(i) && !rest.starts_with("super::") && !before.ends_with("super::") {
            take(rest);
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

/// Every .rs file under `dir`, with its path relative to src/.
fn rust_files(dir: &Path, rel: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap();
        if p.is_dir() {
            rust_files(&p, &rel.join(name), out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push((rel.join(name), fs::read_to_string(&p).unwrap()));
        }
    }
}

/// Module -> (referenced module -> first place it is referenced).
type Uses = BTreeMap<String, BTreeMap<String, String>>;

fn uses(modules: &BTreeSet<String>) -> Uses {
    let mut files = Vec::new();
    rust_files(&src_dir(), Path::new(""), &mut files);
    let mut out = Uses::new();
    for (rel, text) in files {
        let parts: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        if parts == ["lib.rs"] {
            continue;
        }
        let owner = parts[0].trim_end_matches(".rs").to_string();
        assert!(
            modules.contains(&owner),
            "src/{}: module `{owner}` is in no layer of lib.rs",
            rel.display()
        );
        let depth = parts.len() - 1;
        let entry = out.entry(owner.clone()).or_default();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for m in root_refs(code, depth) {
                if m != owner && modules.contains(&m) {
                    entry
                        .entry(m)
                        .or_insert_with(|| format!("src/{}:{}", rel.display(), n + 1));
                }
            }
        }
    }
    out
}

#[test]
fn scanner_finds_root_paths() {
    assert_eq!(root_refs("use crate::remedy::Step;", 0), ["remedy"]);
    assert_eq!(
        root_refs("use crate::{loopback::parse_gid, report};", 0),
        ["loopback", "report"]
    );
    assert_eq!(root_refs("$crate::trace::line(x)", 0), ["trace"]);
    assert_eq!(root_refs("use super::remedy;", 0), ["remedy"]);
    assert_eq!(
        root_refs("use super::{item, Item};", 1),
        Vec::<String>::new()
    );
    assert_eq!(root_refs("use super::super::sysinfo;", 1), ["sysinfo"]);
    assert_eq!(root_refs("use super::*;", 0), Vec::<String>::new());
    assert_eq!(root_refs("use my_crate::remedy;", 0), Vec::<String>::new());
}

#[test]
fn every_module_has_one_layer() {
    let lib = fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    let layers = layers(&lib);
    assert!(layers.len() >= 2, "lib.rs lists no layers");
    let mut seen = BTreeSet::new();
    for m in layers.iter().flatten() {
        assert!(seen.insert(m.clone()), "`{m}` is in two layers");
    }
    assert_eq!(
        seen,
        declared(&lib),
        "the layers and lib.rs's modules differ"
    );
}

#[test]
fn no_module_uses_a_higher_layer() {
    let lib = fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    let rank: BTreeMap<String, usize> = layers(&lib)
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (m.clone(), i + 1)))
        .collect();
    let modules = rank.keys().cloned().collect();
    let mut bad = Vec::new();
    for (from, to) in uses(&modules) {
        for (m, at) in to {
            if rank[&m] > rank[&from] {
                bad.push(format!(
                    "{at}: `{from}` (layer {}) uses `{m}` (layer {})",
                    rank[&from], rank[&m]
                ));
            }
        }
    }
    assert!(bad.is_empty(), "upward uses:\n{}", bad.join("\n"));
}

#[test]
fn no_modules_use_each_other_in_a_circle() {
    let lib = fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    let modules: BTreeSet<String> = layers(&lib).into_iter().flatten().collect();
    let graph = uses(&modules);
    // Depth-first search; a module met again while still on the path
    // closes a circle.
    fn visit(
        m: &str,
        graph: &Uses,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m.to_string());
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in graph.get(m).into_iter().flat_map(|t| t.keys()) {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in &modules {
        if let Some(c) = visit(m, &graph, &mut Vec::new(), &mut done) {
            panic!("modules use each other in a circle: {}", c.join(" -> "));
        }
    }
}
