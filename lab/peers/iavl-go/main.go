// iavl-peer: IAVL v1 (github.com/cosmos/iavl v1.2.4 on goleveldb) replaying a bavl-peers
// block stream (see lab/peers/src/stream.rs for the format). Built and started by
// `bavl-peers run`; prints one JSON line with the fields of bavl_peers::child::ChildReport
// on stdout, progress on stderr.
//
//	iavl-peer -stream FILE -dir DIR [-cache 781250] [-sync=true]
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	dbm "github.com/cosmos/cosmos-db"
	"github.com/cosmos/iavl"
	idb "github.com/cosmos/iavl/db"
)

const (
	format   = 1
	tagPut   = 1
	tagDel   = 2
	keyLen   = 20
	valueLen = 100
	// Initial entries per commit while loading (as the Rust children).
	loadBatch = 100_000
)

type header struct {
	initialKeys, warmupBlocks, blocks, seed uint64
}

type op struct {
	del   bool
	key   []byte
	value []byte
}

type reader struct {
	r           *bufio.Reader
	f           *os.File
	h           header
	initialLeft uint64
	blocksLeft  uint64
}

func openStream(path string) (*reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	var buf [52]byte
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		return nil, fmt.Errorf("reading the stream header: %w", err)
	}
	if string(buf[:8]) != "BAVLPEER" {
		return nil, fmt.Errorf("%s is not a block stream", path)
	}
	le := binary.LittleEndian
	if le.Uint32(buf[8:]) != format || le.Uint32(buf[12:]) != keyLen || le.Uint32(buf[16:]) != valueLen {
		return nil, fmt.Errorf("unsupported stream format or key/value lengths")
	}
	h := header{le.Uint64(buf[20:]), le.Uint64(buf[28:]), le.Uint64(buf[36:]), le.Uint64(buf[44:])}
	return &reader{r: r, f: f, h: h, initialLeft: h.initialKeys, blocksLeft: h.warmupBlocks + h.blocks}, nil
}

func (s *reader) initialBatch(n int) ([]op, error) {
	take := uint64(n)
	if take > s.initialLeft {
		take = s.initialLeft
	}
	ops := make([]op, take)
	for i := range ops {
		b := make([]byte, keyLen+valueLen)
		if _, err := io.ReadFull(s.r, b); err != nil {
			return nil, err
		}
		ops[i] = op{key: b[:keyLen], value: b[keyLen:]}
	}
	s.initialLeft -= take
	return ops, nil
}

func (s *reader) nextBlock() ([]op, bool, error) {
	if s.blocksLeft == 0 {
		return nil, false, nil
	}
	s.blocksLeft--
	var nb [4]byte
	if _, err := io.ReadFull(s.r, nb[:]); err != nil {
		return nil, false, err
	}
	n := binary.LittleEndian.Uint32(nb[:])
	ops := make([]op, n)
	for i := range ops {
		tag, err := s.r.ReadByte()
		if err != nil {
			return nil, false, err
		}
		switch tag {
		case tagPut:
			b := make([]byte, keyLen+valueLen)
			if _, err := io.ReadFull(s.r, b); err != nil {
				return nil, false, err
			}
			ops[i] = op{key: b[:keyLen], value: b[keyLen:]}
		case tagDel:
			b := make([]byte, keyLen)
			if _, err := io.ReadFull(s.r, b); err != nil {
				return nil, false, err
			}
			ops[i] = op{del: true, key: b}
		default:
			return nil, false, fmt.Errorf("unknown operation tag %d", tag)
		}
	}
	return ops, true, nil
}

// rssHwm returns VmRSS and VmHWM in bytes.
func rssHwm() (uint64, uint64) {
	b, _ := os.ReadFile("/proc/self/status")
	field := func(name string) uint64 {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, name) {
				f := strings.Fields(strings.TrimPrefix(l, name))
				if len(f) > 0 {
					v, _ := strconv.ParseUint(f[0], 10, 64)
					return v * 1024
				}
			}
		}
		return 0
	}
	return field("VmRSS:"), field("VmHWM:")
}

// cpuMs returns this process's CPU time (user + system, all threads) in milliseconds,
// from /proc/self/stat (10 ms ticks), as the Rust children measure it.
func cpuMs() float64 {
	b, _ := os.ReadFile("/proc/self/stat")
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return float64(u+st) * 10
}

type report struct {
	Store             string         `json:"store"`
	LoadS             float64        `json:"load_s"`
	LoadKeys          uint64         `json:"load_keys"`
	WarmupMs          []float64      `json:"warmup_ms"`
	BlockMs           []float64      `json:"block_ms"`
	BlockCPUMs        []float64      `json:"block_cpu_ms"`
	OpsMeasured       uint64         `json:"ops_measured"`
	HwmAfterLoadBytes uint64         `json:"hwm_after_load_bytes"`
	HwmBytes          uint64         `json:"hwm_bytes"`
	RssBytes          uint64         `json:"rss_bytes"`
	Keys              uint64         `json:"keys"`
	Digest            string         `json:"digest"`
	VerifyS           float64        `json:"verify_s"`
	CPUSTotal         float64        `json:"cpu_s_total"`
	Extra             map[string]any `json:"extra"`
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "iavl-peer: %v\n", err)
	os.Exit(1)
}

// apply applies a block's operations in order and saves the version.
func apply(tree *iavl.MutableTree, ops []op) error {
	for _, o := range ops {
		if o.del {
			if _, _, err := tree.Remove(o.key); err != nil {
				return err
			}
		} else if _, err := tree.Set(o.key, o.value); err != nil {
			return err
		}
	}
	_, _, err := tree.SaveVersion()
	return err
}

func main() {
	stream := flag.String("stream", "", "block stream file written by bavl-peers")
	dir := flag.String("dir", "", "directory of the goleveldb database (created)")
	cache := flag.Int("cache", 781250, "IAVL node cache size (Cosmos SDK default iavl-cache-size)")
	sync := flag.Bool("sync", true, "fsync every SaveVersion (iavl.SyncOption)")
	flag.Parse()
	if *stream == "" || *dir == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fail(err)
	}
	ldb, err := dbm.NewGoLevelDB("iavl", *dir, nil)
	if err != nil {
		fail(err)
	}
	tree := iavl.NewMutableTree(idb.NewWrapper(ldb), *cache, false, iavl.NewNopLogger(), iavl.SyncOption(*sync))

	s, err := openStream(*stream)
	if err != nil {
		fail(err)
	}
	rep := report{Store: "iavl", WarmupMs: []float64{}, BlockMs: []float64{}, BlockCPUMs: []float64{}}
	t := time.Now()
	for {
		batch, err := s.initialBatch(loadBatch)
		if err != nil {
			fail(err)
		}
		if len(batch) == 0 {
			break
		}
		if err := apply(tree, batch); err != nil {
			fail(err)
		}
		rep.LoadKeys += uint64(len(batch))
		fmt.Fprintf(os.Stderr, "[iavl] loaded %d/%d keys (%.1f s)\n", rep.LoadKeys, s.h.initialKeys, time.Since(t).Seconds())
	}
	rep.LoadS = time.Since(t).Seconds()
	_, rep.HwmAfterLoadBytes = rssHwm()
	total := s.h.warmupBlocks + s.h.blocks
	var i uint64
	for {
		ops, ok, err := s.nextBlock()
		if err != nil {
			fail(err)
		}
		if !ok {
			break
		}
		c := cpuMs()
		t := time.Now()
		if err := apply(tree, ops); err != nil {
			fail(err)
		}
		ms := float64(time.Since(t).Nanoseconds()) / 1e6
		cpu := cpuMs() - c
		i++
		warm := i <= s.h.warmupBlocks
		note := ""
		if warm {
			rep.WarmupMs = append(rep.WarmupMs, ms)
			note = " (warm-up)"
		} else {
			rep.BlockMs = append(rep.BlockMs, ms)
			rep.BlockCPUMs = append(rep.BlockCPUMs, cpu)
			rep.OpsMeasured += uint64(len(ops))
		}
		fmt.Fprintf(os.Stderr, "[iavl] block %d/%d%s: %d ops in %.1f ms\n", i, total, note, len(ops), ms)
	}
	if i != total {
		fail(fmt.Errorf("stream ended after %d of %d blocks", i, total))
	}
	rep.RssBytes, rep.HwmBytes = rssHwm()
	s.f.Close()

	// Read back every key the stream ever wrote.
	t = time.Now()
	s, err = openStream(*stream)
	if err != nil {
		fail(err)
	}
	var keys [][keyLen]byte
	for {
		batch, err := s.initialBatch(loadBatch)
		if err != nil {
			fail(err)
		}
		if len(batch) == 0 {
			break
		}
		for _, o := range batch {
			keys = append(keys, [keyLen]byte(o.key))
		}
	}
	for {
		ops, ok, err := s.nextBlock()
		if err != nil {
			fail(err)
		}
		if !ok {
			break
		}
		for _, o := range ops {
			if !o.del {
				keys = append(keys, [keyLen]byte(o.key))
			}
		}
	}
	s.f.Close()
	slices.SortFunc(keys, func(a, b [keyLen]byte) int { return bytes.Compare(a[:], b[:]) })
	keys = slices.Compact(keys)
	h := sha256.New()
	for _, k := range keys {
		v, err := tree.Get(k[:])
		if err != nil {
			fail(err)
		}
		if v != nil {
			h.Write(k[:])
			h.Write(v)
			rep.Keys++
		}
	}
	rep.Digest = hex.EncodeToString(h.Sum(nil))
	rep.VerifyS = time.Since(t).Seconds()
	fmt.Fprintf(os.Stderr, "[iavl] read back %d of %d keys ever written (%.1f s)\n", rep.Keys, len(keys), rep.VerifyS)
	version := tree.Version()
	rep.Extra = map[string]any{
		"version":    version,
		"go":         runtime.Version(),
		"tree_size":  tree.Size(),
		"cache_size": *cache,
		"sync":       *sync,
	}
	if err := ldb.Close(); err != nil {
		fail(err)
	}
	rep.CPUSTotal = cpuMs() / 1e3
	out, err := json.Marshal(rep)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}
