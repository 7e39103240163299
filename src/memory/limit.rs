//! The process's memory limit: `memory.limit`, or the limit of the cgroup
//! the process runs in (v2 or v1), read once at start-up.
//!
//! A container's limit is not always in the file at the root of
//! `/sys/fs/cgroup`: without a cgroup namespace (a systemd service, an
//! older runtime) the process sits in a nested group, and the limit that
//! binds is the smallest one on the way from that group up to the root.
//! `/proc/self/cgroup` names the group; each level's file is read.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::units::format_bytes;

/// The cgroup v2 hierarchy's mount point.
pub const CGROUP_V2_ROOT: &str = "/sys/fs/cgroup";
/// The cgroup v1 memory controller's mount point.
pub const CGROUP_V1_ROOT: &str = "/sys/fs/cgroup/memory";
/// The limit file of a v2 group.
const V2_FILE: &str = "memory.max";
/// The limit file of a v1 group.
const V1_FILE: &str = "memory.limit_in_bytes";

/// Limits at or above this are "no limit": cgroup v1 writes 2^63 rounded
/// down to a page for an unlimited group, and no machine has an exbibyte.
const UNLIMITED_FROM: u64 = 1 << 60;

/// Where a memory limit came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitSource {
    /// The `memory.limit` setting.
    Setting,
    /// A cgroup's limit file.
    Cgroup(PathBuf),
}

/// The memory the process may take, and where that figure came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    pub bytes: u64,
    pub source: LimitSource,
}

impl fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}B ({}, ", self.bytes, format_bytes(self.bytes))?;
        match &self.source {
            LimitSource::Setting => f.write_str("memory.limit)"),
            LimitSource::Cgroup(path) => write!(f, "the container's, from {})", path.display()),
        }
    }
}

/// A cgroup memory limit file's text: bytes, or `None` for `max` (v2), a
/// value too large to be a limit (v1's unlimited) or text that is not one.
pub fn parse_limit(text: &str) -> Option<u64> {
    let t = text.trim();
    if t == "max" {
        return None;
    }
    t.parse::<u64>().ok().filter(|&b| b > 0 && b < UNLIMITED_FROM)
}

/// The group of the process in each hierarchy, from `/proc/self/cgroup`'s
/// text: (v2's path, v1 memory controller's path).
fn groups(proc_cgroup: &str) -> (Option<&str>, Option<&str>) {
    let (mut v2, mut v1) = (None, None);
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if controllers.is_empty() {
            v2 = Some(path);
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path);
        }
    }
    (v2, v1)
}

/// The smallest limit from `group` up to the hierarchy's `root`: each
/// level's `file`, where it exists (a level saying `max` sets no limit of
/// its own, but its parent may).
fn smallest_on_the_way_up(root: &Path, group: &str, file: &str) -> Option<MemoryLimit> {
    let mut dir = root.join(group.trim_start_matches('/'));
    let mut smallest: Option<MemoryLimit> = None;
    loop {
        let path = dir.join(file);
        if let Some(bytes) = std::fs::read_to_string(&path).ok().as_deref().and_then(parse_limit)
            && smallest.as_ref().is_none_or(|s| bytes < s.bytes)
        {
            smallest = Some(MemoryLimit { bytes, source: LimitSource::Cgroup(path) });
        }
        if dir == root || !dir.pop() || !dir.starts_with(root) {
            return smallest;
        }
    }
}

/// The limit that binds a process in the groups `proc_cgroup` names, the
/// hierarchies mounted at `v2_root` and `v1_root`: v2's when the process
/// is in a v2 group with a limit, else v1's memory controller's.
pub fn cgroup_limit(proc_cgroup: &str, v2_root: &Path, v1_root: &Path) -> Option<MemoryLimit> {
    let (v2, v1) = groups(proc_cgroup);
    v2.and_then(|g| smallest_on_the_way_up(v2_root, g, V2_FILE))
        .or_else(|| v1.and_then(|g| smallest_on_the_way_up(v1_root, g, V1_FILE)))
}

/// This process's container limit, if it has one.
pub fn container_limit() -> Option<MemoryLimit> {
    let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    cgroup_limit(&proc_cgroup, Path::new(CGROUP_V2_ROOT), Path::new(CGROUP_V1_ROOT))
}

/// `memory.limit` if set, else the container's limit.
pub fn process_limit(setting: Option<u64>) -> Option<MemoryLimit> {
    match setting {
        Some(bytes) => Some(MemoryLimit { bytes, source: LimitSource::Setting }),
        None => container_limit(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_limits_parse() {
        assert_eq!(parse_limit("1073741824\n"), Some(1 << 30));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None, "v1's unlimited");
        assert_eq!(parse_limit("0"), None);
        assert_eq!(parse_limit("lots"), None);
    }

    #[test]
    fn proc_self_cgroup_names_the_groups() {
        assert_eq!(groups("0::/system.slice/dedupd.service\n"), (Some("/system.slice/dedupd.service"), None));
        let v1 = "12:cpu,cpuacct:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n1:name=systemd:/x\n";
        assert_eq!(groups(v1), (None, Some("/kubepods/pod1/c1")));
        assert_eq!(groups("garbage\n"), (None, None));
    }

    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Tree {
            let dir = std::env::temp_dir().join(format!("dedupd-cgroup-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Tree(dir)
        }

        fn write(&self, path: &str, text: &str) {
            let path = self.0.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            std::fs::remove_dir_all(&self.0).ok();
        }
    }

    /// A nested v2 group: the smallest limit on the way up binds, whether
    /// it is the group's own or a parent's; `max` levels set none.
    #[test]
    fn a_nested_v2_group_is_bound_by_the_smallest_limit_above_it() {
        let t = Tree::new("v2");
        let (v2, v1) = (t.0.join("v2"), t.0.join("v1"));
        t.write("v2/memory.max", "max\n");
        t.write("v2/kubepods/memory.max", "1073741824\n");
        t.write("v2/kubepods/pod/memory.max", "max\n");
        t.write("v2/kubepods/pod/c/memory.max", "max\n");
        let limit = cgroup_limit("0::/kubepods/pod/c\n", &v2, &v1).unwrap();
        assert_eq!(limit.bytes, 1 << 30);
        assert_eq!(limit.source, LimitSource::Cgroup(v2.join("kubepods/memory.max")));
        t.write("v2/kubepods/pod/c/memory.max", "268435456\n");
        assert_eq!(cgroup_limit("0::/kubepods/pod/c\n", &v2, &v1).unwrap().bytes, 256 << 20, "its own, smaller");
        // In a cgroup namespace the group is "/": the root file.
        t.write("v2/memory.max", "536870912\n");
        assert_eq!(cgroup_limit("0::/\n", &v2, &v1).unwrap().bytes, 512 << 20);
        assert_eq!(cgroup_limit("0::/elsewhere\n", &t.0.join("none"), &v1), None, "no hierarchy mounted");
    }

    /// cgroup v1: the memory controller's group, nested the same way.
    #[test]
    fn a_nested_v1_group_is_read_from_the_memory_controller() {
        let t = Tree::new("v1");
        let (v2, v1) = (t.0.join("v2"), t.0.join("v1"));
        t.write("v1/memory.limit_in_bytes", "9223372036854771712\n");
        t.write("v1/docker/abc/memory.limit_in_bytes", "536870912\n");
        let proc = "5:memory:/docker/abc\n3:cpu:/docker/abc\n";
        let limit = cgroup_limit(proc, &v2, &v1).unwrap();
        assert_eq!(
            (limit.bytes, limit.source),
            (512 << 20, LimitSource::Cgroup(v1.join("docker/abc/memory.limit_in_bytes")))
        );
        assert_eq!(cgroup_limit("5:memory:/docker/other\n", &v2, &v1), None, "unlimited at every level");
    }
}
