//! Bulk import (`docs/design.md` §8.9): a new paged store built from a stream of key-value
//! pairs in O(n) time with bounded memory, its chunk files written directly.
//!
//! - [`Import`] takes pairs in strictly increasing key order ([`Import::push`]) and makes
//!   **exactly the tree that inserting them into an empty tree in that order makes** (§6):
//!   the same chunks, shape and root, hence the same future. It keeps the last two chunks
//!   (the only ones a further ascending insert can change), the right spine of the AVL
//!   tree (heights only) and the skeleton entries of the chunks written; each chunk is
//!   written once, to the store's chunk file, when no later insert can change it.
//! - [`import`] reads a stream in the formats of [`Format`], sorted or not: unsorted input
//!   is sorted first by an external merge sort in `ImportOptions::sort_bytes` of memory
//!   (sorted runs spilled to temporary files, merged 64 at a time).
//!
//! Guarantees: bad input (order, a duplicate key, a key or value outside the limits of §1,
//! a truncated or malformed stream) is an [`ImportError::Input`] naming the record
//! (numbered from one) and its byte offset; then, as after any other failure of [`import`], the files the
//! import made are deleted. While an import runs (or after it was killed) the directory
//! holds the journal of §8.8 in mode 2, so it never opens as a store; an interrupted import
//! cannot be resumed (delete the directory).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bavl_core::{Body, Digest, SkeletonEntry, Tree, MAX_KEY_LEN, MAX_VALUE_LEN};

use crate::backend::{Backend, DirBackend};
use crate::error::{IoContext, StoreError};
use crate::ingest::{IngestOptions, Writer, MODE_IMPORT};

/// How [`import`] reads and what it builds.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The chunk capacity of the new store (4..=65,536).
    pub capacity: u32,
    /// The version the store opens at (its only one).
    pub version: u64,
    /// The input is promised to be in strictly increasing key order: no sort, and a
    /// record out of order is an error.
    pub sorted: bool,
    /// The input's format.
    pub format: Format,
    /// Memory for the sort's runs (unsorted input): 256 MiB.
    pub sort_bytes: usize,
    /// Where the sort's runs go: by default beside the store's directory (its parent).
    pub tmp_dir: Option<PathBuf>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            capacity: bavl_core::DEFAULT_CAPACITY,
            version: 1,
            sorted: false,
            format: Format::Bin,
            sort_bytes: 256 << 20,
            tmp_dir: None,
        }
    }
}

/// The input formats (`docs/design.md` §8.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Records `u32 klen | key | u32 vlen | value`, little-endian, back to back; the
    /// stream ends after a whole record.
    Bin,
    /// Lines `hex(key) TAB hex(value) LF` (either case; the value may be empty; a last
    /// line may lack its LF).
    Hex,
}

/// What is wrong with a record of the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputProblem {
    /// Its key is not above the previous record's (sorted input only).
    Unsorted,
    /// Its key is the key of record `first`.
    Duplicate { first: u64 },
    /// A key of this length (keys are 1..=1024 bytes).
    KeyLength(u64),
    /// A value of this length (values are at most 16 MiB).
    ValueLength(u64),
    /// The stream ends inside it.
    Truncated,
    /// A line that is not `hex TAB hex` (what is wrong).
    Malformed(&'static str),
}

impl fmt::Display for InputProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputProblem::Unsorted => write!(f, "its key is not above the previous record's"),
            InputProblem::Duplicate { first } => write!(f, "its key is the key of record {first}"),
            InputProblem::KeyLength(n) => write!(f, "a key of {n} bytes (keys are 1..=1024)"),
            InputProblem::ValueLength(n) => {
                write!(f, "a value of {n} bytes (values are at most 16 MiB)")
            }
            InputProblem::Truncated => write!(f, "the input ends inside it"),
            InputProblem::Malformed(what) => write!(f, "not `hex TAB hex`: {what}"),
        }
    }
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A bad record: its number (from 1) and the offset of its first byte in the input.
    #[error("record {record} (at byte {offset} of the input): {problem}")]
    Input { record: u64, offset: u64, problem: InputProblem },
    /// Reading the input, or the sort's temporary files, failed.
    #[error("I/O error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// Writing the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ImportError {
    let context = context.into();
    move |source| ImportError::Io { context, source }
}

/// What an import made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub version: u64,
    pub root: Digest,
    pub keys: u64,
    pub chunks: u64,
}

/// How far an import is, for a progress display.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportProgress {
    /// Records read from the input, and its bytes.
    pub records: u64,
    pub bytes: u64,
    /// Sorted runs spilled so far (unsorted input).
    pub runs: u64,
    /// Keys and chunks written to the store.
    pub keys: u64,
    pub chunks: u64,
}

/// A chunk still in the making: its entries.
type Pending = Vec<(Box<[u8]>, Box<[u8]>)>;

/// Builds a store from pairs in strictly increasing key order. See the module
/// documentation; [`Import::abort`] (or a failed [`Import::finish`]) deletes its files.
pub struct Import {
    w: Writer,
    version: u64,
    capacity: usize,
    /// The last chunks (at most two), still changeable by an ascending insert.
    window: Vec<Pending>,
    /// Chunks made (written and in the window).
    chunks: u64,
    keys: u64,
    /// Skeleton entries of the chunks written, key-heights patched at the end.
    entries: Vec<SkeletonEntry>,
    /// The key-height of every chunk, as its node leaves the spine (or at the end).
    heights: Vec<u8>,
    /// The AVL tree's right spine, top first: (height, left child's height, chunk whose
    /// first key is the separator).
    spine: Vec<(u8, u8, u64)>,
    body: Vec<u8>,
}

impl Import {
    /// Starts an import into `dir` (created if missing; it must be empty).
    pub fn create(dir: &Path, capacity: u32, version: u64) -> Result<Import, StoreError> {
        let b = DirBackend::open(dir).ctx(|| format!("opening the store at {}", dir.display()))?;
        Import::create_backend(Arc::new(b), capacity, version)
    }

    /// [`Import::create`] on any backend.
    pub fn create_backend(
        backend: Arc<dyn Backend>,
        capacity: u32,
        version: u64,
    ) -> Result<Import, StoreError> {
        Tree::with_capacity(capacity)?;
        let names = backend.list().ctx(|| format!("listing {}", backend.describe()))?;
        crate::ingest::check_empty(&*backend, &names)?;
        let w = Writer::create(backend, MODE_IMPORT, version, &[0; 32], &IngestOptions::default())?;
        Ok(Import {
            w,
            version,
            capacity: capacity as usize,
            window: Vec::new(),
            chunks: 0,
            keys: 0,
            entries: Vec::new(),
            heights: Vec::new(),
            spine: Vec::new(),
            body: Vec::new(),
        })
    }

    /// Keys pushed so far.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Chunks made so far.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// The last key pushed.
    pub fn last_key(&self) -> Option<&[u8]> {
        self.window.last().and_then(|c| c.last()).map(|(k, _)| &k[..])
    }

    /// Inserts `(key, value)`, whose key must be above every key pushed before: as
    /// `Tree::insert` does into the tree made so far (§6). A key out of order or outside
    /// the limits is refused (`StoreError::Input`) and changes nothing.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        bavl_core::Key::new(key)?;
        if value.len() > MAX_VALUE_LEN {
            return Err(bavl_core::InputError::ValueTooLong {
                len: value.len(),
                max: MAX_VALUE_LEN,
            }
            .into());
        }
        if self.last_key().is_some_and(|last| last >= key) {
            return Err(StoreError::InvalidOption(
                "an import's keys must strictly increase".into(),
            ));
        }
        self.w.usable()?;
        let c = self.capacity;
        if self.window.last().is_some_and(|last| last.len() == c) {
            let n = self.window.len();
            if n == 2 && self.window[0].len() + 2 <= c {
                // The full last chunk and its left neighbour are evened out.
                even_out(&mut self.window);
            } else {
                // Split: its last c - c/2 entries become a new chunk, and the run of
                // the neighbour (if any), it and the new chunk is evened out.
                let new = self.window[n - 1].split_off(c / 2);
                self.window.push(new);
                even_out(&mut self.window);
                self.add_chunk_node();
                if self.window.len() == 3 {
                    let done = self.window.remove(0);
                    self.write_chunk(done)?;
                }
            }
        }
        let entry = (key.into(), value.into());
        match self.window.last_mut() {
            Some(last) => last.push(entry),
            None => {
                self.window.push(vec![entry]);
                self.chunks = 1;
                self.heights.push(0);
            }
        }
        self.keys += 1;
        Ok(())
    }

    /// The AVL insertion of a chunk after the last one (§6): a new inner node (height 1)
    /// in the place of the last chunk, then every node on the right spine, bottom up,
    /// recomputed and rebalanced. Appending on the right only ever needs a single left
    /// rotation; the node rotated down leaves the spine with its final height.
    fn add_chunk_node(&mut self) {
        let k = self.chunks;
        self.chunks += 1;
        self.heights.push(0);
        self.spine.push((1, 0, k));
        let mut i = self.spine.len() - 1;
        while i > 0 {
            i -= 1;
            let right = self.spine[i + 1].0;
            let (_, left, _) = self.spine[i];
            if right > left + 1 {
                // Rotate left: the child r rises, this node x becomes its left child with
                // r's left subtree as its right one.
                let (_, r_left, _) = self.spine[i + 1];
                let r_right = self.spine.get(i + 2).map_or(0, |n| n.0);
                debug_assert!(r_right >= r_left, "an append never needs a double rotation");
                let x_height = 1 + left.max(r_left);
                self.heights[self.spine[i].2 as usize] = x_height;
                let r = &mut self.spine[i + 1];
                r.1 = x_height;
                r.0 = 1 + x_height.max(r_right);
                self.spine.remove(i);
            } else {
                self.spine[i].0 = 1 + left.max(right);
            }
        }
    }

    fn write_chunk(&mut self, chunk: Pending) -> Result<(), StoreError> {
        self.body.clear();
        bavl_core::codec::put_varint(&mut self.body, chunk.len() as u64);
        for (k, v) in &chunk {
            bavl_core::codec::put_bytes(&mut self.body, k);
            bavl_core::codec::put_bytes(&mut self.body, v);
        }
        let mut body = Body::decode(&self.body)
            .map_err(|e| StoreError::InvalidOption(format!("an imported chunk: {e}")))?;
        let hash = body.chunk_hash::<bavl_core::Sha256>();
        let len = chunk.len() as u32;
        let loc = self.w.append(&self.body, len)?;
        let first_key = chunk[0].0.clone();
        self.entries.push(SkeletonEntry { key_height: 0, hash, len, loc, first_key });
        Ok(())
    }

    /// Writes the last chunks, links the skeleton and installs the store (as
    /// [`crate::Ingest::finish`] does). Returns what was made.
    pub fn finish(mut self) -> Result<Imported, StoreError> {
        for chunk in std::mem::take(&mut self.window) {
            self.write_chunk(chunk)?;
        }
        for &(h, _, k) in &self.spine {
            self.heights[k as usize] = h;
        }
        for (e, &h) in self.entries.iter_mut().zip(&self.heights) {
            e.key_height = h;
        }
        let capacity = self.capacity as u32;
        let entries = std::mem::take(&mut self.entries);
        let mut tree = Tree::link_skeleton(capacity, entries).map_err(|e| {
            StoreError::InvalidOption(format!("the imported chunks do not link: {e}"))
        })?;
        let root = tree.root_hash();
        debug_assert_eq!(tree.chunk_count(), self.chunks);
        self.w.flush()?;
        self.w.install(self.version, tree)?;
        Ok(Imported { version: self.version, root, keys: self.keys, chunks: self.chunks })
    }

    /// Deletes the files this import made (also the journal): the directory is left as
    /// it was found (empty).
    pub fn abort(self) -> Result<(), StoreError> {
        self.w.remove_all()
    }
}

/// Evens out the chunks of `run` (§6): chunk `j` of `g` gets `t / g` entries, one more
/// for `j < t % g`, key order kept.
fn even_out(run: &mut [Pending]) {
    let t: usize = run.iter().map(Vec::len).sum();
    let g = run.len();
    let all: Vec<_> = run.iter_mut().flat_map(std::mem::take).collect();
    let mut it = all.into_iter();
    for (j, chunk) in run.iter_mut().enumerate() {
        let n = t / g + usize::from(j < t % g);
        chunk.extend(it.by_ref().take(n));
    }
}

/// One record of the input.
pub(crate) struct Record {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Its number (from 1) and the offset of its first byte.
    pub number: u64,
    pub offset: u64,
}

/// A record's key, value and length in the input.
type Parsed = (Vec<u8>, Vec<u8>, u64);

/// Reads records of `format` from `input`, every length checked before anything is
/// allocated.
pub(crate) struct Reader<R> {
    input: R,
    format: Format,
    offset: u64,
    records: u64,
    line: Vec<u8>,
}

impl<R: BufRead> Reader<R> {
    pub(crate) fn new(input: R, format: Format) -> Self {
        Reader { input, format, offset: 0, records: 0, line: Vec::new() }
    }

    fn bad(&self, problem: InputProblem) -> ImportError {
        ImportError::Input { record: self.records + 1, offset: self.offset, problem }
    }

    /// The next record, or `None` at the end of the input.
    pub(crate) fn next_record(&mut self) -> Result<Option<Record>, ImportError> {
        let r = match self.format {
            Format::Bin => self.next_bin()?,
            Format::Hex => self.next_hex()?,
        };
        let Some((key, value, len)) = r else { return Ok(None) };
        self.records += 1;
        let rec = Record { key, value, number: self.records, offset: self.offset };
        self.offset += len;
        Ok(Some(rec))
    }

    /// Reads exactly `buf.len()` bytes; false if the input ended first (before any when
    /// `at_start` and none was read).
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, ImportError> {
        let mut got = 0;
        while got < buf.len() {
            match self.input.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("reading the input")(e)),
            }
        }
        Ok(got)
    }

    fn next_bin(&mut self) -> Result<Option<Parsed>, ImportError> {
        let mut len = [0u8; 4];
        match self.fill(&mut len)? {
            0 => return Ok(None),
            4 => {}
            _ => return Err(self.bad(InputProblem::Truncated)),
        }
        let klen = u32::from_le_bytes(len) as usize;
        if !(1..=MAX_KEY_LEN).contains(&klen) {
            return Err(self.bad(InputProblem::KeyLength(klen as u64)));
        }
        let mut key = vec![0; klen];
        if self.fill(&mut key)? < klen || self.fill(&mut len)? < 4 {
            return Err(self.bad(InputProblem::Truncated));
        }
        let vlen = u32::from_le_bytes(len) as usize;
        if vlen > MAX_VALUE_LEN {
            return Err(self.bad(InputProblem::ValueLength(vlen as u64)));
        }
        let mut value = vec![0; vlen];
        if self.fill(&mut value)? < vlen {
            return Err(self.bad(InputProblem::Truncated));
        }
        Ok(Some((key, value, (8 + klen + vlen) as u64)))
    }

    fn next_hex(&mut self) -> Result<Option<Parsed>, ImportError> {
        // The longest valid line, and one byte more to tell it was longer.
        const MAX_LINE: u64 = (2 * MAX_KEY_LEN + 1 + 2 * MAX_VALUE_LEN + 2) as u64;
        self.line.clear();
        let n = (&mut self.input)
            .take(MAX_LINE)
            .read_until(b'\n', &mut self.line)
            .map_err(io_err("reading the input"))?;
        if n == 0 {
            return Ok(None);
        }
        let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        if line.len() == self.line.len() && n as u64 == MAX_LINE {
            return Err(self.bad(InputProblem::Malformed("a line longer than any record")));
        }
        let Some(tab) = line.iter().position(|&b| b == b'\t') else {
            return Err(self.bad(InputProblem::Malformed("no TAB")));
        };
        let (k, v) = (&line[..tab], &line[tab + 1..]);
        if k.len() % 2 != 0 || v.len() % 2 != 0 {
            return Err(self.bad(InputProblem::Malformed("an odd number of hex digits")));
        }
        if !(1..=MAX_KEY_LEN).contains(&(k.len() / 2)) {
            return Err(self.bad(InputProblem::KeyLength(k.len() as u64 / 2)));
        }
        if v.len() / 2 > MAX_VALUE_LEN {
            return Err(self.bad(InputProblem::ValueLength(v.len() as u64 / 2)));
        }
        let (Some(key), Some(value)) = (unhex(k), unhex(v)) else {
            return Err(self.bad(InputProblem::Malformed("not a hex digit")));
        };
        Ok(Some((key, value, n as u64)))
    }
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.chunks_exact(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// Imports the records of `input` into a new store at `dir` (created if missing; it must
/// be empty), calling `progress` now and then. On any failure the files made are deleted
/// (and `dir`, if this call created it), and the error is returned.
pub fn import(
    dir: &Path,
    input: impl Read,
    opts: &ImportOptions,
    progress: &mut dyn FnMut(&ImportProgress),
) -> Result<Imported, ImportError> {
    let created = !dir.exists();
    let mut im = Import::create(dir, opts.capacity, opts.version)?;
    let mut p = Progress { shown: ImportProgress::default(), at: Instant::now(), f: progress };
    let r = feed(&mut im, input, opts, dir, &mut p);
    match r {
        Ok(()) => {
            let done = im.finish();
            if done.is_err() {
                clean_up_failed(dir, created);
            }
            let done = done?;
            p.shown.keys = done.keys;
            p.shown.chunks = done.chunks;
            (p.f)(&p.shown);
            Ok(done)
        }
        Err(e) => {
            // Best effort: the error that stopped the import is what the caller needs.
            let _ = im.abort();
            if created {
                let _ = std::fs::remove_dir(dir);
            }
            Err(e)
        }
    }
}

/// After a failed finish: the writer is gone; what it left is removed by name.
fn clean_up_failed(dir: &Path, created: bool) {
    if let Ok(b) = DirBackend::open(dir) {
        if let Ok(names) = Backend::list(&b) {
            for n in names {
                let _ = Backend::remove(&b, &n);
            }
        }
    }
    if created {
        let _ = std::fs::remove_dir(dir);
    }
}

struct Progress<'a> {
    shown: ImportProgress,
    at: Instant,
    f: &'a mut dyn FnMut(&ImportProgress),
}

impl Progress<'_> {
    fn tick(&mut self, update: impl FnOnce(&mut ImportProgress)) {
        update(&mut self.shown);
        if self.at.elapsed() >= Duration::from_millis(100) {
            self.at = Instant::now();
            (self.f)(&self.shown);
        }
    }
}

fn feed(
    im: &mut Import,
    input: impl Read,
    opts: &ImportOptions,
    dir: &Path,
    p: &mut Progress<'_>,
) -> Result<(), ImportError> {
    let mut reader = Reader::new(BufReader::with_capacity(1 << 20, input), opts.format);
    if opts.sorted {
        while let Some(r) = reader.next_record()? {
            if let Some(last) = im.last_key().filter(|&last| r.key.as_slice() <= last) {
                let problem = match r.key.as_slice() == last {
                    true => InputProblem::Duplicate { first: r.number - 1 },
                    false => InputProblem::Unsorted,
                };
                return Err(ImportError::Input { record: r.number, offset: r.offset, problem });
            }
            im.push(&r.key, &r.value)?;
            p.tick(|s| {
                s.records = r.number;
                s.bytes = reader.offset;
                s.keys = im.keys;
                s.chunks = im.chunks;
            });
        }
        return Ok(());
    }
    let tmp = match &opts.tmp_dir {
        Some(t) => t.clone(),
        None => match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    let mut sorter = Sorter::new(tmp, opts.sort_bytes);
    while let Some(r) = reader.next_record()? {
        sorter.add(r)?;
        let runs = sorter.runs.len() as u64;
        p.tick(|s| {
            s.records = reader.records;
            s.bytes = reader.offset;
            s.runs = runs;
        });
    }
    sorter.finish(&mut |r: Record| {
        im.push(&r.key, &r.value)?;
        p.tick(|s| {
            s.keys = im.keys;
            s.chunks = im.chunks;
        });
        Ok(())
    })
}

/// An external merge sort of records by key: runs of `budget` bytes sorted in memory and
/// spilled to temporary files in `dir` (deleted when it is dropped), merged `FAN_IN` at a
/// time. Equal keys are an error naming the later record.
struct Sorter {
    dir: PathBuf,
    budget: usize,
    buf: Vec<Record>,
    used: usize,
    runs: Vec<RunFile>,
    made: u64,
}

/// Runs merged at once (each holds a 64 KiB read buffer and a descriptor).
const FAN_IN: usize = 64;
/// What a record costs in the run buffer beyond its bytes.
const RECORD_OVERHEAD: usize = std::mem::size_of::<Record>() + 32;

/// A sorted run on disk, deleted on drop: records `u64 number | u64 offset | u32 klen | key
/// | u32 vlen | value`.
struct RunFile {
    path: PathBuf,
}

impl Drop for RunFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Sorter {
    fn new(dir: PathBuf, budget: usize) -> Sorter {
        Sorter {
            dir,
            budget: budget.max(64 << 10),
            buf: Vec::new(),
            used: 0,
            runs: Vec::new(),
            made: 0,
        }
    }

    fn add(&mut self, r: Record) -> Result<(), ImportError> {
        self.used += r.key.len() + r.value.len() + RECORD_OVERHEAD;
        self.buf.push(r);
        if self.used >= self.budget {
            self.spill()?;
        }
        Ok(())
    }

    /// Sorts the buffer (an error at equal keys) and writes it as a run.
    fn spill(&mut self) -> Result<(), ImportError> {
        sort_records(&mut self.buf)?;
        let run = self.new_run()?;
        let mut out = BufWriter::with_capacity(1 << 20, create(&run.path)?);
        for r in self.buf.drain(..) {
            write_record(&mut out, &r)
                .map_err(io_err(format!("writing {}", run.path.display())))?;
        }
        out.flush().map_err(io_err(format!("writing {}", run.path.display())))?;
        self.used = 0;
        self.runs.push(run);
        Ok(())
    }

    fn new_run(&mut self) -> Result<RunFile, ImportError> {
        self.made += 1;
        let name = format!(".bavl-import-{}-{}.run", std::process::id(), self.made);
        Ok(RunFile { path: self.dir.join(name) })
    }

    /// Hands every record to `sink` in key order.
    fn finish(
        mut self,
        sink: &mut dyn FnMut(Record) -> Result<(), ImportError>,
    ) -> Result<(), ImportError> {
        if self.runs.is_empty() {
            sort_records(&mut self.buf)?;
            return self.buf.drain(..).try_for_each(sink);
        }
        if !self.buf.is_empty() {
            self.spill()?;
        }
        while self.runs.len() > FAN_IN {
            let group: Vec<RunFile> = self.runs.drain(..FAN_IN).collect();
            let run = self.new_run()?;
            let mut out = BufWriter::with_capacity(1 << 20, create(&run.path)?);
            let ctx = format!("writing {}", run.path.display());
            merge(&group, &mut |r| write_record(&mut out, &r).map_err(io_err(ctx.clone())))?;
            out.flush().map_err(io_err(ctx))?;
            drop(group);
            self.runs.push(run);
        }
        merge(&self.runs, sink)
    }
}

fn create(path: &Path) -> Result<File, ImportError> {
    File::create(path).map_err(io_err(format!("creating {}", path.display())))
}

fn sort_records(buf: &mut [Record]) -> Result<(), ImportError> {
    buf.sort_unstable_by(|a, b| a.key.cmp(&b.key).then(a.number.cmp(&b.number)));
    match buf.windows(2).find(|w| w[0].key == w[1].key) {
        Some(w) => Err(duplicate(&w[0], &w[1])),
        None => Ok(()),
    }
}

/// The error of two records with one key: the later one is named.
fn duplicate(a: &Record, b: &Record) -> ImportError {
    let (first, later) = if a.number < b.number { (a, b) } else { (b, a) };
    ImportError::Input {
        record: later.number,
        offset: later.offset,
        problem: InputProblem::Duplicate { first: first.number },
    }
}

fn write_record(out: &mut impl Write, r: &Record) -> io::Result<()> {
    out.write_all(&r.number.to_le_bytes())?;
    out.write_all(&r.offset.to_le_bytes())?;
    out.write_all(&(r.key.len() as u32).to_le_bytes())?;
    out.write_all(&r.key)?;
    out.write_all(&(r.value.len() as u32).to_le_bytes())?;
    out.write_all(&r.value)
}

/// Reads a record of a run this process wrote (lengths still checked: a run file could
/// have been damaged under it).
fn read_record(r: &mut impl Read, path: &Path) -> Result<Option<Record>, ImportError> {
    let ctx = || format!("reading {}", path.display());
    let mut h = [0u8; 20];
    match r.read_exact(&mut h) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        r => r.map_err(io_err(ctx()))?,
    }
    let number = u64::from_le_bytes(h[..8].try_into().expect("8"));
    let offset = u64::from_le_bytes(h[8..16].try_into().expect("8"));
    let klen = u32::from_le_bytes(h[16..].try_into().expect("4")) as usize;
    let damaged = || ImportError::Io {
        context: ctx(),
        source: io::Error::new(io::ErrorKind::InvalidData, "a damaged sort run"),
    };
    if !(1..=MAX_KEY_LEN).contains(&klen) {
        return Err(damaged());
    }
    let mut key = vec![0; klen];
    let mut len = [0u8; 4];
    r.read_exact(&mut key).and_then(|()| r.read_exact(&mut len)).map_err(io_err(ctx()))?;
    let vlen = u32::from_le_bytes(len) as usize;
    if vlen > MAX_VALUE_LEN {
        return Err(damaged());
    }
    let mut value = vec![0; vlen];
    r.read_exact(&mut value).map_err(io_err(ctx()))?;
    Ok(Some(Record { key, value, number, offset }))
}

/// Merges sorted runs into `sink` in key order; equal keys are an error.
fn merge(
    runs: &[RunFile],
    sink: &mut dyn FnMut(Record) -> Result<(), ImportError>,
) -> Result<(), ImportError> {
    let mut readers = Vec::with_capacity(runs.len());
    let mut heap = BinaryHeap::new();
    let mut heads: Vec<Option<Record>> = Vec::with_capacity(runs.len());
    for (i, run) in runs.iter().enumerate() {
        let f = File::open(&run.path).map_err(io_err(format!("opening {}", run.path.display())))?;
        let mut rd = BufReader::with_capacity(1 << 16, f);
        let first = read_record(&mut rd, &run.path)?;
        if let Some(r) = &first {
            heap.push(Reverse((r.key.clone(), i)));
        }
        heads.push(first);
        readers.push(rd);
    }
    let mut prev: Option<Record> = None;
    while let Some(Reverse((_, i))) = heap.pop() {
        let r = heads[i].take().expect("a head for every heap entry");
        let next = read_record(&mut readers[i], &runs[i].path)?;
        if let Some(n) = &next {
            heap.push(Reverse((n.key.clone(), i)));
        }
        heads[i] = next;
        if let Some(p) = &prev {
            if p.key == r.key {
                return Err(duplicate(p, &r));
            }
        }
        // Only the key and number of the previous record are kept for the check.
        let keep =
            Record { key: r.key.clone(), value: Vec::new(), number: r.number, offset: r.offset };
        sink(r)?;
        prev = Some(keep);
    }
    Ok(())
}
