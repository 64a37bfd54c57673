package lincheck

// Generated histories: concurrent clients (goroutines) drive an in-memory key-value store
// and record real call and return times, exactly as a cluster client would, in the JSON
// lines format; the history is then read back and checked. A correct store must pass; a
// store with a deliberately injected bug must be caught.

import (
	"encoding/hex"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"
)

type store interface {
	get(key string) (string, bool)
	put(key, value string)
	del(key string)
}

// correctKV serialises every operation under one mutex: linearizable by construction.
type correctKV struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *correctKV) get(k string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	return v, ok
}
func (s *correctKV) put(k, v string) { s.mu.Lock(); s.m[k] = v; s.mu.Unlock() }
func (s *correctKV) del(k string)    { s.mu.Lock(); delete(s.m, k); s.mu.Unlock() }

// staleReplicaKV (bug): writes go to a primary; reads are served from a replica copy that
// applies the writes only once `lag` newer ones are waiting, like a follower read without a
// read index.
type staleReplicaKV struct {
	mu      sync.Mutex
	primary map[string]string
	replica map[string]string
	pending []write
	lag     int
}

type write struct {
	key, value string
	present    bool
}

func (s *staleReplicaKV) get(k string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.replica[k]
	return v, ok
}

func (s *staleReplicaKV) apply(w write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.to(s.primary)
	s.pending = append(s.pending, w)
	for len(s.pending) > s.lag {
		s.pending[0].to(s.replica)
		s.pending = s.pending[1:]
	}
}

func (w write) to(m map[string]string) {
	if w.present {
		m[w.key] = w.value
	} else {
		delete(m, w.key)
	}
}
func (s *staleReplicaKV) put(k, v string) { s.apply(write{k, v, true}) }
func (s *staleReplicaKV) del(k string)    { s.apply(write{k, "", false}) }

// lostWriteKV (bug): every `every`-th put is acknowledged but never applied.
type lostWriteKV struct {
	correctKV
	n, every int
}

func (s *lostWriteKV) put(k, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.n%s.every != 0 {
		s.m[k] = v
	}
}

// workload: clients × ops operations on `keys` keys; unknown is the chance that an
// operation's outcome is lost (the client "times out": a put or delete then takes effect
// or not, at random, and its return is recorded as null).
type workload struct {
	clients, ops, keys int
	unknown            float64
}

// run drives s and returns the recorded history as JSON lines.
func (w workload) run(s store, seed int64) string {
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	lines := make([][]string, w.clients)
	var wg sync.WaitGroup
	for c := 0; c < w.clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed*1000 + int64(c)))
			for i := 0; i < w.ops; i++ {
				lines[c] = append(lines[c], w.one(s, rng, c, i, now))
				if rng.Intn(4) == 0 {
					time.Sleep(time.Duration(rng.Intn(20)) * time.Microsecond)
				}
			}
		}(c)
	}
	wg.Wait()
	var all []string
	for _, ls := range lines {
		all = append(all, ls...)
	}
	return strings.Join(all, "\n") + "\n"
}

// one performs and records one operation of client c.
func (w workload) one(s store, rng *rand.Rand, c, i int, now func() int64) string {
	key := fmt.Sprintf("key-%d", rng.Intn(w.keys))
	lost := rng.Float64() < w.unknown
	applies := !lost || rng.Intn(2) == 0
	kind, val := "get", "null"
	call := now()
	switch r := rng.Intn(100); {
	case r < 45:
		v, ok := s.get(key)
		if ok && !lost {
			val = fmt.Sprintf("%q", hex.EncodeToString([]byte(v)))
		}
	case r < 90:
		kind = "put"
		v := fmt.Sprintf("c%d-%d", c, i) // every value written once
		val = fmt.Sprintf("%q", hex.EncodeToString([]byte(v)))
		if applies {
			s.put(key, v)
		}
	default:
		kind = "delete"
		if applies {
			s.del(key)
		}
	}
	ret := fmt.Sprint(now())
	if lost {
		ret = "null"
	}
	return fmt.Sprintf(`{"client":%d,"op":%q,"key":%q,"value":%s,"call":%d,"return":%s}`,
		c, kind, hex.EncodeToString([]byte(key)), val, call, ret)
}

func generated(t *testing.T, s store, w workload, seed int64) *Report {
	t.Helper()
	text := w.run(s, seed)
	h, err := ReadHistory(fmt.Sprintf("seed-%d", seed), strings.NewReader(text), DefaultLimits())
	if err != nil {
		t.Fatalf("the generated history does not read back: %v", err)
	}
	if got := len(h.Ops) + h.DroppedGets; got != w.clients*w.ops {
		t.Fatalf("history holds %d operations, want %d", got, w.clients*w.ops)
	}
	rep := Check(h, time.Now().Add(60*time.Second), 0)
	if len(rep.UnknownKeys) != 0 {
		t.Fatalf("seed %d: check undecided within 60 s on keys %v", seed, rep.UnknownKeys)
	}
	return rep
}

var defaultWorkload = workload{clients: 6, ops: 300, keys: 5, unknown: 0.03}

func TestGeneratedCorrectKVIsLinearizable(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		rep := generated(t, &correctKV{m: map[string]string{}}, defaultWorkload, seed)
		if !rep.Linearizable() {
			t.Fatalf("seed %d: a correct store was reported non-linearizable on keys %v", seed, rep.Violations)
		}
		if rep.UnknownOps == 0 || rep.DroppedGets == 0 {
			t.Fatalf("seed %d: the workload recorded no unknown outcomes (%d, %d)", seed, rep.UnknownOps, rep.DroppedGets)
		}
	}
}

func TestGeneratedStaleReplicaIsCaught(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		s := &staleReplicaKV{primary: map[string]string{}, replica: map[string]string{}, lag: 3}
		if rep := generated(t, s, defaultWorkload, seed); len(rep.Violations) == 0 {
			t.Fatalf("seed %d: reads from a replica lagging 3 writes were not caught", seed)
		}
	}
}

func TestGeneratedLostWriteIsCaught(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		s := &lostWriteKV{correctKV: correctKV{m: map[string]string{}}, every: 50}
		if rep := generated(t, s, defaultWorkload, seed); len(rep.Violations) == 0 {
			t.Fatalf("seed %d: acknowledged puts dropped (1 in 50) were not caught", seed)
		}
	}
}
