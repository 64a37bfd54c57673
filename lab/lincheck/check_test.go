package lincheck

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// l writes one history line: val "-" is null, ret < 0 is an unknown outcome.
func l(client int, op, key, val string, call, ret int) string {
	v := `null`
	if val != "-" {
		v = fmt.Sprintf("%q", val)
	}
	r := `null`
	if ret >= 0 {
		r = fmt.Sprint(ret)
	}
	return fmt.Sprintf(`{"client":%d,"op":%q,"key":%q,"value":%s,"call":%d,"return":%s}`,
		client, op, key, v, call, r)
}

func history(t *testing.T, lines ...string) *History {
	t.Helper()
	h, err := ReadHistory("test", strings.NewReader(strings.Join(lines, "\n")+"\n"), DefaultLimits())
	if err != nil {
		t.Fatalf("reading the history: %v", err)
	}
	return h
}

func check(t *testing.T, h *History) *Report {
	t.Helper()
	return Check(h, time.Now().Add(30*time.Second), 0)
}

const k1, k2 = "6b31", "6b32"

func TestLinearizableHistories(t *testing.T) {
	cases := map[string][]string{
		"get overlapping a put sees the old or the new value": {
			l(0, "put", k1, "01", 0, 10), l(1, "get", k1, "-", 2, 4), l(2, "get", k1, "01", 5, 15),
		},
		"a read inside a put, then absent from another overlapping read": {
			l(0, "put", k1, "01", 0, 100), l(1, "get", k1, "-", 10, 20), l(2, "get", k1, "01", 30, 40),
		},
		"two concurrent puts, either order": {
			l(0, "put", k1, "01", 0, 10), l(1, "put", k1, "02", 0, 10), l(2, "get", k1, "01", 20, 30),
		},
		"unknown put that took effect": {
			l(0, "put", k1, "01", 0, -1), l(1, "get", k1, "01", 50, 60),
		},
		"unknown put that did not take effect": {
			l(0, "put", k1, "01", 0, -1), l(1, "get", k1, "-", 50, 60), l(1, "get", k1, "-", 70, 80),
		},
		"unknown put taking effect late": {
			l(0, "put", k1, "01", 0, -1), l(1, "get", k1, "-", 10, 20), l(1, "get", k1, "01", 30, 40),
			l(2, "get", k1, "01", 50, 60),
		},
		"unknown delete that took effect": {
			l(0, "put", k1, "01", 0, 10), l(1, "delete", k1, "-", 20, -1), l(2, "get", k1, "-", 50, 60),
		},
		"deletes and puts in sequence": {
			l(0, "put", k1, "01", 0, 10), l(0, "delete", k1, "-", 20, 30), l(1, "get", k1, "-", 40, 50),
			l(1, "put", k1, "02", 60, 70), l(2, "get", k1, "02", 80, 90),
		},
		"get with unknown outcome is dropped": {
			l(0, "put", k1, "01", 0, 10), l(1, "get", k1, "-", 20, -1), l(2, "get", k1, "01", 30, 40),
		},
		"empty value is a value": {
			l(0, "put", k1, "", 0, 10), l(1, "get", k1, "", 20, 30),
		},
		"closed intervals: touching operations are concurrent": {
			l(0, "put", k1, "01", 10, 10), l(1, "get", k1, "-", 10, 10),
		},
		"keys are independent": {
			l(0, "put", k1, "01", 0, 10), l(1, "put", k2, "02", 0, 10), l(2, "get", k2, "02", 20, 30),
			l(2, "get", k1, "01", 40, 50),
		},
	}
	for name, lines := range cases {
		t.Run(name, func(t *testing.T) {
			rep := check(t, history(t, lines...))
			if !rep.Linearizable() {
				t.Fatalf("linearizable history rejected: violations %v, unknown %v", rep.Violations, rep.UnknownKeys)
			}
		})
	}
}

func TestViolations(t *testing.T) {
	cases := map[string][]string{
		"stale read after a completed put": {
			l(0, "put", k1, "01", 0, 10), l(0, "put", k1, "02", 20, 30), l(1, "get", k1, "01", 40, 50),
		},
		"lost acknowledged write": {
			l(0, "put", k1, "01", 0, 10), l(1, "get", k1, "-", 20, 30),
		},
		"read of a value never written": {
			l(0, "put", k1, "01", 0, 10), l(1, "get", k1, "09", 20, 30),
		},
		"new value then old value, by two readers during one put": {
			l(0, "put", k1, "01", 0, 100), l(1, "get", k1, "01", 10, 20), l(2, "get", k1, "-", 30, 40),
		},
		"unknown put seen, then unseen": {
			l(0, "put", k1, "01", 0, -1), l(1, "get", k1, "01", 10, 20), l(1, "get", k1, "-", 30, 40),
		},
		"lost acknowledged delete": {
			l(0, "put", k1, "01", 0, 10), l(0, "delete", k1, "-", 20, 30), l(1, "get", k1, "01", 40, 50),
		},
		"empty value read as absent": {
			l(0, "put", k1, "", 0, 10), l(1, "get", k1, "-", 20, 30),
		},
	}
	for name, lines := range cases {
		t.Run(name, func(t *testing.T) {
			rep := check(t, history(t, lines...))
			if !reflect.DeepEqual(rep.Violations, []string{k1}) || len(rep.UnknownKeys) != 0 {
				t.Fatalf("violation missed: violations %v, unknown %v", rep.Violations, rep.UnknownKeys)
			}
		})
	}
}

func TestViolationIsNamedByKey(t *testing.T) {
	h := history(t,
		l(0, "put", k1, "01", 0, 10), l(1, "get", k1, "01", 20, 30), // fine
		l(0, "put", k2, "02", 0, 10), l(1, "get", k2, "-", 20, 30), // lost write
		l(2, "put", "", "03", 0, 10), l(2, "get", "", "03", 20, 30), // the empty key, fine
	)
	rep := check(t, h)
	if rep.Keys != 3 || rep.Operations != 6 || !reflect.DeepEqual(rep.Violations, []string{k2}) {
		t.Fatalf("want 3 keys, 6 operations, violation on %s only; got %+v", k2, rep)
	}
}

func TestPassedDeadlineIsUnknownNotOk(t *testing.T) {
	h := history(t, l(0, "put", k1, "01", 0, 10), l(1, "get", k1, "01", 20, 30))
	rep := Check(h, time.Now().Add(-time.Second), 0)
	if rep.Linearizable() || !reflect.DeepEqual(rep.UnknownKeys, []string{k1}) {
		t.Fatalf("a check with no time must be unknown: %+v", rep)
	}
}

func TestWriteHTML(t *testing.T) {
	h := history(t, l(0, "put", k1, "01", 0, 10), l(1, "get", k1, "-", 20, 30))
	var b strings.Builder
	if err := WriteHTML(&b, h, []string{k1}, time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "<html") || !strings.Contains(b.String(), "put(6b31, 01)") {
		t.Fatalf("visualisation lacks the page or the operation: %d bytes", b.Len())
	}
}
