//! One timed measurement at a time on this machine: the lock that scripts/lib.sh's `bench_lock`
//! also takes. Measurements read machine-wide counters (bpf_stats, /proc/stat) and time work on
//! one pinned CPU, so two at once would make each other's numbers wrong, and the first to finish
//! would turn bpf_stats off under the other.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The lock file: `BENCH_LOCK` if set (as for the scripts), else inkcache-bench.lock in /run/lock
/// (in /tmp where there is no /run/lock).
pub fn path() -> PathBuf {
    if let Some(p) = std::env::var_os("BENCH_LOCK") {
        return p.into();
    }
    let dir = Path::new("/run/lock");
    let dir = if dir.is_dir() { dir } else { Path::new("/tmp") };
    dir.join("inkcache-bench.lock")
}

/// The lock, held while this lives (released when dropped or when the process exits).
pub struct BenchLock {
    _held: Flock<File>,
}

/// Takes the lock at [`path`], waiting (and saying so once) while another measurement holds it.
pub fn bench_lock() -> Result<BenchLock> {
    bench_lock_at(&path())
}

/// [`bench_lock`] on the lock file `p`.
pub fn bench_lock_at(p: &Path) -> Result<BenchLock> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(p)
        .with_context(|| format!("opening the benchmark lock {}", p.display()))?;
    let held = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(held) => held,
        Err((f, Errno::EWOULDBLOCK)) => {
            eprintln!(
                "inklab: another timed measurement holds {}; waiting for it",
                p.display()
            );
            Flock::lock(f, FlockArg::LockExclusive)
                .map_err(|(_, e)| e)
                .with_context(|| format!("waiting for the benchmark lock {}", p.display()))?
        }
        Err((_, e)) => {
            return Err(e).with_context(|| format!("taking the benchmark lock {}", p.display()))
        }
    };
    Ok(BenchLock { _held: held })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_second_taker_waits_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bench.lock");
        let first = bench_lock_at(&p).unwrap();
        // held: a non-blocking try on another open of the file fails
        let f = File::open(&p).unwrap();
        let busy = Flock::lock(f, FlockArg::LockExclusiveNonblock);
        assert!(
            matches!(busy, Err((_, Errno::EWOULDBLOCK))),
            "the lock was not held"
        );
        let released = Arc::new(AtomicBool::new(false));
        let (r, q) = (released.clone(), p.clone());
        let second = std::thread::spawn(move || {
            let held = bench_lock_at(&q).unwrap();
            assert!(
                r.load(Ordering::SeqCst),
                "taken while the first still held it"
            );
            drop(held);
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        released.store(true, Ordering::SeqCst);
        drop(first);
        second.join().unwrap();
        // and free again once both are gone
        drop(bench_lock_at(&p).unwrap());
    }
}
