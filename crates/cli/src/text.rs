//! Small formatting helpers shared by the store commands, and the exit policy for a
//! closed output.

use std::io::Write;
use std::time::Duration;

/// The exit status of a command whose output's reader went away (`bavl stats | head -1`):
/// 128 + SIGPIPE (13), what a shell reports for a tool a closed pipe stopped.
pub const CLOSED_PIPE_EXIT: i32 = 141;

/// Writes `line` and a newline to stdout and flushes it (for output a reader waits for,
/// line by line). If the reader went away (`EPIPE`), the process exits quietly with
/// [`CLOSED_PIPE_EXIT`], as every `println!` does (see `main`); other errors are returned.
pub fn stdout_line(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(CLOSED_PIPE_EXIT)
        }
        r => r,
    }
}

/// `1234567` as `1,234,567`.
pub fn group(n: u64) -> String {
    let digits = n.to_string().into_bytes();
    let groups: Vec<&str> =
        digits.rchunks(3).rev().map(|g| std::str::from_utf8(g).unwrap_or("?")).collect();
    groups.join(",")
}

/// Bytes in B, KiB, MiB or GiB.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Milliseconds with three decimals (for JSON).
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// A duration for people: `850 µs`, `12.3 ms`, `4.56 s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// A rate for people: `412k/s`, `1.23M/s`.
pub fn rate(count: f64, d: Duration) -> String {
    let r = if d.is_zero() { 0.0 } else { count / d.as_secs_f64() };
    if r >= 1e6 {
        format!("{:.2}M/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k/s", r / 1e3)
    } else {
        format!("{r:.1}/s")
    }
}

/// A word for a shell command line, quoted if it needs to be.
pub fn shell_word(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(group(0), "0");
        assert_eq!(group(1234567), "1,234,567");
        assert_eq!(group(100), "100");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(shell_word("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_word("/tmp/p.bin"), "/tmp/p.bin");
    }
}
