// query.go: one trustless query. The header that carries the app hash is verified with
// CometBFT's light client (github.com/cometbft/cometbft/light, skipping verification
// from a trusted header, cross-checked against witnesses); the value and its bavl proof
// come from an ABCI query and are checked against that header's app hash.

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	verifier "bavl.dev/verifier"
	dbm "github.com/cometbft/cometbft-db"
	"github.com/cometbft/cometbft/libs/log"
	"github.com/cometbft/cometbft/light"
	"github.com/cometbft/cometbft/light/provider"
	lighthttp "github.com/cometbft/cometbft/light/provider/http"
	lightdb "github.com/cometbft/cometbft/light/store/db"
	rpcclient "github.com/cometbft/cometbft/rpc/client"
	rpchttp "github.com/cometbft/cometbft/rpc/client/http"
)

// Config is one query: where to ask, what to trust, which key.
type Config struct {
	RPC         string   // the primary: light blocks and the ABCI query
	Witnesses   []string // cross-check the primary's headers (at least one)
	ChainID     string   // "" = the primary's (the trusted hash pins it anyway)
	TrustHeight int64    // the trust root: a header height ...
	TrustHash   []byte   // ... and its hash, obtained out of band
	TrustPeriod time.Duration
	Key         []byte
	Height      int64 // the state after this block; 0 = the latest the node holds
}

// Result is a verified answer and where it was read.
type Result struct {
	Answer
	Height  int64  // the state after block Height ...
	AppHash []byte // ... whose root header Height+1 carries
}

// errNode marks a failure to reach or use the node (not a verification failure).
var errNode = errors.New("node")

// Query runs the light client to the header that commits to the queried state and checks
// the ABCI query's answer against its app hash.
func Query(ctx context.Context, cfg Config, logger log.Logger) (*Result, error) {
	if len(cfg.Witnesses) == 0 {
		return nil, errors.New("at least one witness is needed (the light client cross-checks the primary)")
	}
	client, err := rpchttp.New(cfg.RPC, "/websocket")
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errNode, cfg.RPC, err)
	}
	if cfg.ChainID == "" {
		st, err := client.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: status of %s: %v", errNode, cfg.RPC, err)
		}
		cfg.ChainID = st.NodeInfo.Network
	}
	lc, err := newLightClient(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	res, err := client.ABCIQueryWithOptions(ctx, "/key", cfg.Key,
		rpcclient.ABCIQueryOptions{Height: cfg.Height, Prove: true})
	if err != nil {
		return nil, fmt.Errorf("%w: abci_query: %v", errNode, err)
	}
	r := &res.Response
	if r.Code != 0 {
		return nil, fmt.Errorf("%w: abci_query answered code %d: %s", errNode, r.Code, r.Log)
	}
	if r.Height <= 0 || (cfg.Height != 0 && r.Height != cfg.Height) {
		return nil, fmt.Errorf("%w: the answer is for height %d, asked %d", errAnswer, r.Height, cfg.Height)
	}
	// The state after block h is committed to by the app hash of header h+1.
	if err := waitForHeight(ctx, client, r.Height+1); err != nil {
		return nil, err
	}
	lb, err := lc.VerifyLightBlockAtHeight(ctx, r.Height+1, time.Now())
	if err != nil {
		return nil, fmt.Errorf("light client: header %d: %w", r.Height+1, err)
	}
	var root verifier.Digest
	if len(lb.Header.AppHash) != len(root) {
		return nil, fmt.Errorf("header %d carries a %d-byte app hash, not a bavl root", lb.Height, len(lb.Header.AppHash))
	}
	copy(root[:], lb.Header.AppHash)
	ans, err := checkAnswer(root, cfg.Key, r)
	if err != nil {
		return nil, err
	}
	return &Result{Answer: ans, Height: r.Height, AppHash: lb.Header.AppHash}, nil
}

func newLightClient(ctx context.Context, cfg Config, logger log.Logger) (*light.Client, error) {
	primary, err := lighthttp.New(cfg.ChainID, cfg.RPC)
	if err != nil {
		return nil, fmt.Errorf("%w: primary %s: %v", errNode, cfg.RPC, err)
	}
	witnesses := make([]provider.Provider, 0, len(cfg.Witnesses))
	for _, w := range cfg.Witnesses {
		p, err := lighthttp.New(cfg.ChainID, w)
		if err != nil {
			return nil, fmt.Errorf("%w: witness %s: %v", errNode, w, err)
		}
		witnesses = append(witnesses, p)
	}
	lc, err := light.NewClient(ctx, cfg.ChainID,
		light.TrustOptions{Period: cfg.TrustPeriod, Height: cfg.TrustHeight, Hash: cfg.TrustHash},
		primary, witnesses, lightdb.New(dbm.NewMemDB(), cfg.ChainID),
		light.SkippingVerification(light.DefaultTrustLevel),
		light.MaxRetryAttempts(3), light.Logger(logger))
	if err != nil {
		return nil, fmt.Errorf("light client: from the trusted header %d: %w", cfg.TrustHeight, err)
	}
	return lc, nil
}

// waitForHeight waits (within ctx) until the node has committed block h.
func waitForHeight(ctx context.Context, client *rpchttp.HTTP, h int64) error {
	for {
		st, err := client.Status(ctx)
		if err != nil {
			return fmt.Errorf("%w: status: %v", errNode, err)
		}
		if st.SyncInfo.LatestBlockHeight >= h {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: header %d did not appear: %v", errNode, h, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
