// Package lincheck checks histories of bavl's key-value cluster for linearizability with
// porcupine (github.com/anishathalye/porcupine).
//
// This file reads a history: JSON lines, one operation per line, in the format of
// docs/lincheck.md. Everything read is untrusted: a line longer than Limits.MaxLine, more
// than Limits.MaxOps operations, a field that is missing, unknown, of the wrong type or
// malformed hex, a timestamp out of range or a return before its call is an *InputError
// naming the file and line; nothing is allocated beyond those bounds. A get whose outcome
// is unknown ("return": null) has no effect on the store and constrains nothing, so it is
// counted and dropped; a put or delete whose outcome is unknown is kept with Return =
// UnknownReturn (after every other operation), which lets the checker place it anywhere
// after its call, or nowhere.
package lincheck

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// Kind is the kind of a key-value operation.
type Kind uint8

// The operations of the key-value store.
const (
	Get Kind = iota + 1
	Put
	Delete
)

func (k Kind) String() string {
	switch k {
	case Get:
		return "get"
	case Put:
		return "put"
	case Delete:
		return "delete"
	}
	return "invalid"
}

// UnknownReturn is the return time given to an operation whose outcome is unknown: later
// than any timestamp a history may carry (timestamps are below it, checked on reading).
const UnknownReturn int64 = math.MaxInt64

// Op is one validated operation of a history.
type Op struct {
	Client uint64
	Kind   Kind
	Key    string // the key's bytes (decoded from hex)
	// Value: for a get, the value read (when Present); for a put, the value written.
	Value string
	// Present: for a get, whether a value was read (false: the key was absent); true for a
	// put; false for a delete.
	Present bool
	Call    int64 // ns
	Return  int64 // ns; UnknownReturn when the outcome is unknown
	Line    int   // 1-based line of the history it came from
}

// Unknown reports whether the operation's outcome is unknown.
func (o Op) Unknown() bool { return o.Return == UnknownReturn }

// History is one recorded run: its operations in file order.
type History struct {
	Name string
	Ops  []Op
	// DroppedGets counts gets with an unknown outcome, which were dropped.
	DroppedGets int
}

// Limits bound what a history may make the reader allocate.
type Limits struct {
	MaxLine int // bytes per line, the ending "\n" or "\r\n" excluded
	MaxOps  int // operations per history, dropped gets included
}

// DefaultLimits: 1 MiB lines (a key and a value of up to ~512 KiB each in hex), 5 million
// operations per history.
func DefaultLimits() Limits { return Limits{MaxLine: 1 << 20, MaxOps: 5_000_000} }

// InputError is a bad history: where and why.
type InputError struct {
	Name string
	Line int // 0 when the error is not about one line
	Msg  string
}

func (e *InputError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.Name, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Msg)
}

// ReadHistory reads and validates a whole history from r. name is used in errors only.
// Lines holding only white space are skipped. An I/O error is returned as is; anything
// wrong with the content is an *InputError.
func ReadHistory(name string, r io.Reader, lim Limits) (*History, error) {
	if lim.MaxLine <= 0 || lim.MaxOps <= 0 {
		return nil, fmt.Errorf("lincheck: limits must be positive (got %+v)", lim)
	}
	h := &History{Name: name}
	sc := bufio.NewScanner(r)
	// The scanner's buffer may grow to MaxLine+2 bytes: the line and a "\r\n" after it.
	sc.Buffer(make([]byte, 0, min(64<<10, lim.MaxLine+2)), lim.MaxLine+2)
	line, seen := 0, 0
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if len(text) > lim.MaxLine {
			return nil, &InputError{name, line, fmt.Sprintf("line longer than %d bytes", lim.MaxLine)}
		}
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		seen++
		if seen > lim.MaxOps {
			return nil, &InputError{name, line, fmt.Sprintf("more than %d operations", lim.MaxOps)}
		}
		op, keep, err := ParseLine(text)
		if err != nil {
			return nil, &InputError{name, line, err.Error()}
		}
		op.Line = line
		if keep {
			h.Ops = append(h.Ops, op)
		} else {
			h.DroppedGets++
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &InputError{name, line + 1, fmt.Sprintf("line longer than %d bytes", lim.MaxLine)}
		}
		return nil, err
	}
	return h, nil
}

// fieldNames are the fields of a line, all required, matched exactly (encoding/json's
// struct decoding would also take "Client" or a second "client").
var fieldNames = [...]string{"client", "op", "key", "value", "call", "return"}

// splitFields reads one JSON object whose members are exactly fieldNames, each once, and
// nothing after it; the values are returned raw, in fieldNames' order.
func splitFields(line []byte) ([len(fieldNames)]json.RawMessage, error) {
	var raw [len(fieldNames)]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return raw, errors.New("not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return raw, fmt.Errorf("not a valid JSON object: %v", err)
		}
		name, _ := tok.(string)
		i := slices.Index(fieldNames[:], name)
		if i < 0 {
			return raw, fmt.Errorf("unknown field %s", clip([]byte(fmt.Sprintf("%q", name))))
		}
		if raw[i] != nil {
			return raw, fmt.Errorf("field %q given twice", name)
		}
		if err := dec.Decode(&raw[i]); err != nil {
			return raw, fmt.Errorf("field %q: %v", name, err)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return raw, errors.New("not a valid JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return raw, errors.New("trailing data after the operation object")
	}
	for i, v := range raw {
		if v == nil {
			return raw, fmt.Errorf(`missing field %q: each line needs "client", "op", "key", "value", "call" and "return"`, fieldNames[i])
		}
	}
	return raw, nil
}

// ParseLine decodes and validates one line. keep is false for a get whose outcome is
// unknown (valid, but dropped: it constrains nothing).
func ParseLine(line []byte) (op Op, keep bool, err error) {
	raw, err := splitFields(line)
	if err != nil {
		return Op{}, false, err
	}
	client, kind, key, value, call, ret := raw[0], raw[1], raw[2], raw[3], raw[4], raw[5]
	// json.Unmarshal leaves its target untouched on null: null is checked first.
	if isNull(client) || json.Unmarshal(client, &op.Client) != nil {
		return Op{}, false, fmt.Errorf("client %s: want an unsigned integer", clip(client))
	}
	var name string
	if isNull(kind) || json.Unmarshal(kind, &name) != nil {
		return Op{}, false, fmt.Errorf("op %s: want \"get\", \"put\" or \"delete\"", clip(kind))
	}
	switch name {
	case "get":
		op.Kind = Get
	case "put":
		op.Kind = Put
	case "delete":
		op.Kind = Delete
	default:
		return Op{}, false, fmt.Errorf("op %s: want \"get\", \"put\" or \"delete\"", clip(kind))
	}
	if op.Key, err = decodeHex("key", key); err != nil {
		return Op{}, false, err
	}
	if op.Call, op.Return, err = decodeTimes(call, ret); err != nil {
		return Op{}, false, err
	}
	if err = decodeValue(&op, value); err != nil {
		return Op{}, false, err
	}
	return op, !(op.Kind == Get && op.Unknown()), nil
}

func decodeTimes(callRaw, ret json.RawMessage) (int64, int64, error) {
	var call uint64
	if isNull(callRaw) || json.Unmarshal(callRaw, &call) != nil {
		return 0, 0, fmt.Errorf("call %s: want an unsigned integer of nanoseconds", clip(callRaw))
	}
	if call >= uint64(UnknownReturn) {
		return 0, 0, fmt.Errorf("call %d: must be below 2^63-1", call)
	}
	if isNull(ret) {
		return int64(call), UnknownReturn, nil
	}
	var r uint64
	if json.Unmarshal(ret, &r) != nil {
		return 0, 0, fmt.Errorf("return %s: want null or an unsigned integer of nanoseconds", clip(ret))
	}
	if r >= uint64(UnknownReturn) {
		return 0, 0, fmt.Errorf("return %d: must be below 2^63-1", r)
	}
	if r < call {
		return 0, 0, fmt.Errorf("return %d is before call %d", r, call)
	}
	return int64(call), int64(r), nil
}

// decodeValue checks "value" against the kind: a put writes a value, a delete has none, a
// get read one or found the key absent (null), and a get with unknown outcome read nothing.
func decodeValue(op *Op, v json.RawMessage) error {
	null := isNull(v)
	switch {
	case op.Kind == Put && null:
		return errors.New("put: value must be a hex string, not null")
	case op.Kind == Delete && !null:
		return errors.New("delete: value must be null")
	case op.Kind == Get && op.Unknown() && !null:
		return errors.New("get with unknown outcome (return null): value must be null")
	case null:
		return nil
	}
	val, err := decodeHex("value", v)
	if err != nil {
		return err
	}
	op.Value, op.Present = val, true
	return nil
}

// decodeHex decodes a JSON string of hex digits (either case; "" is the empty string).
func decodeHex(field string, v json.RawMessage) (string, error) {
	var s string
	if isNull(v) || json.Unmarshal(v, &s) != nil {
		return "", fmt.Errorf("%s: want a string of hex digits", field)
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("%s: not hex: %v", field, err)
	}
	return string(b), nil
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// clip shortens raw input quoted in an error message to 40 bytes.
func clip(v []byte) string {
	if len(v) > 40 {
		return string(v[:40]) + "..."
	}
	return string(v)
}
