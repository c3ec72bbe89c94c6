//! Fixture trees for the doctor's tests: a system root under the temporary
//! directory with the files a test writes into it.

use std::path::{Path, PathBuf};

/// A fixture tree, removed when the test is done with it (also when it
/// fails).
pub(crate) struct Tree(PathBuf);

impl std::ops::Deref for Tree {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tree whose running kernel is 7.3.4+deb13-amd64, with no module loaded.
pub(crate) fn tree(tag: &str) -> Tree {
    let t = std::env::temp_dir().join(format!("pmprobe-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    std::fs::create_dir_all(t.join("proc/sys/kernel")).unwrap();
    std::fs::write(t.join("proc/sys/kernel/osrelease"), "7.3.4+deb13-amd64\n").unwrap();
    std::fs::write(t.join("proc/modules"), "").unwrap();
    Tree(t)
}

/// Writes `content` at `rel` in the tree, making its directories.
pub(crate) fn mk(t: &Path, rel: &str, content: &[u8]) {
    let p = t.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}
