// Command bavl-query reads one key of a bavl-abci chain without trusting the node it
// asks: CometBFT's light client verifies the header whose app hash commits to the state,
// and the Go verifier checks the value's bavl proof against that app hash.
//
// The trust root is a header the caller already trusts (--trust-height, --trust-hash),
// obtained out of band as for any CometBFT light client or state sync: from a block
// explorer, a friend's node, or (scripts/trustless-query.sh on the localnet) another
// validator than the ones queried. Everything else, every header, validator set and
// answer, comes from untrusted nodes and is verified.
//
// Exit status: 0 verified, 1 refused or failed (the reason on stderr), 2 usage.
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cometbft/cometbft/libs/log"
)

const usage = `bavl-query: a trustless read of one key of a bavl-abci chain

Usage:
  bavl-query --rpc URL --witness URL --trust-height H --trust-hash HEX --key HEX [options]

It (1) starts CometBFT's light client from the trusted header (H, HEX), (2) asks the
--rpc node for the key with abci_query path "/key" and prove=true, (3) verifies header
h+1 (h = the height the answer reads: the state after block h is committed to by the app
hash of header h+1) by skipping verification, cross-checked against every --witness,
and (4) verifies the answer's bavl membership or absence proof against that app hash.
Output on success (stdout):
  height=h  header=h+1  app_hash=HEX  key=HEX  value=HEX | absent  keys=N  verified

Options:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type witnessList []string

func (w *witnessList) String() string { return strings.Join(*w, ",") }
func (w *witnessList) Set(s string) error {
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			*w = append(*w, u)
		}
	}
	return nil
}

func parse(args []string, stderr io.Writer) (Config, time.Duration, bool, error) {
	fs := flag.NewFlagSet("bavl-query", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	var cfg Config
	var witnesses witnessList
	var key, trustHash string
	fs.StringVar(&cfg.RPC, "rpc", "", "the primary node's RPC address (light blocks and the query), e.g. http://127.0.0.1:26657")
	fs.Var(&witnesses, "witness", "a witness node's RPC address, repeatable or comma-separated (at least one)")
	fs.StringVar(&key, "key", "", "the key, hex")
	fs.Int64Var(&cfg.TrustHeight, "trust-height", 0, "height of the trusted header (the trust root)")
	fs.StringVar(&trustHash, "trust-hash", "", "hash of the trusted header, hex (the trust root)")
	fs.DurationVar(&cfg.TrustPeriod, "trust-period", 168*time.Hour, "how long a trusted header may be used (below the chain's unbonding period)")
	fs.StringVar(&cfg.ChainID, "chain-id", "", "the chain ID (default: the primary's; the trusted hash pins it anyway)")
	fs.Int64Var(&cfg.Height, "height", 0, "read the state after this block (default: the latest the node holds)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	verbose := fs.Bool("v", false, "log the light client's steps to stderr")
	if err := fs.Parse(args); err != nil {
		return cfg, 0, false, err
	}
	cfg.Witnesses = witnesses
	var err error
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case cfg.RPC == "":
		err = errors.New("--rpc is required")
	case len(cfg.Witnesses) == 0:
		err = errors.New("--witness is required (the light client cross-checks the primary against it)")
	case cfg.TrustHeight <= 0:
		err = errors.New("--trust-height is required (a positive height)")
	case cfg.TrustPeriod <= 0:
		err = errors.New("--trust-period must be positive")
	case cfg.Height < 0:
		err = errors.New("--height must not be negative")
	}
	if err == nil {
		cfg.TrustHash, err = decodeHex("--trust-hash", trustHash, 32, 32)
	}
	if err == nil {
		cfg.Key, err = decodeHex("--key", key, 1, 1024)
	}
	return cfg, *timeout, *verbose, err
}

func decodeHex(name, s string, min, max int) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: not hex: %v", name, err)
	}
	if len(b) < min || len(b) > max {
		return nil, fmt.Errorf("%s: %d bytes, want %d..=%d", name, len(b), min, max)
	}
	return b, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, timeout, verbose, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bavl-query: %v (see --help)\n", err)
		return 2
	}
	logger := log.NewNopLogger()
	if verbose {
		logger = log.NewTMLogger(log.NewSyncWriter(stderr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := Query(ctx, cfg, logger)
	if err != nil {
		fmt.Fprintf(stderr, "bavl-query: NOT VERIFIED: %v\n", err)
		return 1
	}
	value := "absent"
	if res.Present {
		value = hex.EncodeToString(res.Value)
	}
	fmt.Fprintf(stdout, "height=%d\nheader=%d\napp_hash=%X\nkey=%x\nvalue=%s\nkeys=%d\nverified\n",
		res.Height, res.Height+1, res.AppHash, cfg.Key, value, res.KeyCount)
	return 0
}
