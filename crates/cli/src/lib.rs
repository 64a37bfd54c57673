//! The commands of `bavl` (the binary is `src/main.rs`, its command line), as a library so
//! the test harness (`testkit/harness`, binary `bavl-harness`: the demo, the crash soak,
//! the load test, the vectors and the lying server) reuses the store commands, the proof
//! checker, the serving and syncing code and the text helpers instead of copying them.
//! Not a stable API: what `bavl` and its harness share, nothing more is promised.

#![forbid(unsafe_code)]

pub mod cluster;
pub mod import;
pub mod query;
pub mod serve;
pub mod store_cmds;
pub mod sync;
pub mod text;
pub mod verify;

/// Makes every command exit quietly with [`text::CLOSED_PIPE_EXIT`] when the reader of its
/// stdout or stderr goes away. Rust ignores SIGPIPE, so a write to a closed pipe fails
/// with `EPIPE`, and `print!`/`println!`/`eprintln!` turn that into a panic ("failed
/// printing to stdout: Broken pipe", exit 101); this hook turns exactly that panic, in any
/// command and any thread, into a quiet exit. Sockets are untouched (a peer that hangs
/// up is an ordinary error for `serve` and `sync`), unlike restoring SIGPIPE's default.
pub fn exit_quietly_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        let printing = msg.starts_with("failed printing to stdout")
            || msg.starts_with("failed printing to stderr");
        if printing && (msg.contains("Broken pipe") || msg.contains("os error 32")) {
            std::process::exit(text::CLOSED_PIPE_EXIT);
        }
        default(info)
    }));
}

/// 3 when the error is a damaged store, else 2.
pub fn error_code(e: &anyhow::Error) -> u8 {
    let damaged = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<bavl_store::StoreError>(),
            Some(bavl_store::StoreError::Corrupted { .. })
        )
    });
    if damaged {
        3
    } else {
        2
    }
}
