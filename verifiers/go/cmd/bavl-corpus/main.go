// Command bavl-corpus runs the Go verifier on the differential corpus written by the fuzz
// crate's diff_corpus example and prints one verdict line per case, "CASE ok SUMMARY" or
// "CASE err KIND", in the format every bavl verifier prints (docs/verifiers.md), so that
// scripts/verifiers.sh can compare them with the Rust and TypeScript verifiers' lines.
//
// Usage: bavl-corpus CORPUS.json > VERDICTS.txt
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	verifier "bavl.dev/verifier"
)

type bound struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
}

type base struct {
	Kind  string `json:"kind"`
	Root  string `json:"root"`
	Key   string `json:"key"`
	Value string `json:"value"`
	Lo    *bound `json:"lo"`
	Hi    *bound `json:"hi"`
	Index string `json:"index"`
	Proof string `json:"proof"`
}

type corpus struct {
	Bases []base              `json:"bases"`
	Cases [][]json.RawMessage `json:"cases"`
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		fail("bad hex: %v", err)
	}
	return b
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bavl-corpus: "+format+"\n", args...)
	os.Exit(2)
}

func toBound(b *bound) verifier.Bound {
	if b == nil {
		fail("a range base without bounds")
	}
	switch b.Kind {
	case "included":
		return verifier.Bound{Kind: verifier.Included, Key: unhex(b.Key)}
	case "excluded":
		return verifier.Bound{Kind: verifier.Excluded, Key: unhex(b.Key)}
	}
	return verifier.Bound{Kind: verifier.Unbounded}
}

func entries(es []verifier.Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = hex.EncodeToString(e.Key) + ":" + hex.EncodeToString(e.Value)
	}
	return strings.Join(parts, ",")
}

// verdict runs the verifier a base names on proof.
func verdict(b *base, proof []byte) string {
	var root verifier.Digest
	copy(root[:], unhex(b.Root))
	var s string
	var err error
	switch b.Kind {
	case "membership":
		var m verifier.Membership
		m, err = verifier.VerifyMembership(root, unhex(b.Key), unhex(b.Value), proof)
		s = fmt.Sprintf("index=%d keys=%d", m.Index, m.KeyCount)
	case "absence":
		var a verifier.Absence
		a, err = verifier.VerifyAbsence(root, unhex(b.Key), proof)
		s = fmt.Sprintf("keys=%d", a.KeyCount)
	case "range":
		var r verifier.Range
		r, err = verifier.VerifyRange(root, toBound(b.Lo), toBound(b.Hi), proof)
		s = fmt.Sprintf("keys=%d entries=%s", r.KeyCount, entries(r.Entries))
	case "chunk":
		index, perr := strconv.ParseUint(b.Index, 10, 64)
		if perr != nil {
			fail("bad index %q", b.Index)
		}
		var c verifier.Chunk
		c, err = verifier.VerifyChunk(root, index, proof)
		s = fmt.Sprintf("index=%d chunks=%d keys=%d before=%d height=%d capacity=%d entries=%s",
			c.Index, c.ChunkCount, c.KeyCount, c.KeysBefore, c.KeyHeight, c.Capacity, entries(c.Entries))
	default:
		fail("unknown kind %q", b.Kind)
	}
	if err != nil {
		return "err " + string(verifier.KindOf(err))
	}
	return "ok " + s
}

func num(m json.RawMessage) int {
	n, err := strconv.Atoi(string(m))
	if err != nil {
		fail("bad number %s", m)
	}
	return n
}

// mutate applies a case's operation to its base's proof.
func mutate(c []json.RawMessage, proof []byte) []byte {
	var op string
	if len(c) < 2 || json.Unmarshal(c[1], &op) != nil {
		fail("bad case %s", c)
	}
	p := append([]byte(nil), proof...)
	switch {
	case op == "asis":
		return p
	case op == "flip" && len(c) == 4:
		p[num(c[2])] ^= byte(num(c[3]))
		return p
	case op == "truncate" && len(c) == 3:
		return p[:num(c[2])]
	case op == "append" && len(c) == 3:
		return append(p, byte(num(c[2])))
	}
	fail("bad case %s", c)
	return nil
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: bavl-corpus CORPUS.json > VERDICTS.txt")
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	var cp corpus
	if err := json.Unmarshal(data, &cp); err != nil {
		fail("%v", err)
	}
	proofs := make([][]byte, len(cp.Bases))
	for i := range cp.Bases {
		proofs[i] = unhex(cp.Bases[i].Proof)
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for i, c := range cp.Cases {
		b := num(c[0])
		fmt.Fprintf(out, "%d %s\n", i, verdict(&cp.Bases[b], mutate(c, proofs[b])))
	}
}
