//! Small helpers of the store benchmark: Workload B blocks on a store, the initial load,
//! store directories, and the kernel's and the scheduler's counters.

use std::fs;
use std::ops::Bound;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bavl_store::Store;
use bavl_workload::{Mix, Op};

/// Operations per block (Workload B).
pub const OPS: u32 = 10_000;
/// Keys per commit while loading the initial state.
pub const LOAD_COMMIT: usize = 100_000;
/// Raw bytes of one entry: a 20-byte key and a 100-byte value.
pub const RAW_BYTES_PER_KEY: u64 = (bavl_workload::KEY_LEN + bavl_workload::VALUE_LEN) as u64;

/// Workload B's block for the store's next version, drawn against its working state.
pub fn next_block(store: &Store, seed: u64) -> Vec<Op> {
    let tree = store.working();
    bavl_workload::block(seed, store.version() + 1, Mix::workload_b(OPS), |p| {
        bavl_workload::next_key(|lo| tree.range(lo, Bound::Unbounded), p).expect("resident")
    })
}

/// Applies a block's operations (not committed).
pub fn apply(store: &mut Store, ops: &[Op]) -> Result<()> {
    for op in ops {
        match op {
            Op::Put(k, v) => {
                store.insert(k, v)?;
            }
            Op::Delete(k) => {
                store.remove(k)?;
            }
        }
    }
    Ok(())
}

/// Loads the first `keys` entries of the initial state of `seed`, committing every
/// [`LOAD_COMMIT`] keys; returns the seconds it took.
pub fn load(store: &mut Store, seed: u64, keys: usize) -> Result<f64> {
    let t = Instant::now();
    for (i, (k, v)) in bavl_workload::initial(seed).take(keys).enumerate() {
        store.insert(&k, &v)?;
        if (i + 1) % LOAD_COMMIT == 0 || i + 1 == keys {
            store.commit()?;
        }
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Copies a closed store's files (all but its lock) into a new directory and syncs them,
/// so that no write-back of the copy is left to disturb what runs next.
pub fn copy_store(from: &Path, to: &Path) -> Result<()> {
    if to.exists() {
        fs::remove_dir_all(to).with_context(|| format!("removing {}", to.display()))?;
    }
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in fs::read_dir(from).with_context(|| format!("listing {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if name == bavl_store::backend::LOCK_FILE {
            continue;
        }
        let dst = to.join(&name);
        fs::copy(entry.path(), &dst).with_context(|| format!("copying to {}", dst.display()))?;
        fs::File::open(&dst)?.sync_all()?;
    }
    fs::File::open(to)?.sync_all()?;
    Ok(())
}

/// Removes a directory if it exists.
pub fn remove_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

/// Bytes this process caused to be written to storage (`/proc/self/io` `write_bytes`),
/// all threads included.
pub fn kernel_write_bytes() -> u64 {
    let s = fs::read_to_string("/proc/self/io").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn rusage_secs(who: libc::c_int) -> f64 {
    // SAFETY: `rusage` is plain data for which all-zero is valid; getrusage fills it.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut ru) != 0 {
            return f64::NAN;
        }
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU seconds used by this process so far, all threads (live and ended) included.
pub fn process_cpu_secs() -> f64 {
    rusage_secs(libc::RUSAGE_SELF)
}

/// CPU seconds used by the calling thread so far.
pub fn thread_cpu_secs() -> f64 {
    rusage_secs(libc::RUSAGE_THREAD)
}

/// The file system type under `dir` (`ext4`, `tmpfs`, ...); refuses a RAM-backed one,
/// where `fsync` costs nothing and the figures would mean nothing.
pub fn check_real_disk(dir: &Path) -> Result<String> {
    use std::os::unix::ffi::OsStrExt;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: `statfs` is plain data; the call gets a NUL-terminated path and a live struct.
    let st = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            bail!("statfs {}: {}", dir.display(), std::io::Error::last_os_error());
        }
        st
    };
    #[allow(clippy::unnecessary_cast)] // f_type's integer type differs between targets
    let name = match st.f_type as u64 {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x8584_58F6 => "ramfs",
        0x794C_7630 => "overlayfs",
        0x2FC1_2FC1 => "zfs",
        0x6969 => "nfs",
        other => return Ok(format!("0x{other:x}")),
    };
    if matches!(name, "tmpfs" | "ramfs") {
        bail!(
            "{} is on {name}: fsync would cost nothing; pass --dir on a real disk",
            dir.display()
        );
    }
    Ok(name.to_string())
}

/// Rounds to `digits` decimals (for readable JSON).
pub fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}
