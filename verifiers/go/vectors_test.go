package verifier

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The known-answer vectors of docs/vectors/core.json, read with nothing but this package.

type vBound struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
}

type vEntry struct{ Key, Value string }

type vCase struct {
	Description string   `json:"description"`
	Kind        string   `json:"kind"`
	Key         string   `json:"key"`
	Value       string   `json:"value"`
	Lo          *vBound  `json:"lo"`
	Hi          *vBound  `json:"hi"`
	Index       uint64   `json:"index"`
	Proof       string   `json:"proof"`
	Bytes       string   `json:"bytes"`
	Entries     []vEntry `json:"entries"`
	KeyCount    uint64   `json:"key_count"`
	ChunkCount  uint64   `json:"chunk_count"`
	KeysBefore  uint64   `json:"keys_before"`
	KeyHeight   uint8    `json:"key_height"`
	Len         int      `json:"len"`
	Error       string   `json:"error"`
	Expected    string   `json:"expected"`
}

type vTree struct {
	Name       string   `json:"name"`
	Capacity   uint32   `json:"capacity"`
	Root       string   `json:"root"`
	Entries    []vEntry `json:"entries"`
	KeyCount   uint64   `json:"key_count"`
	ChunkCount uint64   `json:"chunk_count"`
	Membership []vCase  `json:"membership"`
	Absence    []vCase  `json:"absence"`
	Range      []vCase  `json:"range"`
	Chunks     []vCase  `json:"chunks"`
	Negative   []vCase  `json:"negative"`
}

type vFile struct {
	FormatVersion int     `json:"format_version"`
	Hash          string  `json:"hash"`
	Trees         []vTree `json:"trees"`
}

func loadVectors(t testing.TB) vFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "vectors", "core.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f vFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.FormatVersion != formatVersion || f.Hash != "sha256" || len(f.Trees) == 0 {
		t.Fatalf("unexpected vectors header: version %d hash %q, %d trees", f.FormatVersion, f.Hash, len(f.Trees))
	}
	return f
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func (tr vTree) root(t testing.TB) Digest {
	var d Digest
	copy(d[:], unhex(t, tr.Root))
	return d
}

func bound(t testing.TB, b *vBound) Bound {
	if b == nil {
		t.Fatal("missing bound")
	}
	switch b.Kind {
	case "included":
		return Bound{Included, unhex(t, b.Key)}
	case "excluded":
		return Bound{Excluded, unhex(t, b.Key)}
	case "unbounded":
		return Bound{Kind: Unbounded}
	}
	t.Fatalf("unknown bound kind %q", b.Kind)
	return Bound{}
}

func sameEntries(t testing.TB, got []Entry, want []vEntry) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !bytes.Equal(got[i].Key, unhex(t, want[i].Key)) || !bytes.Equal(got[i].Value, unhex(t, want[i].Value)) {
			return false
		}
	}
	return true
}

// run calls the verifier a vector names; the result is "" on acceptance, else the kind.
func run(t testing.TB, root Digest, c vCase, proof []byte) (any, ErrorKind) {
	var res any
	var err error
	switch c.Kind {
	case "membership":
		res, err = VerifyMembership(root, unhex(t, c.Key), unhex(t, c.Value), proof)
	case "absence":
		res, err = VerifyAbsence(root, unhex(t, c.Key), proof)
	case "range":
		res, err = VerifyRange(root, bound(t, c.Lo), bound(t, c.Hi), proof)
	case "chunk":
		res, err = VerifyChunk(root, c.Index, proof)
	default:
		t.Fatalf("unknown kind %q", c.Kind)
	}
	return res, KindOf(err)
}

func TestVectorsAccept(t *testing.T) {
	seen := 0
	for _, tr := range loadVectors(t).Trees {
		root := tr.root(t)
		for _, m := range tr.Membership {
			got, err := VerifyMembership(root, unhex(t, m.Key), unhex(t, m.Value), unhex(t, m.Proof))
			if err != nil || got.Index != m.Index || got.KeyCount != m.KeyCount {
				t.Errorf("%s: membership %s: %+v, %v", tr.Name, m.Key, got, err)
			}
			seen++
		}
		for _, a := range tr.Absence {
			got, err := VerifyAbsence(root, unhex(t, a.Key), unhex(t, a.Proof))
			if err != nil || got.KeyCount != a.KeyCount {
				t.Errorf("%s: absence %s: %+v, %v", tr.Name, a.Key, got, err)
			}
			seen++
		}
		for _, r := range tr.Range {
			got, err := VerifyRange(root, bound(t, r.Lo), bound(t, r.Hi), unhex(t, r.Proof))
			if err != nil || got.KeyCount != r.KeyCount || !sameEntries(t, got.Entries, r.Entries) {
				t.Errorf("%s: range %+v..%+v: %v", tr.Name, r.Lo, r.Hi, err)
			}
			seen++
		}
		var before uint64
		for _, c := range tr.Chunks {
			got, err := VerifyChunk(root, c.Index, unhex(t, c.Bytes))
			want := tr.Entries[c.KeysBefore : c.KeysBefore+uint64(c.Len)]
			if err != nil || got.Index != c.Index || got.ChunkCount != c.ChunkCount || got.KeyCount != c.KeyCount ||
				got.KeysBefore != c.KeysBefore || got.KeyHeight != c.KeyHeight || got.Capacity != tr.Capacity ||
				!sameEntries(t, got.Entries, want) || c.KeysBefore != before {
				t.Errorf("%s: chunk %d: %+v, %v", tr.Name, c.Index, got, err)
			}
			before += uint64(c.Len)
			seen++
		}
		if before != tr.KeyCount || uint64(len(tr.Chunks)) != tr.ChunkCount {
			t.Errorf("%s: the chunks do not cover the entries", tr.Name)
		}
	}
	if seen < 50 {
		t.Fatalf("only %d positive vectors", seen)
	}
}

func TestVectorsRejectWithTheirKind(t *testing.T) {
	kinds := map[ErrorKind]bool{}
	seen := 0
	for _, tr := range loadVectors(t).Trees {
		for _, n := range tr.Negative {
			_, kind := run(t, tr.root(t), n, unhex(t, n.Proof))
			if n.Expected != "reject" || kind != ErrorKind(n.Error) {
				t.Errorf("%s: %s: got kind %q, want %q", tr.Name, n.Description, kind, n.Error)
			}
			kinds[kind] = true
			seen++
		}
	}
	for _, k := range Kinds {
		if !kinds[k] {
			t.Errorf("no negative vector of kind %s", k)
		}
	}
	if seen < 30 {
		t.Fatalf("only %d negative vectors", seen)
	}
}
