//! Cooperative mode, user side: a server that knows its own writes (inkcached) installs and
//! invalidates kernel cache entries itself, through [`KernelCache`], instead of the kernel
//! learning them from replies at TC egress.
//!
//! Also what such a server needs to find an attachment: [`find_attachment`].

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use crate::pins;

/// The pin directory of the inkcache attachment on `iface` as seen from the calling process's
/// network namespace: `<iface>`, or `<iface>@<netns>` if it was attached with `--netns` naming
/// this namespace. None if inkcache is not attached there.
pub fn find_attachment(iface: &str) -> Option<PathBuf> {
    let root = pins::root();
    let own = std::fs::metadata("/proc/self/ns/net").ok()?;
    for e in std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(m) = std::fs::metadata(e.path()) else {
            continue;
        };
        if m.ino() == own.ino() && m.dev() == own.dev() {
            let d = root.join(format!("{iface}@{}", e.file_name().to_string_lossy()));
            if d.join("meta").exists() {
                return Some(d);
            }
        }
    }
    let d = root.join(iface);
    d.join("meta").exists().then_some(d)
}
