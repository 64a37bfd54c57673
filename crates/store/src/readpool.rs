//! The threads a paged store reads chunk bodies on (`docs/design.md` §8.5.1, "Reading
//! a body"): started by the store's first parallel load and kept until the pager is
//! dropped; each load hands them its pages in parts, one job a part.
//!
//! They used to be started for each load and end with it: two loads a block, 32 threads
//! started and ended a block (598 over a 15-block run at 30M keys), each body allocated
//! in the heap of a thread that had ended by the time the writer freed it. Kept, at 30M
//! keys under 2 GiB (alternated runs, `lab/notes/results-history.md`): peak memory over the
//! budget about 1 byte per key lower, durable ops/s 3.5% higher. Why the peak fell was
//! not shown: the allocator still reports most of its pages abandoned at the peak.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A unit of work for a reading thread.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

/// A fixed set of threads taking jobs from one queue.
pub(crate) struct ReadPool {
    queue: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl ReadPool {
    /// Starts up to `n` threads (fewer if the system refuses some; at least one is
    /// needed, else `None`).
    pub(crate) fn start(n: usize) -> Option<ReadPool> {
        let (queue, jobs) = channel::<Job>();
        let jobs = Arc::new(Mutex::new(jobs));
        let threads: Vec<_> = (0..n)
            .filter_map(|i| {
                let jobs = jobs.clone();
                std::thread::Builder::new()
                    .name(format!("bavl-read-{i}"))
                    .spawn(move || work(&jobs))
                    .ok()
            })
            .collect();
        (!threads.is_empty()).then_some(ReadPool { queue: Some(queue), threads })
    }

    /// Number of threads.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Queues `job`; gives it back if no thread is left to run it.
    pub(crate) fn run(&self, job: Job) -> Result<(), Job> {
        match &self.queue {
            Some(q) => q.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }
}

/// A thread's loop: runs jobs until the queue is closed. A job that panics is abandoned
/// (whoever waits for its result sees its sender dropped); the thread goes on.
fn work(jobs: &Mutex<Receiver<Job>>) {
    loop {
        let job = match jobs.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let _ = catch_unwind(AssertUnwindSafe(job));
    }
}

impl Drop for ReadPool {
    fn drop(&mut self) {
        // Closing the queue ends every thread once it finishes its job.
        self.queue = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_every_job_and_survives_a_panic() {
        let pool = ReadPool::start(3).unwrap();
        assert_eq!(pool.len(), 3);
        let (tx, rx) = channel();
        for i in 0..20u32 {
            let tx = tx.clone();
            assert!(pool
                .run(Box::new(move || {
                    if i == 7 {
                        panic!("job 7 fails on purpose");
                    }
                    tx.send(i).unwrap();
                }))
                .is_ok());
        }
        drop(tx);
        let mut got: Vec<u32> = rx.iter().collect();
        got.sort_unstable();
        let want: Vec<u32> = (0..20).filter(|&i| i != 7).collect();
        assert_eq!(got, want, "every job but the panicking one reported, and none hung");
        // The threads are still there after the panic.
        let (tx, rx) = channel();
        for _ in 0..6 {
            let tx = tx.clone();
            assert!(pool
                .run(Box::new(move || tx.send(std::thread::current().id()).unwrap()))
                .is_ok());
        }
        drop(tx);
        assert_eq!(rx.iter().count(), 6);
        drop(pool);
    }
}
