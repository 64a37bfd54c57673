// Tests without a network: the command line and the answer checks that come before any
// proof bytes are read. The end-to-end tests against a localnet are in localnet_test.go.

package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	verifier "bavl.dev/verifier"
	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/cometbft/cometbft/proto/tendermint/crypto"
)

func TestUsageErrorsExitTwo(t *testing.T) {
	good := []string{"--rpc", "http://x", "--witness", "http://y", "--trust-height", "1",
		"--trust-hash", strings.Repeat("ab", 32), "--key", "6b"}
	cases := map[string][]string{
		"no rpc":        {"--key", "6b"},
		"no witness":    {"--rpc", "http://x", "--trust-height", "1", "--trust-hash", strings.Repeat("ab", 32), "--key", "6b"},
		"short hash":    append(append([]string{}, good...), "--trust-hash", "abcd"),
		"bad key hex":   append(append([]string{}, good...), "--key", "zz"),
		"empty key":     append(append([]string{}, good...), "--key", ""),
		"long key":      append(append([]string{}, good...), "--key", strings.Repeat("00", 1025)),
		"zero trust":    append(append([]string{}, good...), "--trust-height", "0"),
		"extra arg":     append(append([]string{}, good...), "extra"),
		"unknown flag":  append(append([]string{}, good...), "--nope"),
		"negative from": append(append([]string{}, good...), "--height", "-1"),
	}
	for name, args := range cases {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", name, code, errOut.String())
		}
		if out.Len() != 0 {
			t.Errorf("%s: printed %q on stdout", name, out.String())
		}
	}
	if _, _, _, err := parse(good, &bytes.Buffer{}); err != nil {
		t.Fatalf("the good command line is refused: %v", err)
	}
}

func TestHelpExitsZero(t *testing.T) {
	var errOut bytes.Buffer
	if code := run([]string{"--help"}, &bytes.Buffer{}, &errOut); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	if !strings.Contains(errOut.String(), "header h+1") {
		t.Fatalf("--help does not explain which header carries the app hash: %s", errOut.String())
	}
}

func TestMalformedAnswersAreRefused(t *testing.T) {
	key := []byte("k")
	op := func(typ string, k []byte) *crypto.ProofOps {
		return &crypto.ProofOps{Ops: []crypto.ProofOp{{Type: typ, Key: k, Data: []byte{1, 2, 3}}}}
	}
	cases := map[string]abci.ResponseQuery{
		"error code":      {Code: 2, ProofOps: op(opMembership, key)},
		"no proof":        {},
		"two ops":         {ProofOps: &crypto.ProofOps{Ops: []crypto.ProofOp{{Type: opAbsence, Key: key}, {Type: opAbsence, Key: key}}}},
		"other key":       {ProofOps: op(opMembership, []byte("j"))},
		"unknown type":    {ProofOps: op("ics23:iavl", key)},
		"absent w/ value": {Value: []byte("v"), ProofOps: op(opAbsence, key)},
		"garbage member":  {Value: []byte("v"), ProofOps: op(opMembership, key)},
		"garbage absence": {ProofOps: op(opAbsence, key)},
	}
	for name, r := range cases {
		r := r
		if _, err := checkAnswer(verifier.Digest{}, key, &r); !errors.Is(err, errAnswer) {
			t.Errorf("%s: got %v, want a refusal", name, err)
		}
	}
}
