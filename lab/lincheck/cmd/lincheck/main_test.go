package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	put1   = `{"client":0,"op":"put","key":"6b31","value":"01","call":0,"return":10}`
	get1   = `{"client":1,"op":"get","key":"6b31","value":"01","call":20,"return":30}`
	getNil = `{"client":1,"op":"get","key":"6b31","value":null,"call":20,"return":30}`
)

func write(t *testing.T, name string, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runCmd runs the command and decodes its summary when it printed one.
func runCmd(t *testing.T, stdin string, args ...string) (int, summary, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	var sum summary
	if out.Len() > 0 && !strings.HasPrefix(out.String(), "lincheck (") {
		if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
			t.Fatalf("summary is not JSON: %v: %s", err, out.String())
		}
	}
	return code, sum, errb.String()
}

func TestExitCodes(t *testing.T) {
	ok := write(t, "ok.jsonl", put1, get1)
	bad := write(t, "bad.jsonl", put1, getNil)
	if code, sum, _ := runCmd(t, "", ok); code != exitOK || !sum.Linearizable || sum.Operations != 2 || sum.Keys != 1 {
		t.Fatalf("linearizable: exit %d, %+v", code, sum)
	}
	code, sum, _ := runCmd(t, "", ok, bad)
	if code != exitViolation || sum.Linearizable || sum.Histories != 2 || len(sum.Violations) != 1 || sum.Violations[0] != "6b31" {
		t.Fatalf("violation: exit %d, %+v", code, sum)
	}
	if len(sum.PerHistory[0].Violations) != 0 || len(sum.PerHistory[1].Violations) != 1 {
		t.Fatalf("violation attributed to the wrong history: %+v", sum.PerHistory)
	}
	if code, sum, _ := runCmd(t, put1+"\n"+get1+"\n"); code != exitOK || sum.PerHistory[0].Name != "<stdin>" {
		t.Fatalf("stdin: exit %d, %+v", code, sum)
	}
}

func TestFilesAreSeparateHistories(t *testing.T) {
	// Together these would be a lost write; each file is its own run with its own store.
	a, b := write(t, "a.jsonl", put1), write(t, "b.jsonl", getNil)
	if code, sum, _ := runCmd(t, "", a, b); code != exitOK || sum.Keys != 2 {
		t.Fatalf("exit %d, %+v", code, sum)
	}
}

func TestBadInputNamesFileAndLine(t *testing.T) {
	p := write(t, "h.jsonl", put1, get1, `{"client":0,"op":"put","key":"6b31","value":"01","call":50,"return":40}`)
	code, _, stderr := runCmd(t, "", p)
	if code != exitBadInput || !strings.Contains(stderr, p+":3: return 40 is before call 50") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", "--max-line", "20", p); code != exitBadInput || !strings.Contains(stderr, p+":1: line longer than 20") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := runCmd(t, "", filepath.Join(t.TempDir(), "missing")); code != exitBadInput {
		t.Fatalf("missing file: exit %d", code)
	}
	empty := write(t, "empty.jsonl")
	if code, _, stderr := runCmd(t, "", empty); code != exitBadInput || !strings.Contains(stderr, "no operations") {
		t.Fatalf("empty history: exit %d, %q", code, stderr)
	}
	if code, sum, _ := runCmd(t, "", "--allow-empty", empty); code != exitOK || sum.Operations != 0 {
		t.Fatalf("--allow-empty: exit %d, %+v", code, sum)
	}
	if code, _, _ := runCmd(t, "", "--timeout", "0s", p); code != exitBadInput {
		t.Fatalf("zero timeout: exit %d", code)
	}
	if code, _, _ := runCmd(t, "", "--no-such-flag"); code != exitBadInput {
		t.Fatalf("unknown flag: exit %d", code)
	}
}

func TestTimeoutIsUnknownNeverOk(t *testing.T) {
	p := write(t, "ok.jsonl", put1, get1)
	code, sum, _ := runCmd(t, "", "--timeout", "1ns", p)
	if code != exitUnknown || sum.Linearizable || !sum.Unknown {
		t.Fatalf("exit %d, %+v", code, sum)
	}
}

func TestHTML(t *testing.T) {
	bad := write(t, "bad.jsonl", put1, getNil)
	out := filepath.Join(t.TempDir(), "v.html")
	code, sum, _ := runCmd(t, "", "--html", out, bad)
	page, err := os.ReadFile(out)
	if code != exitViolation || sum.HTML != out || err != nil || !bytes.Contains(page, []byte("get(6b31) -\\u003e absent [line 2]")) {
		t.Fatalf("exit %d, html %q, %v, %d bytes", code, sum.HTML, err, len(page))
	}
}

func TestHelpAndVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, nil, &out, &errb); code != exitOK || !strings.Contains(errb.String(), "Exit status") {
		t.Fatalf("help: exit %d, %q", code, errb.String())
	}
	out.Reset()
	if code := run([]string{"--version"}, nil, &out, &errb); code != exitOK || !strings.HasPrefix(out.String(), "lincheck (") {
		t.Fatalf("version: exit %d, %q", code, out.String())
	}
}
