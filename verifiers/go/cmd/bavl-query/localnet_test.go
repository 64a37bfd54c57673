//go:build localnet

// End-to-end tests against a running bavl-abci localnet (scripts/trustless-query.sh
// starts one and runs `go test -tags localnet` with BAVL_LOCALNET_RPC set to three or
// more validators' RPC addresses). The trust root is header 1 as the first validator
// serves it; the queries go to the second (the primary) and the third (the witness).
// Each test writes its own key, so it knows the value the chain holds.
//
// A tampering proxy in front of the primary changes one thing in its answers: the
// value, a byte of the proof, the proof op's type or key, or the app hash of a header;
// every such answer must be refused, and the same proxy without tampering must pass (so
// the refusals are the tampering's doing).

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/libs/log"
	rpchttp "github.com/cometbft/cometbft/rpc/client/http"
)

type localnet struct {
	rpc       []string
	trustHash []byte
}

func setup(t *testing.T) localnet {
	t.Helper()
	env := os.Getenv("BAVL_LOCALNET_RPC")
	rpcs := strings.Split(env, ",")
	if env == "" || len(rpcs) < 3 {
		t.Fatalf("BAVL_LOCALNET_RPC must name 3 or more RPC addresses (run scripts/trustless-query.sh), got %q", env)
	}
	c, err := rpchttp.New(rpcs[0], "/websocket")
	if err != nil {
		t.Fatal(err)
	}
	h := int64(1)
	b, err := c.Block(ctx(t), &h)
	if err != nil {
		t.Fatalf("block 1 from %s: %v", rpcs[0], err)
	}
	return localnet{rpc: rpcs, trustHash: b.BlockID.Hash}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func (n localnet) config(primary string, key []byte) Config {
	return Config{RPC: primary, Witnesses: []string{n.rpc[2]}, TrustHeight: 1,
		TrustHash: n.trustHash, TrustPeriod: 24 * time.Hour, Key: key}
}

// write commits key=value with bavl-abci's transaction format (crates/abci/src/tx.rs:
// 0xB1, one operation, 0x01 set, length-prefixed key and value; both under 128 bytes).
func (n localnet) write(t *testing.T, key, value []byte) {
	t.Helper()
	tx := append([]byte{0xB1, 1, 1, byte(len(key))}, key...)
	tx = append(append(tx, byte(len(value))), value...)
	c, err := rpchttp.New(n.rpc[0], "/websocket")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.BroadcastTxCommit(ctx(t), tx)
	if err != nil || r.CheckTx.Code != 0 || r.TxResult.Code != 0 {
		t.Fatalf("writing %q: %v %+v", key, err, r)
	}
	// The other nodes may not hold that block yet: a query sent to one of them right away
	// would read the state before it (and verify its absence, correctly). Seen in CI on a
	// loaded machine; wait for them.
	for _, addr := range n.rpc[1:] {
		waitHeight(t, addr, r.Height)
	}
}

// waitHeight waits (up to a minute) until the node at addr has committed block h.
func waitHeight(t *testing.T, addr string, h int64) {
	t.Helper()
	c, err := rpchttp.New(addr, "/websocket")
	if err != nil {
		t.Fatal(err)
	}
	c2 := ctx(t)
	for {
		s, err := c.Status(c2)
		if err == nil && s.SyncInfo.LatestBlockHeight >= h {
			return
		}
		select {
		case <-c2.Done():
			t.Fatalf("%s has not committed block %d after a minute (last error: %v)", addr, h, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func fresh(t *testing.T, prefix string) []byte {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte(prefix + hex.EncodeToString(b))
}

func TestQueryVerifiesMembershipAndAbsence(t *testing.T) {
	n := setup(t)
	key, value := fresh(t, "lc-test-"), fresh(t, "value-")
	n.write(t, key, value)
	res, err := Query(ctx(t), n.config(n.rpc[1], key), log.NewNopLogger())
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if !res.Present || !bytes.Equal(res.Value, value) {
		t.Fatalf("got present=%v value=%q, want %q", res.Present, res.Value, value)
	}
	absent := fresh(t, "lc-never-written-")
	res, err = Query(ctx(t), n.config(n.rpc[1], absent), log.NewNopLogger())
	if err != nil {
		t.Fatalf("absent key: %v", err)
	}
	if res.Present || res.Value != nil {
		t.Fatalf("a key never written is reported present: %q", res.Value)
	}
}

func TestWrongTrustRootIsRefused(t *testing.T) {
	n := setup(t)
	cfg := n.config(n.rpc[1], []byte("k"))
	cfg.TrustHash = append([]byte{}, n.trustHash...)
	cfg.TrustHash[0] ^= 1
	if _, err := Query(ctx(t), cfg, log.NewNopLogger()); err == nil {
		t.Fatal("a query from a trust root that is not the chain's was accepted")
	}
}

// tamper edits a JSON-RPC result of one method.
type tamper struct {
	method string
	edit   func(t *testing.T, result map[string]any)
}

func b64(t *testing.T, s any) []byte {
	b, err := base64.StdEncoding.DecodeString(s.(string))
	if err != nil {
		t.Fatalf("base64 %v: %v", s, err)
	}
	return b
}

func response(r map[string]any) map[string]any { return r["response"].(map[string]any) }
func firstOp(r map[string]any) map[string]any {
	return response(r)["proofOps"].(map[string]any)["ops"].([]any)[0].(map[string]any)
}

var tampers = map[string]tamper{
	"value": {"abci_query", func(t *testing.T, r map[string]any) {
		v := b64(t, response(r)["value"])
		v[len(v)-1] ^= 1
		response(r)["value"] = base64.StdEncoding.EncodeToString(v)
	}},
	"proof byte": {"abci_query", func(t *testing.T, r map[string]any) {
		d := b64(t, firstOp(r)["data"])
		d[len(d)/2] ^= 0x10
		firstOp(r)["data"] = base64.StdEncoding.EncodeToString(d)
	}},
	"absence claimed": {"abci_query", func(t *testing.T, r map[string]any) {
		firstOp(r)["type"] = opAbsence
		response(r)["value"] = nil
	}},
	"op for another key": {"abci_query", func(t *testing.T, r map[string]any) {
		firstOp(r)["key"] = base64.StdEncoding.EncodeToString([]byte("another"))
	}},
	// Every header but the trusted one: the header carrying the app hash is the lie.
	"app hash in the header": {"commit", func(t *testing.T, r map[string]any) {
		h := r["signed_header"].(map[string]any)["header"].(map[string]any)
		if h["height"] != "1" {
			h["app_hash"] = strings.Repeat("AB", 32)
		}
	}},
}

// proxy forwards JSON-RPC POSTs to upstream, applying tm to the result of tm.method.
func proxy(t *testing.T, upstream string, tm *tamper, hits *int) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var call struct{ Method string }
		_ = json.Unmarshal(body, &call)
		resp, err := http.Post(upstream, "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if tm != nil && call.Method == tm.method {
			var msg map[string]any
			if err := json.Unmarshal(out, &msg); err == nil && msg["result"] != nil {
				tm.edit(t, msg["result"].(map[string]any))
				out, _ = json.Marshal(msg)
				*hits++
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestTamperedAnswersAreRefused(t *testing.T) {
	n := setup(t)
	key, value := fresh(t, "lc-tamper-"), fresh(t, "value-")
	n.write(t, key, value)
	hits := 0
	honest := proxy(t, n.rpc[1], nil, &hits)
	if _, err := Query(ctx(t), n.config(honest.URL, key), log.NewNopLogger()); err != nil {
		t.Fatalf("through the proxy without tampering: %v", err)
	}
	for name, tm := range tampers {
		tm := tm
		t.Run(name, func(t *testing.T) {
			hits := 0
			p := proxy(t, n.rpc[1], &tm, &hits)
			res, err := Query(ctx(t), n.config(p.URL, key), log.NewNopLogger())
			if hits == 0 {
				t.Fatalf("the proxy never saw a %s call", tm.method)
			}
			if err == nil {
				t.Fatalf("accepted: %+v", res)
			}
			if tm.method == "abci_query" && !errors.Is(err, errAnswer) {
				t.Fatalf("refused, but not as a bad answer: %v", err)
			}
			if tm.method == "commit" && !strings.Contains(err.Error(), "light client: header") {
				t.Fatalf("refused, but not by the light client at the app hash's header: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}
