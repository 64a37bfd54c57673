// Package verifier checks bavl proofs and chunks against a trusted root hash, written from
// the specification (docs/design.md §2-§3 of the bavl repository), with the standard
// library only.
//
// Every function takes the trusted root and untrusted bytes; it never panics on bad input,
// allocates only in proportion to the bytes read, and returns either what the proof
// establishes or an *Error whose Kind is one of the six stable error kinds that every bavl
// verifier reports for the same input. Proofs use SHA-256 (bavl's default hash).
package verifier

import "bytes"

// Digest is a 32-byte hash: a root, or a value hash.
type Digest = [32]byte

// Entry is a key and its value.
type Entry struct {
	Key, Value []byte
}

// BoundKind says how a range bound includes its key.
type BoundKind int

// Bound kinds.
const (
	Unbounded BoundKind = iota
	Included
	Excluded
)

// Bound is one end of a range: Key is ignored when Kind is Unbounded.
type Bound struct {
	Kind BoundKind
	Key  []byte
}

// Membership is what a membership proof establishes.
type Membership struct {
	Index    uint64 // the key's position among all keys
	KeyCount uint64 // keys in the tree
}

// Range is every entry of the tree within the bounds, in key order, none omitted.
type Range struct {
	Entries  []Entry
	KeyCount uint64
}

// Absence is what an absence proof establishes.
type Absence struct {
	KeyCount uint64
}

// Chunk is a chunk verified against the root: exactly chunk Index of the tree.
type Chunk struct {
	Index, ChunkCount, KeyCount uint64
	KeysBefore                  uint64 // keys in the chunks before this one
	KeyHeight                   uint8  // height of the inner node whose separator is its first key (0 for chunk 0)
	Capacity                    uint32
	Entries                     []Entry
}

func checkKey(key []byte) error {
	if len(key) == 0 {
		return kindErr(KindInput, "empty key")
	}
	if len(key) > maxKeyLen {
		return kindErr(KindInput, "key longer than 1024 bytes")
	}
	return nil
}

func below(k []byte, lo Bound) bool {
	switch lo.Kind {
	case Included:
		return bytes.Compare(k, lo.Key) < 0
	case Excluded:
		return bytes.Compare(k, lo.Key) <= 0
	}
	return false
}

func above(k []byte, hi Bound) bool {
	switch hi.Kind {
	case Included:
		return bytes.Compare(k, hi.Key) > 0
	case Excluded:
		return bytes.Compare(k, hi.Key) >= 0
	}
	return false
}

func checkBounds(lo, hi Bound) error {
	for _, b := range []Bound{lo, hi} {
		if b.Kind != Unbounded {
			if err := checkKey(b.Key); err != nil {
				return err
			}
		}
	}
	if lo.Kind != Unbounded && hi.Kind != Unbounded && bytes.Compare(lo.Key, hi.Key) > 0 {
		return kindErr(KindInput, "inverted range")
	}
	return nil
}

// VerifyMembership checks that key maps to value in the tree with root root.
func VerifyMembership(root Digest, key, value, proof []byte) (Membership, error) {
	if err := checkKey(key); err != nil {
		return Membership{}, err
	}
	if len(value) > maxValueLen {
		return Membership{}, kindErr(KindInput, "value longer than 16 MiB")
	}
	w, err := walk(root, kindMembership, proof, &subject{key, value}, false)
	if err != nil {
		return Membership{}, err
	}
	if len(w.leaves) != 1 || !w.subjectUsed {
		return Membership{}, kindErr(KindStructure, "a membership proof expands exactly its subject")
	}
	return Membership{Index: w.leaves[0].index, KeyCount: w.keyCount}, nil
}

// VerifyRange checks a range proof and returns every entry within lo..hi.
func VerifyRange(root Digest, lo, hi Bound, proof []byte) (Range, error) {
	if err := checkBounds(lo, hi); err != nil {
		return Range{}, err
	}
	w, err := walk(root, kindRange, proof, nil, false)
	if err != nil {
		return Range{}, err
	}
	n := w.keyCount
	if n == 0 {
		return Range{Entries: []Entry{}}, nil
	}
	ls := w.leaves
	if len(ls) == 0 {
		return Range{}, kindErr(KindStructure, "no leaves")
	}
	for i := 1; i < len(ls); i++ {
		if ls[i].index != ls[i-1].index+1 {
			return Range{}, kindErr(KindStructure, "leaves are not contiguous")
		}
		if bytes.Compare(ls[i-1].key, ls[i].key) >= 0 {
			return Range{}, kindErr(KindStructure, "keys out of order")
		}
	}
	first, last := ls[0], ls[len(ls)-1]
	if !(first.index == 0 || below(first.key, lo)) || !(last.index == n-1 || above(last.key, hi)) {
		return Range{}, kindErr(KindStructure, "range not covered to its bounds")
	}
	if len(ls) > 1 && (below(ls[1].key, lo) || above(ls[len(ls)-2].key, hi)) {
		return Range{}, kindErr(KindStructure, "more boundary leaves than needed")
	}
	entries := []Entry{}
	for _, l := range ls {
		inside := !below(l.key, lo) && !above(l.key, hi)
		switch {
		case inside && l.tag == lValue:
			entries = append(entries, Entry{Key: l.key, Value: l.value})
		case !inside && l.tag == lHash:
		default:
			return Range{}, kindErr(KindStructure, "leaf carries the wrong content for its place")
		}
	}
	return Range{Entries: entries, KeyCount: n}, nil
}

// VerifyAbsence checks that key is absent from the tree with root root.
func VerifyAbsence(root Digest, key, proof []byte) (Absence, error) {
	b := Bound{Kind: Included, Key: key}
	r, err := VerifyRange(root, b, b, proof)
	if err != nil {
		return Absence{}, err
	}
	if len(r.Entries) != 0 {
		return Absence{}, kindErr(KindStructure, "the key is present")
	}
	return Absence{KeyCount: r.KeyCount}, nil
}

// VerifyChunk checks exported chunk bytes as chunk index of the tree with root root.
func VerifyChunk(root Digest, index uint64, chunk []byte) (Chunk, error) {
	c, err := VerifyChunkUnindexed(root, chunk)
	if err != nil {
		return Chunk{}, err
	}
	if c.Index != index {
		return Chunk{}, kindErr(KindWrongIndex, "the chunk is of another index")
	}
	return c, nil
}

// VerifyChunkUnindexed checks exported chunk bytes as some chunk of the tree with root
// root, and says which (the index is derived from the proof).
func VerifyChunkUnindexed(root Digest, chunk []byte) (Chunk, error) {
	w, err := walk(root, kindChunk, chunk, nil, true)
	if err != nil {
		return Chunk{}, err
	}
	if len(w.chunks) != 1 {
		return Chunk{}, kindErr(KindStructure, "a chunk proof expands exactly one chunk")
	}
	c := w.chunks[0]
	if !c.full || c.entries == nil || w.keyHeight < 0 {
		return Chunk{}, kindErr(KindStructure, "a chunk proof expands every entry of its chunk")
	}
	return Chunk{
		Index: c.index, ChunkCount: w.chunkCount, KeyCount: w.keyCount, KeysBefore: c.keysBefore,
		KeyHeight: uint8(w.keyHeight), Capacity: w.capacity, Entries: c.entries,
	}, nil
}
