package verifier

import (
	"bytes"
	"math"
)

// The one pass over a proof of docs/design.md §3: every field is checked as it is read,
// in encoding order, and every hash is recomputed bottom-up. The order of the checks
// decides the error kind, so it follows the specification's list step by step.

const (
	formatVersion = 1
	minCapacity   = 4
	maxCapacity   = 65536
	maxHeight     = 96
	maxKeyLen     = 1024
	maxValueLen   = 16 << 20
	maxPrunedKeys = 1<<48 - 1

	kindMembership = 1
	kindRange      = 2
	kindChunk      = 3

	tEmpty  = 0
	tInner  = 1
	tChunk  = 2
	tPruned = 3
	lHash   = 0
	lValue  = 1
	lSubj   = 2
)

type leaf struct {
	index uint64
	key   []byte
	value []byte // nil for a value-hash leaf
	tag   byte
}

type info struct {
	hash     digest
	kc, cc   uint64
	expanded bool
	// pending: the subtree holds the expanded chunk, reached by left turns only.
	pending bool
}

type expandedChunk struct {
	index, keysBefore uint64
	full              bool
	entries           []Entry // built only for full chunks of a chunk proof
}

type subject struct{ key, value []byte }

type walker struct {
	r            reader
	capacity     uint64
	keysBefore   uint64
	chunksBefore uint64
	leaves       []leaf
	subject      *subject
	build        bool
	chunks       []expandedChunk
	keyHeight    int // -1 until an inner node is reached from the right on the chunk's path
}

type walked struct {
	keyCount, chunkCount uint64
	leaves               []leaf
	chunks               []expandedChunk
	keyHeight            int
	capacity             uint32
	subjectUsed          bool
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

func (w *walker) node(depth int) (info, error) {
	at := w.r.pos
	if depth > maxHeight {
		return info{}, decodeErr(at, "structure nested too deeply")
	}
	tag, err := w.r.u8()
	if err != nil {
		return info{}, err
	}
	switch tag {
	case tPruned:
		return w.pruned()
	case tChunk:
		return w.chunk()
	case tInner:
		return w.inner(depth, at)
	}
	return info{}, decodeErr(at, "unknown node tag %#02x", tag)
}

func (w *walker) inner(depth, at int) (info, error) {
	hat := w.r.pos
	height, err := w.r.u8()
	if err != nil {
		return info{}, err
	}
	if height == 0 || height > maxHeight {
		return info{}, decodeErr(hat, "height = %d out of range", height)
	}
	l, err := w.node(depth + 1)
	if err != nil {
		return info{}, err
	}
	r, err := w.node(depth + 1)
	if err != nil {
		return info{}, err
	}
	if !l.expanded && !r.expanded {
		return info{}, kindErr(KindStructure, "expanded node over two pruned subtrees")
	}
	if l.kc > math.MaxUint64-r.kc || l.cc > math.MaxUint64-r.cc {
		return info{}, decodeErr(at, "key count overflows")
	}
	kc, cc := l.kc+r.kc, l.cc+r.cc
	if r.pending {
		w.keyHeight = int(height)
	}
	return info{hash: innerHash(height, kc, cc, l.hash, r.hash), kc: kc, cc: cc, expanded: true, pending: l.pending}, nil
}

func (w *walker) pruned() (info, error) {
	at := w.r.pos
	kc, err := w.r.varintIn(1, maxPrunedKeys, "key count")
	if err != nil {
		return info{}, err
	}
	cc, err := w.r.varintIn(1, kc, "chunk count")
	if err != nil {
		return info{}, err
	}
	if cc == 1 && kc > w.capacity {
		return info{}, decodeErr(at, "key count = %d out of range", kc)
	}
	h, err := w.r.digest()
	if err != nil {
		return info{}, err
	}
	w.keysBefore = satAdd(w.keysBefore, kc)
	w.chunksBefore = satAdd(w.chunksBefore, cc)
	return info{hash: h, kc: kc, cc: cc}, nil
}

func (w *walker) chunk() (info, error) {
	m, err := w.r.varintIn(1, w.capacity, "chunk key count")
	if err != nil {
		return info{}, err
	}
	p, err := w.r.varintIn(0, m-1, "first expanded leaf")
	if err != nil {
		return info{}, err
	}
	q, err := w.r.varintIn(1, m-p, "expanded leaf count")
	if err != nil {
		return info{}, err
	}
	full := p == 0 && q == m
	offset := w.keysBefore
	var entries []Entry
	var root digest
	if full && w.build {
		entries, root, err = w.fullChunk(int(m))
	} else {
		var r digest
		r, err = w.inChunk(0, int(m), int(p), int(p+q), offset)
		root = chunkHash(uint32(m), r)
	}
	if err != nil {
		return info{}, err
	}
	w.chunks = append(w.chunks, expandedChunk{index: w.chunksBefore, keysBefore: offset, full: full, entries: entries})
	w.keysBefore = satAdd(w.keysBefore, m)
	w.chunksBefore = satAdd(w.chunksBefore, 1)
	return info{hash: root, kc: m, cc: 1, expanded: true, pending: true}, nil
}

// fullChunk reads the n leaves of a chunk proof's expanded chunk: values only, keys
// strictly increasing.
func (w *walker) fullChunk(n int) ([]Entry, digest, error) {
	entries := make([]Entry, 0, min(n, w.r.remaining()))
	leaves := make([]digest, 0, min(n, w.r.remaining()))
	for i := 0; i < n; i++ {
		tag, err := w.leafTag()
		if err != nil {
			return nil, digest{}, err
		}
		if tag != lValue {
			return nil, digest{}, kindErr(KindStructure, "chunk entries must carry values")
		}
		key, err := w.key()
		if err != nil {
			return nil, digest{}, err
		}
		value, err := w.r.bytes(maxValueLen, "value length")
		if err != nil {
			return nil, digest{}, err
		}
		if i > 0 && bytes.Compare(entries[i-1].Key, key) >= 0 {
			return nil, digest{}, kindErr(KindStructure, "keys out of order")
		}
		entries = append(entries, Entry{Key: key, Value: value})
		leaves = append(leaves, leafHash(key, valueHash(value)))
	}
	return entries, chunkHash(uint32(n), mth(leaves)), nil
}

func (w *walker) inChunk(a, b, p, e int, offset uint64) (digest, error) {
	if b <= p || a >= e {
		return w.r.digest()
	}
	if b-a == 1 {
		return w.leaf(offset + uint64(a))
	}
	k := splitPoint(b - a)
	l, err := w.inChunk(a, a+k, p, e, offset)
	if err != nil {
		return digest{}, err
	}
	r, err := w.inChunk(a+k, b, p, e, offset)
	if err != nil {
		return digest{}, err
	}
	return chunkNodeHash(l, r), nil
}

func (w *walker) leafTag() (byte, error) {
	at := w.r.pos
	t, err := w.r.u8()
	if err != nil {
		return 0, err
	}
	if t > lSubj {
		return 0, decodeErr(at, "unknown leaf tag %#02x", t)
	}
	return t, nil
}

func (w *walker) key() ([]byte, error) {
	at := w.r.pos
	k, err := w.r.bytes(maxKeyLen, "key length")
	if err != nil {
		return nil, err
	}
	if len(k) == 0 {
		return nil, decodeErr(at, "key length = 0 out of range")
	}
	return k, nil
}

func (w *walker) leaf(index uint64) (digest, error) {
	tag, err := w.leafTag()
	if err != nil {
		return digest{}, err
	}
	var key, value []byte
	var h digest
	switch tag {
	case lHash:
		if key, err = w.key(); err != nil {
			return digest{}, err
		}
		vh, err := w.r.digest()
		if err != nil {
			return digest{}, err
		}
		h = leafHash(key, vh)
	case lValue:
		if key, err = w.key(); err != nil {
			return digest{}, err
		}
		if value, err = w.r.bytes(maxValueLen, "value length"); err != nil {
			return digest{}, err
		}
		h = leafHash(key, valueHash(value))
	default:
		if w.subject == nil {
			return digest{}, kindErr(KindStructure, "unexpected subject leaf")
		}
		key, value = w.subject.key, w.subject.value
		w.subject = nil
		h = leafHash(key, valueHash(value))
	}
	w.leaves = append(w.leaves, leaf{index: index, key: key, value: value, tag: tag})
	return h, nil
}

// walk reads a whole proof (steps 2-8 of docs/design.md §3).
func walk(root Digest, expectedKind byte, b []byte, subj *subject, build bool) (*walked, error) {
	w := &walker{r: reader{b: b}, subject: subj, build: build, keyHeight: -1}
	version, err := w.r.u8()
	if err != nil {
		return nil, err
	}
	if version != formatVersion {
		return nil, decodeErr(0, "format version %d is not supported", version)
	}
	kind, err := w.r.u8()
	if err != nil {
		return nil, err
	}
	if kind != expectedKind {
		return nil, kindErr(KindWrongKind, "proof of another kind")
	}
	capacity, err := w.r.varintIn(minCapacity, maxCapacity, "capacity")
	if err != nil {
		return nil, err
	}
	w.capacity = capacity
	var top digest
	var kc, cc uint64
	pending := false
	if w.r.remaining() > 0 && b[w.r.pos] == tEmpty {
		w.r.pos++
	} else {
		in, err := w.node(0)
		if err != nil {
			return nil, err
		}
		if !in.expanded {
			return nil, kindErr(KindStructure, "nothing expanded")
		}
		top, kc, cc, pending = in.hash, in.kc, in.cc, in.pending
	}
	if w.r.remaining() != 0 {
		return nil, decodeErr(w.r.pos, "trailing bytes")
	}
	if rootHash(uint32(capacity), top) != root {
		return nil, kindErr(KindRootMismatch, "the proof is for another tree or version, or was altered")
	}
	kh := w.keyHeight
	if pending {
		kh = 0
	}
	return &walked{
		keyCount: kc, chunkCount: cc, leaves: w.leaves, chunks: w.chunks,
		keyHeight: kh, capacity: uint32(capacity), subjectUsed: w.subject == nil,
	}, nil
}
