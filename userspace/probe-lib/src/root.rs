//! Every read of /sys, /proc and /boot goes through a [`SysRoot`], so the
//! unit tests can point the probes at fixture trees instead of the live
//! system, and `doctor --save DIR` can copy exactly what it read into a
//! tree that `--sysroot DIR` reads back on another machine.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A filesystem root under which `sys/`, `proc/` and `boot/` are looked up.
///
/// # Invariants
///
/// `root` is absolute when made by [`SysRoot::at`] from an existing
/// directory. When `seen` is set, every path looked up through this value
/// (or a clone) is in it: (path, true) for a content read, (path, false)
/// for an existence test, a listing or a resolution.
#[derive(Debug, Clone)]
pub struct SysRoot {
    root: PathBuf,
    seen: Option<Arc<Mutex<Seen>>>,
}

/// The paths a recording root looked up: (path, content read).
type Seen = BTreeSet<(String, bool)>;

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
            seen: None,
        }
    }

    /// A fixture tree (or a chroot). The path is made absolute so that the
    /// symbolic links inside it resolve relative to the tree.
    pub fn at(root: impl AsRef<Path>) -> Self {
        let root = root.as_ref();
        let root = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        Self { root, seen: None }
    }

    /// The same root, remembering every path looked up (for [`SysRoot::save`]).
    pub fn recording(mut self) -> Self {
        self.seen = Some(Arc::default());
        self
    }

    fn note(&self, rel: &str, content: bool) {
        if let Some(seen) = &self.seen {
            if let Ok(mut s) = seen.lock() {
                s.insert((format!("/{}", rel.trim_start_matches('/')), content));
            }
        }
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
        self.note(rel, true);
        fs::read_to_string(self.path(rel)).ok()
    }

    /// The file's content, trimmed.
    pub fn read_trim(&self, rel: &str) -> Option<String> {
        self.read(rel).map(|s| s.trim().to_string())
    }

    pub fn read_bytes(&self, rel: &str) -> io::Result<Vec<u8>> {
        self.note(rel, true);
        fs::read(self.path(rel))
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.note(rel, false);
        self.path(rel).exists()
    }

    /// Entry names of a directory, sorted; empty when it does not exist.
    pub fn list(&self, rel: &str) -> Vec<String> {
        self.note(rel, false);
        let mut names: Vec<String> = match fs::read_dir(self.path(rel)) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        for n in &names {
            self.note(&format!("{}/{n}", rel.trim_end_matches('/')), false);
        }
        names
    }

    /// Resolves `rel` (following symbolic links) and returns it as a path
    /// on the system again, e.g. `/sys/devices/pci0000:00/0000:00:01.0`.
    pub fn resolve(&self, rel: &str) -> Option<String> {
        self.note(rel, false);
        let real = fs::canonicalize(self.path(rel)).ok()?;
        let inner = real.strip_prefix(&self.root).ok()?;
        Some(format!("/{}", inner.to_string_lossy()))
    }

    /// A hexadecimal sysfs attribute such as `0x10de`.
    pub fn read_hex(&self, rel: &str) -> Option<u64> {
        let s = self.read_trim(rel)?;
        u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
    }

    /// Copies every path this (recording) root looked up into `dest`:
    /// directories, symbolic links (absolute targets made relative, so
    /// they resolve inside `dest`) and their targets, the content of the
    /// files read; paths only tested or listed, and device files, become
    /// empty files with the original's permission bits (the doctor reads
    /// device files' modes). Files that exist but cannot be read are left
    /// out, as they were not seen. `/proc/kallsyms` keeps only the
    /// peer-memory symbols the doctor looks for, with their addresses
    /// zeroed: the saved tree is meant to be attached to a public bug
    /// report, and kernel addresses defeat KASLR. Returns the number of
    /// paths saved.
    pub fn save(&self, dest: &Path) -> io::Result<usize> {
        let seen: Vec<(String, bool)> = match &self.seen {
            Some(s) => s
                .lock()
                .map_err(|_| io::Error::other("the record of paths is poisoned"))?
                .iter()
                .cloned()
                .collect(),
            None => return Err(io::Error::other("this root did not record what it read")),
        };
        fs::create_dir_all(dest)?;
        let mut n = 0;
        for (rel, content) in &seen {
            if self.save_one(dest, Path::new(rel), *content, 0)? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Saves `rel` (absolute, as seen on the system) under `dest`; false
    /// when it does not exist.
    fn save_one(&self, dest: &Path, rel: &Path, content: bool, depth: u32) -> io::Result<bool> {
        if depth > 16 {
            return Ok(false); // a loop of links: as the kernel's ELOOP
        }
        let parts: Vec<&std::ffi::OsStr> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(p) => Some(p),
                _ => None,
            })
            .collect();
        let mut inner = PathBuf::new();
        for (i, part) in parts.iter().enumerate() {
            inner.push(part);
            let src = self.root.join(&inner);
            let Ok(md) = fs::symlink_metadata(&src) else {
                return Ok(false);
            };
            let to = dest.join(&inner);
            let last = i + 1 == parts.len();
            if md.file_type().is_symlink() {
                let mut target = fs::read_link(&src)?;
                if target.is_absolute() {
                    // Relative to the link's directory, within the tree.
                    let up = "../".repeat(inner.components().count() - 1);
                    target = Path::new(&up).join(target.strip_prefix("/").unwrap_or(&target));
                }
                if fs::symlink_metadata(&to).is_err() {
                    std::os::unix::fs::symlink(&target, &to)?;
                }
                // Go on from where the link points.
                let Ok(real) = fs::canonicalize(&src) else {
                    return Ok(false);
                };
                let Ok(real_inner) = real.strip_prefix(&self.root) else {
                    return Ok(false);
                };
                let mut rest = Path::new("/").join(real_inner);
                for p in &parts[i + 1..] {
                    rest.push(p);
                }
                return self.save_one(dest, &rest, content, depth + 1);
            }
            if md.is_dir() || !last {
                fs::create_dir_all(&to)?;
            } else if content && md.is_file() {
                match fs::read(&src) {
                    Ok(b) if inner == Path::new("proc/kallsyms") => {
                        fs::write(&to, redact_kallsyms(&b))?
                    }
                    Ok(b) => fs::write(&to, b)?,
                    Err(_) => return Ok(false),
                }
            } else if fs::symlink_metadata(&to).is_err() {
                fs::write(&to, b"")?;
                fs::set_permissions(&to, md.permissions())?;
            }
        }
        Ok(true)
    }
}

/// The lines of a kallsyms text that name a peer-memory symbol
/// (`ib_register_peer_memory_client` and its kin), with the address
/// field zeroed: all the doctor reads there, and nothing of the layout.
fn redact_kallsyms(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in String::from_utf8_lossy(text).lines() {
        if !line.contains("peer_mem") {
            continue;
        }
        let rest = line.split_once(' ').map_or(line, |(_, r)| r);
        out.extend_from_slice(format!("0000000000000000 {rest}\n").as_bytes());
    }
    out
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

    #[test]
    fn a_saved_tree_holds_no_kernel_address_and_keeps_device_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("pmprobe-redact-{}", std::process::id()));
        let out = std::env::temp_dir().join(format!("pmprobe-redact-out-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_dir_all(&out);
        fs::create_dir_all(dir.join("proc")).unwrap();
        fs::create_dir_all(dir.join("dev/infiniband")).unwrap();
        fs::write(
            dir.join("proc/kallsyms"),
            "ffffffff81000000 T _text\nffffffffc0a01230 T ib_register_peer_memory_client\t[ib_uverbs]\n",
        )
        .unwrap();
        // A device file stands in as a file with a device's mode.
        fs::write(dir.join("dev/infiniband/uverbs0"), "").unwrap();
        fs::set_permissions(
            dir.join("dev/infiniband/uverbs0"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let r = SysRoot::at(&dir).recording();
        assert!(r
            .read("/proc/kallsyms")
            .unwrap()
            .contains("ffffffff81000000"));
        assert!(r.exists("/dev/infiniband/uverbs0"));
        r.save(&out).unwrap();
        let k = fs::read_to_string(out.join("proc/kallsyms")).unwrap();
        assert_eq!(
            k,
            "0000000000000000 T ib_register_peer_memory_client\t[ib_uverbs]\n"
        );
        let mode = fs::metadata(out.join("dev/infiniband/uverbs0"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o600);
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&out).unwrap();
    }
}
