package lincheck

import (
	"errors"
	"strings"
	"testing"
)

func TestParseLineAccepts(t *testing.T) {
	op, keep, err := ParseLine([]byte(`{"client":7,"op":"put","key":"6B31","value":"","call":5,"return":9}`))
	if err != nil || !keep {
		t.Fatalf("valid put refused: %v", err)
	}
	want := Op{Client: 7, Kind: Put, Key: "k1", Value: "", Present: true, Call: 5, Return: 9}
	if op != want {
		t.Fatalf("got %+v, want %+v", op, want)
	}
	op, keep, err = ParseLine([]byte(` {"return":null,"call":3,"value":null,"key":"","op":"delete","client":0} `))
	if err != nil || !keep || !op.Unknown() || op.Present || op.Kind != Delete {
		t.Fatalf("unknown delete: %+v %v %v", op, keep, err)
	}
	_, keep, err = ParseLine([]byte(`{"client":1,"op":"get","key":"00","value":null,"call":3,"return":null}`))
	if err != nil || keep {
		t.Fatalf("a get with unknown outcome must be valid and dropped: keep %v, %v", keep, err)
	}
	op, _, err = ParseLine([]byte(`{"client":1,"op":"get","key":"00","value":null,"call":3,"return":3}`))
	if err != nil || op.Present || op.Unknown() {
		t.Fatalf("get of an absent key: %+v %v", op, err)
	}
}

func TestParseLineRejects(t *testing.T) {
	cases := map[string]string{
		"not json":           `put k1 1`,
		"array":              `[1,2]`,
		"unknown field":      `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":2,"extra":1}`,
		"missing return":     `{"client":1,"op":"put","key":"00","value":"01","call":1}`,
		"missing value":      `{"client":1,"op":"delete","key":"00","call":1,"return":2}`,
		"missing client":     `{"op":"put","key":"00","value":"01","call":1,"return":2}`,
		"missing key":        `{"client":1,"op":"put","value":"01","call":1,"return":2}`,
		"null key":           `{"client":1,"op":"put","key":null,"value":"01","call":1,"return":2}`,
		"bad op":             `{"client":1,"op":"cas","key":"00","value":"01","call":1,"return":2}`,
		"odd hex key":        `{"client":1,"op":"put","key":"0","value":"01","call":1,"return":2}`,
		"non-hex value":      `{"client":1,"op":"put","key":"00","value":"zz","call":1,"return":2}`,
		"value not string":   `{"client":1,"op":"put","key":"00","value":1,"call":1,"return":2}`,
		"put null value":     `{"client":1,"op":"put","key":"00","value":null,"call":1,"return":2}`,
		"delete with value":  `{"client":1,"op":"delete","key":"00","value":"01","call":1,"return":2}`,
		"unknown get value":  `{"client":1,"op":"get","key":"00","value":"01","call":1,"return":null}`,
		"return before call": `{"client":1,"op":"put","key":"00","value":"01","call":5,"return":4}`,
		"negative call":      `{"client":1,"op":"put","key":"00","value":"01","call":-1,"return":4}`,
		"fractional return":  `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":4.5}`,
		"string return":      `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":"4"}`,
		"call too large":     `{"client":1,"op":"put","key":"00","value":"01","call":9223372036854775807,"return":null}`,
		"return too large":   `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":18446744073709551615}`,
		"trailing data":      `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":2} {}`,
		"negative client":    `{"client":-1,"op":"put","key":"00","value":"01","call":1,"return":2}`,
		"null client":        `{"client":null,"op":"put","key":"00","value":"01","call":1,"return":2}`,
		"null op":            `{"client":1,"op":null,"key":"00","value":"01","call":1,"return":2}`,
		"null call":          `{"client":1,"op":"put","key":"00","value":"01","call":null,"return":2}`,
		"numeric key":        `{"client":1,"op":"put","key":12,"value":"01","call":1,"return":2}`,
		"exponent call":      `{"client":1,"op":"put","key":"00","value":"01","call":1e3,"return":2000}`,
		"duplicate field":    `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":2,"key":"01"}`,
		"field in caps":      `{"Client":1,"op":"put","key":"00","value":"01","call":1,"return":2}`,
		"not closed":         `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":2`,
		"nested junk":        `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":{"a":1}}`,
	}
	for name, line := range cases {
		if _, _, err := ParseLine([]byte(line)); err == nil {
			t.Errorf("%s: accepted %s", name, line)
		}
	}
}

func TestReadHistoryNamesTheLine(t *testing.T) {
	good := `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":2}`
	in := good + "\n\n  \n" + good + "\n" + `{"client":1,"op":"put","key":"0g","value":"01","call":1,"return":2}` + "\n"
	_, err := ReadHistory("h.jsonl", strings.NewReader(in), DefaultLimits())
	var ie *InputError
	if !errors.As(err, &ie) || ie.Line != 5 || !strings.HasPrefix(err.Error(), "h.jsonl:5: key: not hex") {
		t.Fatalf("want an error at h.jsonl:5, got %v", err)
	}
}

func TestReadHistoryLimits(t *testing.T) {
	line := `{"client":1,"op":"put","key":"00","value":"01","call":1,"return":2}`
	lim := Limits{MaxLine: len(line), MaxOps: 2}
	h, err := ReadHistory("h", strings.NewReader(line+"\r\n"+line), lim)
	if err != nil || len(h.Ops) != 2 {
		t.Fatalf("two lines at the limits (one ending CRLF) refused: %v", err)
	}
	_, err = ReadHistory("h", strings.NewReader(line+"\n"+line+"\n"+line), lim)
	if err == nil || !strings.Contains(err.Error(), "h:3: more than 2 operations") {
		t.Fatalf("op limit: %v", err)
	}
	long := strings.Replace(line, `"01"`, `"0101"`, 1)
	_, err = ReadHistory("h", strings.NewReader(line+"\n"+long+"\n"), lim)
	if err == nil || !strings.Contains(err.Error(), "h:2: line longer than") {
		t.Fatalf("line limit: %v", err)
	}
	huge := strings.Repeat("x", 10*len(line))
	_, err = ReadHistory("h", strings.NewReader(line+"\n"+huge), lim)
	if err == nil || !strings.Contains(err.Error(), "h:2: line longer than") {
		t.Fatalf("line far over the limit: %v", err)
	}
}

// FuzzParseLine: no input panics, and whatever is accepted is consistent.
func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"client":1,"op":"put","key":"00","value":"01","call":1,"return":2}`))
	f.Add([]byte(`{"client":1,"op":"get","key":"00","value":null,"call":1,"return":null}`))
	f.Add([]byte(`{"client":1,"op":"delete","key":"","value":null,"call":0,"return":0}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		op, keep, err := ParseLine(line)
		if err != nil {
			return
		}
		if op.Return < op.Call || op.Call == UnknownReturn {
			t.Fatalf("accepted times out of order: %+v", op)
		}
		if (op.Kind == Put) != op.Present && op.Kind != Get {
			t.Fatalf("presence inconsistent with kind: %+v", op)
		}
		if !keep && (op.Kind != Get || !op.Unknown()) {
			t.Fatalf("dropped an operation that constrains the history: %+v", op)
		}
	})
}
