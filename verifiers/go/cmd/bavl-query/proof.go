// proof.go: the ABCI query's answer checked against a light-client-verified app hash.
//
// Nothing in the answer is trusted: its proof op must name the key asked for and one of
// the two op types docs/chain.md §4 defines, and its bavl proof must verify, with the
// Go verifier (bavl.dev/verifier), against the app hash of the verified header.

package main

import (
	"bytes"
	"errors"
	"fmt"

	verifier "bavl.dev/verifier"
	abci "github.com/cometbft/cometbft/abci/types"
)

// The proof op types of bavl-abci's "/key" query (docs/chain.md §4).
const (
	opMembership = "bavl:membership:v1"
	opAbsence    = "bavl:absence:v1"
)

// errAnswer marks an answer that does not prove what it claims: a tampered value or
// proof, a proof for another key, a missing proof.
var errAnswer = errors.New("the query's answer is refused")

// Answer is what a verified query establishes about the key at one height.
type Answer struct {
	Present  bool
	Value    []byte // nil when absent
	KeyCount uint64 // keys in the tree at that height
}

// checkAnswer verifies the answer r to a "/key" query for key against root, the app hash
// of header r.Height+1 (already verified by the caller).
func checkAnswer(root verifier.Digest, key []byte, r *abci.ResponseQuery) (Answer, error) {
	if r.Code != 0 {
		return Answer{}, fmt.Errorf("%w: code %d (%s)", errAnswer, r.Code, r.Log)
	}
	if r.ProofOps == nil || len(r.ProofOps.Ops) != 1 {
		return Answer{}, fmt.Errorf("%w: want exactly one proof op", errAnswer)
	}
	op := r.ProofOps.Ops[0]
	if !bytes.Equal(op.Key, key) {
		return Answer{}, fmt.Errorf("%w: the proof op is for key %x, not %x", errAnswer, op.Key, key)
	}
	switch op.Type {
	case opMembership:
		m, err := verifier.VerifyMembership(root, key, r.Value, op.Data)
		if err != nil {
			return Answer{}, fmt.Errorf("%w: membership proof: %v", errAnswer, err)
		}
		return Answer{Present: true, Value: r.Value, KeyCount: m.KeyCount}, nil
	case opAbsence:
		if len(r.Value) != 0 {
			return Answer{}, fmt.Errorf("%w: an absence proof with a value", errAnswer)
		}
		a, err := verifier.VerifyAbsence(root, key, op.Data)
		if err != nil {
			return Answer{}, fmt.Errorf("%w: absence proof: %v", errAnswer, err)
		}
		return Answer{KeyCount: a.KeyCount}, nil
	default:
		return Answer{}, fmt.Errorf("%w: unknown proof op type %q", errAnswer, op.Type)
	}
}
