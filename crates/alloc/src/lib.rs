//! The global allocator of bavl's binaries (`bavl`, `bavl-bench`): mimalloc, told to keep
//! the memory it frees for reuse instead of returning it to the OS.
//!
//! Why (measured, `docs/design.md` §8.7): a block of Workload B copies and frees thousands
//! of 1-7 KB chunk buffers. glibc's `malloc` spent 30-45% of a block in its free lists;
//! mimalloc runs the same blocks 2.2x faster. While a checkpoint holds an old version, the
//! copies cannot reuse the buffers of that version, and mimalloc by default hands freed
//! memory back to the OS after a delay, so each block then faults in thousands of fresh
//! pages (3-4k per block in the lab's `cargo run --release -p bavl-bench --example hold`,
//! against fewer than 100 otherwise). Keeping freed memory removes those faults; the cost
//! is that the process's resident size stays at its high-water mark.
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;
//!
//! fn main() {
//!     bavl_alloc::keep_freed_memory();
//! }
//! ```
#![deny(unsafe_code)]

pub use mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_t` (not exported by the Rust
/// bindings): milliseconds before freed memory is returned to the OS, `-1` for never.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The environment variable mimalloc reads the same option from at start-up.
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// `mi_option_allow_thp` in the same table: may mimalloc ask for transparent huge pages.
const ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Tells mimalloc never to return freed memory to the OS, unless `MIMALLOC_PURGE_DELAY` is
/// set in the environment (which then wins). Call it first thing in `main`.
pub fn keep_freed_memory() {
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        set_purge_delay(-1);
    }
}

/// For a process holding a store with a budget of chunk bodies (paging on): freed memory
/// is returned to the OS after [`PAGED_PURGE_DELAY_MS`] (unless `MIMALLOC_PURGE_DELAY` is
/// set, which wins); transparent huge pages stay allowed. It undoes [`keep_freed_memory`],
/// whose reason (no page faults for copies while a checkpoint holds a version) matters to
/// a store whose state is all in memory; a paged store means its memory to stay near its
/// budget, and every block loads and evicts about as many bodies as it touches, so kept
/// free pages only raise the resident set.
///
/// Measured (2026-11-28, `lab/notes/results-history.md`): a preloaded 10M-key store, budget
/// 256 MiB, 10 blocks of 10k operations (`bavl-peers child --store bavl-paged --preloaded
/// --reopen`), interleaved runs on a shared machine: peak RSS 553-586 MB with freed memory
/// kept, 523-533 MB purging after 1 s, 495-506 MB after 100 ms, 475-491 MB after 0 ms.
/// CPU per block 613-820 ms kept, 671-861 ms after 100 ms, 653-952 ms after 0 ms: the
/// prompter the purge, the more page faults, and the runs' spread is as wide as the
/// differences; 100 ms takes most of the RSS for the least of the cost. Turning huge
/// pages off instead cost 0.31 of the ops/s for 0.10 of the RSS (`archive/paged-10m-nothp.json`),
/// so they stay on.
pub fn paged_memory() {
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        set_purge_delay(PAGED_PURGE_DELAY_MS);
    }
}

/// The purge delay of [`paged_memory`], ms.
pub const PAGED_PURGE_DELAY_MS: i64 = 100;

/// For a process holding a store with a budget of chunk bodies (paging on) that would
/// rather have a smaller resident set than the last bit of speed: transparent huge pages
/// off ([`no_transparent_huge_pages`]), and freed memory returned to the OS after
/// [`BOUNDED_PURGE_DELAY_MS`] (unless `MIMALLOC_PURGE_DELAY` is set, which wins). It undoes
/// [`keep_freed_memory`]. Opt-in: no bavl binary calls it yet (the lab's
/// `bavl-paged-bounded` store sets the same by environment).
///
/// Measured (`docs/design.md`, allocator decisions): on 3M keys under a 128 MiB body budget
/// (`docs/results/archive/paged-alloc.json`, three runs each) peak RSS 390 MB as shipped, 340 MB
/// without huge pages (the same CPU per block), 314 MB also purging after 1 s (+4% CPU
/// per block), 295 MB purging after 10 ms (+9%). At 30M keys, one run with it
/// (`docs/results/archive/paged-30m-bounded.json`, a CI run beside it) gave 1,126 MB against
/// 1,188 MB before and blocks twice as slow beside a CI run; at 10M keys on a quiet machine
/// (`docs/results/archive/paged-10m-bounded-ab.json`) 0.72x the ops/s for 0.89x the peak RSS, and
/// huge pages off alone (`archive/paged-10m-nothp.json`) 0.69x for 0.90x: the cost is the huge
/// pages, not the purge. So it is not the default.
pub fn bounded_memory() {
    no_transparent_huge_pages();
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        set_purge_delay(BOUNDED_PURGE_DELAY_MS);
    }
}

/// The purge delay of [`bounded_memory`], ms (mimalloc's own default).
pub const BOUNDED_PURGE_DELAY_MS: i64 = 1000;

/// Turns transparent huge pages off for the rest of the process: mimalloc stops asking for
/// them (`madvise(MADV_HUGEPAGE)` on its arenas) and the kernel stops backing any of the
/// process's memory with them (`prctl(PR_SET_THP_DISABLE)`, also what
/// `MIMALLOC_ALLOW_THP=0` does at start-up).
///
/// For `bavl sync` (measured, `docs/sync-protocol.md` §8): a sync allocates and frees a
/// response buffer per chunk from many threads, and with huge pages each first touch
/// zeroes 2 MiB; 46% of the client's CPU went to zeroing pages (system time 1.24 s of a
/// 1M-key sync on loopback; 0.35 s without huge pages, resident set 660 -> 480 MB). The
/// store's own loop is the other way round (`bavl-harness loadtest` ~6% faster with them),
/// so this is per command, not global. Errors are ignored: huge pages are only a speed matter.
pub fn no_transparent_huge_pages() {
    set_option(ALLOW_THP, 0);
    disable_thp();
}

#[allow(unsafe_code)]
fn disable_thp() {
    // SAFETY: prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) takes no pointers; it sets a flag on the
    // process's memory map. A failure (an old kernel) leaves the process as it was.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

fn set_purge_delay(ms: i64) {
    set_option(PURGE_DELAY, ms);
}

#[allow(unsafe_code)]
fn set_option(option: libmimalloc_sys::mi_option_t, value: i64) {
    // SAFETY: `mi_option_set` stores a value in mimalloc's option table (an array of
    // atomically read longs, indexed by an in-range option); it can be called at any time
    // from any thread.
    unsafe { libmimalloc_sys::mi_option_set(option, value as _) }
}

#[cfg(test)]
#[allow(unsafe_code)]
fn option(option: libmimalloc_sys::mi_option_t) -> i64 {
    // SAFETY: reads one entry of the option table (see `set_option`).
    unsafe { libmimalloc_sys::mi_option_get(option) as i64 }
}

#[cfg(test)]
fn purge_delay() -> i64 {
    option(PURGE_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test: the options are process-wide, and tests run on parallel threads.
    #[test]
    fn options_are_recognised_and_set_in_turn() {
        the_option_index_is_purge_delay();
        the_option_index_is_allow_thp_and_huge_pages_go_off();
        bounded_memory_purges_after_its_delay();
    }

    fn the_option_index_is_purge_delay() {
        if std::env::var_os(PURGE_DELAY_ENV).is_some() {
            return; // the environment decides the value; nothing to recognise it by
        }
        // mimalloc v3's documented default for purge_delay is 1000 ms: if the bindings'
        // version moves the enum, this index reads another option and this fails.
        assert_eq!(purge_delay(), 1000, "option {PURGE_DELAY} is not purge_delay any more");
        keep_freed_memory();
        assert_eq!(purge_delay(), -1);
    }

    fn bounded_memory_purges_after_its_delay() {
        if std::env::var_os(PURGE_DELAY_ENV).is_some() {
            return;
        }
        keep_freed_memory();
        paged_memory();
        assert_eq!(purge_delay(), PAGED_PURGE_DELAY_MS);
        keep_freed_memory();
        bounded_memory();
        assert_eq!(purge_delay(), BOUNDED_PURGE_DELAY_MS);
        assert_eq!(option(ALLOW_THP), 0);
    }

    fn the_option_index_is_allow_thp_and_huge_pages_go_off() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
            // Documented default 1; the neighbouring minimal_purge_size defaults to 0.
            assert_eq!(option(ALLOW_THP), 1, "option {ALLOW_THP} is not allow_thp any more");
        }
        no_transparent_huge_pages();
        assert_eq!(option(ALLOW_THP), 0);
        // The kernel's flag (PR_GET_THP_DISABLE = 42) is set for the process.
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
            assert!(line.ends_with('0'), "{line}");
        }
    }
}
