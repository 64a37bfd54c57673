package verifier

import (
	"bytes"
	"testing"
)

// Native fuzz targets for every decoder: membership, range, absence and chunk proofs,
// and the varint reader. Each is seeded with the valid vectors; the input picks a tree's
// root, so mutations of real proofs reach every rule. Properties: no panic; every error
// has one of the six kinds; what is accepted is consistent.

func fuzzRoots(f *testing.F) []Digest {
	var roots []Digest
	for _, tr := range loadVectors(f).Trees {
		roots = append(roots, tr.root(f))
	}
	return roots
}

func seedFor(f *testing.F, kind string, add func(tree byte, v valid)) {
	trees := map[string]byte{}
	for i, tr := range loadVectors(f).Trees {
		trees[tr.Name] = byte(i)
	}
	for _, v := range validVectors(f) {
		if v.c.Kind == kind {
			name := v.name[:len(v.name)-len(kind)-1]
			add(trees[name], v)
		}
	}
}

func checkKind(t *testing.T, err error) {
	if err == nil {
		return
	}
	k := KindOf(err)
	for _, want := range Kinds {
		if k == want {
			return
		}
	}
	t.Fatalf("error of no stable kind: %v", err)
}

func FuzzMembership(f *testing.F) {
	roots := fuzzRoots(f)
	seedFor(f, "membership", func(tree byte, v valid) {
		f.Add(tree, unhex(f, v.c.Key), unhex(f, v.c.Value), v.proof)
	})
	f.Fuzz(func(t *testing.T, tree byte, key, value, proof []byte) {
		m, err := VerifyMembership(roots[int(tree)%len(roots)], key, value, proof)
		checkKind(t, err)
		if err == nil && m.Index >= m.KeyCount {
			t.Fatalf("accepted index %d of %d keys", m.Index, m.KeyCount)
		}
	})
}

func FuzzRange(f *testing.F) {
	roots := fuzzRoots(f)
	kindOf := map[string]byte{"included": 0, "excluded": 1, "unbounded": 2}
	seedFor(f, "range", func(tree byte, v valid) {
		f.Add(tree, kindOf[v.c.Lo.Kind], unhex(f, v.c.Lo.Key), kindOf[v.c.Hi.Kind], unhex(f, v.c.Hi.Key), v.proof)
	})
	f.Fuzz(func(t *testing.T, tree, lk byte, lo []byte, hk byte, hi []byte, proof []byte) {
		l, h := Bound{BoundKind(1 + lk%3), lo}, Bound{BoundKind(1 + hk%3), hi}
		if lk%3 == 2 {
			l = Bound{Kind: Unbounded}
		}
		if hk%3 == 2 {
			h = Bound{Kind: Unbounded}
		}
		r, err := VerifyRange(roots[int(tree)%len(roots)], l, h, proof)
		checkKind(t, err)
		if err != nil {
			return
		}
		for i, e := range r.Entries {
			if below(e.Key, l) || above(e.Key, h) || (i > 0 && bytes.Compare(r.Entries[i-1].Key, e.Key) >= 0) {
				t.Fatalf("accepted an entry outside the bounds or out of order")
			}
		}
	})
}

func FuzzAbsence(f *testing.F) {
	roots := fuzzRoots(f)
	seedFor(f, "absence", func(tree byte, v valid) { f.Add(tree, unhex(f, v.c.Key), v.proof) })
	f.Fuzz(func(t *testing.T, tree byte, key, proof []byte) {
		_, err := VerifyAbsence(roots[int(tree)%len(roots)], key, proof)
		checkKind(t, err)
	})
}

func FuzzChunk(f *testing.F) {
	roots := fuzzRoots(f)
	seedFor(f, "chunk", func(tree byte, v valid) { f.Add(tree, v.c.Index, v.proof) })
	f.Fuzz(func(t *testing.T, tree byte, index uint64, chunk []byte) {
		c, err := VerifyChunk(roots[int(tree)%len(roots)], index, chunk)
		checkKind(t, err)
		if err != nil {
			return
		}
		if c.Index != index || c.Index >= c.ChunkCount || len(c.Entries) == 0 || len(c.Entries) > int(c.Capacity) {
			t.Fatalf("accepted an inconsistent chunk: %+v", c)
		}
	})
}

func FuzzVarint(f *testing.F) {
	for _, s := range [][]byte{{0}, {0x7f}, {0x80, 0x01}, {0x80, 0x00}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := reader{b: b}
		v, err := r.varint()
		if err != nil {
			checkKind(t, err)
			return
		}
		// Minimal: re-encoding gives exactly the bytes read.
		var enc []byte
		for x := v; ; x >>= 7 {
			if x < 0x80 {
				enc = append(enc, byte(x))
				break
			}
			enc = append(enc, byte(x)|0x80)
		}
		if !bytes.Equal(enc, b[:r.pos]) {
			t.Fatalf("varint %d read from %x, not minimal", v, b[:r.pos])
		}
	})
}
