//! What the figures were measured on (the lab kit's [`Machine`] block, with the load other
//! processes put on the machine), and [`Pin`], which holds the measuring thread on one core.

pub use bavl_labkit::Machine;

/// The calling thread pinned to the CPU it is running on; threads it spawns meanwhile
/// inherit the pin. Dropping it restores the previous affinity. Used to measure "one
/// core" figures even where the library would hash on a second thread.
pub struct Pin {
    old: libc::cpu_set_t,
}

impl Pin {
    /// Pins the calling thread; `None` where affinity cannot be changed.
    pub fn current_cpu() -> Option<Pin> {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `cpu_set_t` is plain data for which all-zero is a valid (empty) set;
        // the libc calls get a pointer to a live set and its exact size.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut old) != 0 {
                return None;
            }
            let cpu = usize::try_from(libc::sched_getcpu()).ok()?;
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            (libc::sched_setaffinity(0, size, &set) == 0).then_some(Pin { old })
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        // SAFETY: restores a set obtained from `sched_getaffinity`, with its exact size.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.old);
        }
    }
}
