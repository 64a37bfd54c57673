// The sequential specification the histories are checked against: a map from keys to
// values where get returns the value of the last put (or absent after a delete or before
// any put), put and delete always succeed. The model is partitioned by key (a key-value
// history is linearizable if and only if each key's sub-history is, since operations on
// different keys commute), so a state is one key's register: present or not, and a value.
// Step, Partition and Hash are pure functions, as porcupine requires.

package lincheck

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/anishathalye/porcupine"
)

// input is an operation's call as the model sees it.
type input struct {
	kind    Kind
	key     string
	value   string // put: the value written
	unknown bool   // the outcome is unknown (for descriptions only)
	line    int    // the history line (for descriptions only)
}

// output is a get's result; puts and deletes carry a nil output.
type output struct {
	present bool
	value   string
}

// register is one key's state.
type register struct {
	present bool
	value   string
}

// Model is the key-value specification, partitioned by key.
var Model = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() interface{} { return register{} },
	Step:      step,
	Equal:     func(a, b interface{}) bool { return a.(register) == b.(register) },
	Hash: func(s interface{}) uint64 {
		r := s.(register)
		h := fnv.New64a()
		if r.present {
			h.Write([]byte{1})
			h.Write([]byte(r.value))
		}
		return h.Sum64()
	},
	DescribeOperation: describeOperation,
	DescribeState: func(s interface{}) string {
		r := s.(register)
		if !r.present {
			return "absent"
		}
		return short(r.value)
	},
}

func step(state, in, out interface{}) (bool, interface{}) {
	r, i := state.(register), in.(input)
	switch i.kind {
	case Get:
		o := out.(output)
		return o.present == r.present && (!o.present || o.value == r.value), r
	case Put:
		return true, register{present: true, value: i.value}
	case Delete:
		return true, register{}
	}
	return false, r
}

// partitionByKey splits a history into one sub-history per key, keys in byte order, each
// keeping the history's order of operations.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := make(map[string][]porcupine.Operation)
	for _, op := range history {
		k := op.Input.(input).key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		parts[i] = byKey[k]
	}
	return parts
}

func describeOperation(in, out interface{}) string {
	i := in.(input)
	var s string
	switch i.kind {
	case Get:
		o := out.(output)
		res := "absent"
		if o.present {
			res = short(o.value)
		}
		s = fmt.Sprintf("get(%s) -> %s", short(i.key), res)
	case Put:
		s = fmt.Sprintf("put(%s, %s)", short(i.key), short(i.value))
	case Delete:
		s = fmt.Sprintf("delete(%s)", short(i.key))
	}
	if i.unknown {
		s += " ?"
	}
	return fmt.Sprintf("%s [line %d]", s, i.line)
}

// short renders bytes as hex, cut to 16 digits for the visualisation.
func short(b string) string {
	h := hex.EncodeToString([]byte(b))
	if len(h) > 16 {
		return h[:16] + "…"
	}
	if h == "" {
		return `""`
	}
	return h
}

// Operations turns a history into porcupine operations. Clients get dense ids (in order of
// first appearance), which porcupine's visualisation wants; they play no part in the check.
func Operations(h *History) []porcupine.Operation {
	ids := make(map[uint64]int)
	ops := make([]porcupine.Operation, len(h.Ops))
	for n, op := range h.Ops {
		id, ok := ids[op.Client]
		if !ok {
			id = len(ids)
			ids[op.Client] = id
		}
		in := input{kind: op.Kind, key: op.Key, value: op.Value, unknown: op.Unknown(), line: op.Line}
		var out interface{}
		if op.Kind == Get {
			out = output{present: op.Present, value: op.Value}
		}
		ops[n] = porcupine.Operation{ClientId: id, Input: in, Call: op.Call, Output: out, Return: op.Return}
	}
	return ops
}
