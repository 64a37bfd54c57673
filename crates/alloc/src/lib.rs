//! The global allocator of bavl's binaries (`bavl`, `bavl-bench`): mimalloc, told to keep
//! the memory it frees for reuse instead of returning it to the OS.
//!
//! Why (measured, `docs/design.md` §8.7): a block of Workload B copies and frees thousands
//! of 1-7 KB chunk buffers. glibc's `malloc` spent 30-45% of a block in its free lists;
//! mimalloc runs the same blocks 2.2x faster. While a checkpoint holds an old version, the
//! copies cannot reuse the buffers of that version, and mimalloc by default hands freed
//! memory back to the OS after a delay, so each block then faults in thousands of fresh
//! pages (3-4k per block in `cargo run --release -p bavl-bench --example hold`, against
//! fewer than 100 otherwise). Keeping freed memory removes those faults; the cost is that
//! the process's resident size stays at its high-water mark.
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

/// Tells mimalloc never to return freed memory to the OS, unless `MIMALLOC_PURGE_DELAY` is
/// set in the environment (which then wins). Call it first thing in `main`.
pub fn keep_freed_memory() {
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        set_purge_delay(-1);
    }
}

#[allow(unsafe_code)]
fn set_purge_delay(ms: i64) {
    // SAFETY: `mi_option_set` stores a value in mimalloc's option table (an array of
    // atomically read longs, indexed by an in-range option); it can be called at any time
    // from any thread.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, ms as _) }
}

#[cfg(test)]
#[allow(unsafe_code)]
fn purge_delay() -> i64 {
    // SAFETY: reads one entry of the option table (see `set_purge_delay`).
    unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) as i64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
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
}
