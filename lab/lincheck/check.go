// Checking a history: it is split by key with Model.Partition and each key's sub-history is
// checked by porcupine, several keys at once, all against one deadline. A key is a
// violation only when porcupine proves its sub-history has no linearization (Illegal); a
// key whose check ran out of time, or never started because the deadline had passed, is
// unknown, never ok.

package lincheck

import (
	"encoding/hex"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Report is the verdict on one history.
type Report struct {
	Name        string
	Operations  int // checked operations (dropped gets excluded)
	UnknownOps  int // puts and deletes with an unknown outcome
	DroppedGets int
	Keys        int
	Violations  []string // keys (hex) with no linearization, in byte order
	UnknownKeys []string // keys (hex) not decided before the deadline, in byte order
}

// Linearizable reports whether the whole history was proved linearizable.
func (r *Report) Linearizable() bool { return len(r.Violations) == 0 && len(r.UnknownKeys) == 0 }

// Check checks h, every key before deadline, on up to workers keys at once (0: one per
// CPU).
func Check(h *History, deadline time.Time, workers int) *Report {
	rep := &Report{Name: h.Name, Operations: len(h.Ops), DroppedGets: h.DroppedGets}
	for _, op := range h.Ops {
		if op.Unknown() {
			rep.UnknownOps++
		}
	}
	parts := Model.Partition(Operations(h))
	rep.Keys = len(parts)
	results := make([]porcupine.CheckResult, len(parts))
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(workers, len(parts)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = checkPart(parts[i], deadline)
			}
		}()
	}
	for i := range parts {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, res := range results {
		key := hex.EncodeToString([]byte(parts[i][0].Input.(input).key))
		switch res {
		case porcupine.Illegal:
			rep.Violations = append(rep.Violations, key)
		case porcupine.Unknown:
			rep.UnknownKeys = append(rep.UnknownKeys, key)
		}
	}
	return rep
}

// checkPart checks one key. porcupine reads a timeout of 0 as "no limit", so a deadline
// already passed is answered Unknown here without calling it.
func checkPart(part []porcupine.Operation, deadline time.Time) porcupine.CheckResult {
	left := time.Until(deadline)
	if left <= 0 {
		return porcupine.Unknown
	}
	return porcupine.CheckOperationsTimeout(Model, part, left)
}

// MaxHTMLKeys bounds how many violating keys WriteHTML draws (the page grows with each).
const MaxHTMLKeys = 8

// WriteHTML writes porcupine's visualisation of the given keys (hex, as in a Report's
// Violations; at most MaxHTMLKeys of them) of h: for each key its operations on a time
// line and the longest partial linearizations the checker found. It re-checks those keys
// with the time left before deadline and fails if that runs out.
func WriteHTML(w io.Writer, h *History, keys []string, deadline time.Time) error {
	if len(keys) > MaxHTMLKeys {
		keys = keys[:MaxHTMLKeys]
	}
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		b, err := hex.DecodeString(k)
		if err != nil {
			return fmt.Errorf("key %q: %v", k, err)
		}
		want[string(b)] = true
	}
	var ops []porcupine.Operation
	for _, op := range Operations(h) {
		if want[op.Input.(input).key] {
			ops = append(ops, op)
		}
	}
	left := time.Until(deadline)
	if left <= 0 {
		return fmt.Errorf("no time left to draw the visualisation")
	}
	res, info := porcupine.CheckOperationsVerbose(Model, ops, left)
	if res == porcupine.Unknown {
		return fmt.Errorf("re-checking the keys to draw them timed out")
	}
	return porcupine.Visualize(Model, info, w)
}
