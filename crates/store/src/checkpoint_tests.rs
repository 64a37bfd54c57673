//! Tests of checkpoint files: the framed export, written in order and synced once,
//! paced and abandoned.
use std::sync::{Arc, Mutex};

use super::*;
use crate::backend::MemBackend;
use crate::pace::{Activity, CheckpointPace};

fn tree(keys: u32) -> Tree {
    let mut t = Tree::with_capacity(16).unwrap();
    for i in 0..keys {
        t.insert(&i.to_be_bytes(), &[i as u8; 40]).unwrap();
    }
    t
}

/// The file a checkpoint of `snap` must be, framed here independently of `write`.
fn expected_file(version: u64, snap: &Snapshot) -> Vec<u8> {
    let (count, root) = (snap.chunk_count(), snap.root_hash());
    let mut f = encode_header(version, &root, snap.capacity(), snap.len(), count);
    for i in 0..count {
        let chunk = snap.export_chunk(i).unwrap();
        f.extend_from_slice(&record_prefix(&chunk));
        f.extend_from_slice(&chunk);
    }
    f.extend_from_slice(&encode_trailer(count));
    f
}

#[test]
fn the_file_is_the_framed_chunks_and_reads_back_as_the_tree() {
    let mut t = tree(60_000);
    let never = AtomicBool::new(false);
    let want = expected_file(7, &t.snapshot());
    assert!(want.len() as u64 > 2 * SLICE_BYTES, "several slices: {}", want.len());
    let b = MemBackend::new();
    let rep = write(&b, 7, t.snapshot(), &never, None).unwrap().unwrap();
    assert_eq!(rep.bytes, want.len() as u64);
    assert!(rep.encoding <= rep.elapsed);
    let name = checkpoint_name(7);
    assert!(b.get(&name).unwrap() == want, "the file is the framed export");
    let (h, mut back) = read(&b, &name).unwrap();
    assert_eq!((h.version, h.keys, back.root_hash()), (7, 60_000, t.root_hash()));
}

/// What a file saw: bytes written, the ranges handed to the disk, syncs.
#[derive(Debug, PartialEq)]
enum Event {
    Wrote(u64),
    Handed(u64, u64),
    Synced,
}

/// A file that records its events, and sets the flag (if any) when a slice is handed.
struct Watched(Box<dyn WriteFile>, Arc<Mutex<Vec<Event>>>, Option<Arc<AtomicBool>>);

impl std::io::Write for Watched {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.1.lock().unwrap().push(Event::Wrote(buf.len() as u64));
        self.0.write_all(buf).map(|()| buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl WriteFile for Watched {
    fn sync(&mut self) -> io::Result<()> {
        self.1.lock().unwrap().push(Event::Synced);
        self.0.sync()
    }
    fn start_writeback(&mut self, offset: u64, len: u64) {
        self.1.lock().unwrap().push(Event::Handed(offset, len));
        if let Some(stop) = &self.2 {
            stop.store(true, Ordering::Relaxed);
        }
    }
}

/// A [`MemBackend`] whose created files record their events (and set the flag).
struct Watching(MemBackend, Arc<Mutex<Vec<Event>>>, Option<Arc<AtomicBool>>);

impl Backend for Watching {
    fn list(&self) -> io::Result<Vec<String>> {
        self.0.list()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        self.0.open_read(name)
    }
    fn file_len(&self, name: &str) -> io::Result<u64> {
        self.0.file_len(name)
    }
    fn create(&self, name: &str) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(Watched(self.0.create(name)?, self.1.clone(), self.2.clone())))
    }
    fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>> {
        self.0.open_append(name, len)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.0.remove(name)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.0.sync_dir()
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}

/// Writes a paced checkpoint of `t` with the given lead, its pacer let through by an
/// idle store; returns the file's events.
fn paced(t: &mut Tree, lead: u64) -> (Vec<Event>, Vec<u8>) {
    let b = Watching(MemBackend::new(), Arc::default(), None);
    // An idle store (each slice goes after the idle time) retaining nothing older.
    let activity = Activity::new();
    activity.set_oldest(3);
    let pacer = Pacer::new(activity, CheckpointPace::default(), 1 << 30);
    let never = AtomicBool::new(false);
    write_with_lead(&b, 3, t.snapshot(), &never, Some(&pacer), lead, None).unwrap().unwrap();
    let file = b.0.get(&checkpoint_name(3)).unwrap();
    let events = std::mem::take(&mut *b.1.lock().unwrap());
    (events, file)
}

#[test]
fn a_paced_checkpoint_hands_every_byte_to_the_disk_in_order_then_syncs_once() {
    let mut t = tree(60_000);
    let want = expected_file(3, &t.snapshot());
    for lead in [MAX_LEAD, SLICE_BYTES] {
        let (events, file) = paced(&mut t, lead);
        assert!(file == want, "lead {lead}: the file is the framed export");
        let (mut written, mut handed) = (0, 0);
        for e in &events[..events.len() - 1] {
            match *e {
                Event::Wrote(n) => written += n,
                Event::Handed(offset, len) => {
                    assert_eq!(offset, handed, "lead {lead}: handed in order");
                    assert!(len <= SLICE_BYTES && offset + len <= written);
                    handed += len;
                    assert!(written - handed <= lead + 2 * SLICE_BYTES, "lead {lead}");
                }
                Event::Synced => panic!("lead {lead}: synced before the end: {events:?}"),
            }
        }
        assert_eq!((written, handed), (want.len() as u64, want.len() as u64), "lead {lead}");
        assert_eq!(events.last(), Some(&Event::Synced));
        let writes_before_first_hand =
            events.iter().take_while(|e| matches!(e, Event::Wrote(_))).count();
        if lead == MAX_LEAD {
            // The whole encoding first, the snapshot let go, then the writeback.
            assert_eq!(
                writes_before_first_hand,
                events.len() - 1 - want.len().div_ceil(SLICE_BYTES as usize)
            );
        } else {
            // Larger than the lead: the writeback starts while it still encodes.
            assert!(writes_before_first_hand < 4, "{events:?}");
        }
    }
}

#[test]
fn an_unpaced_checkpoint_is_installed_only_once_no_older_version_is_retained() {
    let mut t = tree(2_000);
    let activity = Activity::new();
    let pacer = Pacer::new(activity.clone(), CheckpointPace::Unpaced, 1 << 30);
    let b = MemBackend::new();
    let never = AtomicBool::new(false);
    let writer = {
        let activity = activity.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            activity.set_oldest(3);
        })
    };
    write(&b, 3, t.snapshot(), &never, Some(&pacer)).unwrap().unwrap();
    // Installed after the oldest retained version reached 3, not before.
    assert_eq!(activity.oldest(), 3);
    assert!(b.get(&checkpoint_name(3)).is_some());
    writer.join().unwrap();
}

#[test]
fn a_stopped_checkpoint_leaves_nothing() {
    let mut t = tree(2_000);
    let stop = AtomicBool::new(true);
    let b = MemBackend::new();
    assert!(write(&b, 3, t.snapshot(), &stop, None).unwrap().is_none());
    assert!(b.list().unwrap().is_empty(), "{:?}", b.list());

    // Stopped during the paced writeback, when the first slice is handed to the disk.
    let mut t = tree(60_000);
    let stop = Arc::new(AtomicBool::new(false));
    let b = Watching(MemBackend::new(), Arc::default(), Some(stop.clone()));
    let pacer = Pacer::new(Activity::new(), CheckpointPace::default(), 1 << 30);
    assert!(write(&b, 3, t.snapshot(), &stop, Some(&pacer)).unwrap().is_none());
    assert!(b.list().unwrap().is_empty(), "{:?}", b.list());
    let events = b.1.lock().unwrap();
    assert_eq!(events.iter().filter(|e| matches!(e, Event::Handed(..))).count(), 1);
    assert!(!events.contains(&Event::Synced));
}
