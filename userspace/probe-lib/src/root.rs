//! Every read of /sys, /proc and /boot goes through a [`SysRoot`], so the
//! unit tests can point the probes at fixture trees instead of the live
//! system.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// A filesystem root under which `sys/`, `proc/` and `boot/` are looked up.
#[derive(Debug, Clone)]
pub struct SysRoot {
    root: PathBuf,
}

impl Default for SysRoot {
    fn default() -> Self {
        Self::live()
    }
}

impl SysRoot {
    /// The running system (`/`).
    pub fn live() -> Self {
        Self {
            root: PathBuf::from("/"),
        }
    }

    /// A fixture tree (or a chroot). The path is made absolute so that the
    /// symbolic links inside it resolve relative to the tree.
    pub fn at(root: impl AsRef<Path>) -> Self {
        let root = root.as_ref();
        let root = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        Self { root }
    }

    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The host path of `rel` (an absolute path as seen on the system).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// The whole file, or None when it does not exist or cannot be read.
    pub fn read(&self, rel: &str) -> Option<String> {
        fs::read_to_string(self.path(rel)).ok()
    }

    /// The file's content, trimmed.
    pub fn read_trim(&self, rel: &str) -> Option<String> {
        self.read(rel).map(|s| s.trim().to_string())
    }

    pub fn read_bytes(&self, rel: &str) -> io::Result<Vec<u8>> {
        fs::read(self.path(rel))
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// Entry names of a directory, sorted; empty when it does not exist.
    pub fn list(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = match fs::read_dir(self.path(rel)) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        names
    }

    /// Resolves `rel` (following symbolic links) and returns it as a path
    /// on the system again, e.g. `/sys/devices/pci0000:00/0000:00:01.0`.
    pub fn resolve(&self, rel: &str) -> Option<String> {
        let real = fs::canonicalize(self.path(rel)).ok()?;
        let inner = real.strip_prefix(&self.root).ok()?;
        Some(format!("/{}", inner.to_string_lossy()))
    }

    /// A hexadecimal sysfs attribute such as `0x10de`.
    pub fn read_hex(&self, rel: &str) -> Option<u64> {
        let s = self.read_trim(rel)?;
        u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_relative_to_the_root() {
        let dir = std::env::temp_dir().join(format!("pmprobe-root-{}", std::process::id()));
        fs::create_dir_all(dir.join("sys/a")).unwrap();
        fs::write(dir.join("sys/a/vendor"), "0x10de\n").unwrap();
        let r = SysRoot::at(&dir);
        assert_eq!(r.read_hex("/sys/a/vendor"), Some(0x10de));
        assert_eq!(r.read_trim("sys/a/vendor").as_deref(), Some("0x10de"));
        assert_eq!(r.list("/sys"), vec!["a".to_string()]);
        assert_eq!(r.resolve("/sys/a/vendor").as_deref(), Some("/sys/a/vendor"));
        assert!(r.read("/sys/missing").is_none());
        assert!(!r.is_live());
        fs::remove_dir_all(&dir).unwrap();
    }
}
