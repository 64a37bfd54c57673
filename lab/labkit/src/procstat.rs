//! What `/proc` says of a live child process: its peak resident set and its CPU time,
//! for the lab's runners that poll the processes they measure.

/// The peak resident set (`VmHWM`) of a live process, in bytes.
pub fn vm_hwm(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// User plus system CPU time of a live process, in seconds. Linux reports it to user
/// space in ticks of 100 a second (`USER_HZ`) on every architecture the lab runs on.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses): state is the
    // 3rd field, utime the 14th, stime the 15th.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_peak_and_cpu_time() {
        let pid = std::process::id();
        let v: Vec<u8> = (0..8 << 20).map(|i| i as u8).collect();
        assert!(vm_hwm(pid).unwrap() >= v.len() as u64);
        assert!(cpu_seconds(pid).unwrap() >= 0.0);
        assert_eq!(vm_hwm(u32::MAX), None);
    }
}
