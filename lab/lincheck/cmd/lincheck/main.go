// Command lincheck checks histories of bavl's key-value cluster for linearizability with
// porcupine and prints a JSON summary. Exit status: 0 every history was proved
// linearizable; 1 a violation was found (even if some key is also undecided); 2 bad usage
// or bad input (the error names file:line); 3 no violation found but some key was not
// decided before --timeout. A timeout is never reported as linearizable.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"bavl.dev/lincheck"
)

const (
	exitOK        = 0
	exitViolation = 1
	exitBadInput  = 2
	exitUnknown   = 3
)

const usage = `lincheck: check bavl cluster histories for linearizability (porcupine).

Usage: lincheck [flags] [HISTORY ...]

Each HISTORY is a file of JSON lines, one operation per line (none, or "-": stdin):
  {"client":<u64>,"op":"get"|"put"|"delete","key":"<hex>","value":"<hex>"|null,
   "call":<u64 ns>,"return":<u64 ns>|null}
get: value is what was read (null: absent); put: the value written; delete: null.
"return": null means the outcome is unknown (timed out, crashed): a put or delete may or
may not have taken effect at any time after its call; a get with unknown outcome is
dropped (its value must be null). Every file is a separate history (its own clock and
an initially empty store); each is split by key and every key checked.

Prints one JSON summary on stdout:
  {"histories":N,"operations":N,"keys":N,"linearizable":bool,"violations":[hex keys],
   "unknown":bool, ...,"per_history":[...]}

Exit status: 0 linearizable; 1 violation; 2 bad usage or input (file:line on stderr);
3 undecided within --timeout (never reported as linearizable).

Flags:
`

// summary is the JSON printed on stdout.
type summary struct {
	Histories    int       `json:"histories"`
	Operations   int       `json:"operations"`
	Keys         int       `json:"keys"`
	Linearizable bool      `json:"linearizable"`
	Violations   []string  `json:"violations"`
	Unknown      bool      `json:"unknown"`
	UnknownOps   int       `json:"unknown_outcome_ops"`
	DroppedGets  int       `json:"dropped_unknown_gets"`
	ElapsedMs    int64     `json:"elapsed_ms"`
	HTML         string    `json:"html,omitempty"`
	PerHistory   []perHist `json:"per_history"`
}

type perHist struct {
	Name        string   `json:"name"`
	Operations  int      `json:"operations"`
	Keys        int      `json:"keys"`
	Violations  []string `json:"violations"`
	UnknownKeys []string `json:"unknown_keys"`
}

type options struct {
	timeout    time.Duration
	html       string
	lim        lincheck.Limits
	allowEmpty bool
	workers    int
	files      []string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	opts, code, done := parseFlags(args, stdout, stderr)
	if done {
		return code
	}
	start := time.Now()
	hists, err := readAll(opts, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "lincheck: %v\n", err)
		return exitBadInput
	}
	deadline := time.Now().Add(opts.timeout) // reading is not part of the check's budget
	sum, firstBad, firstBadKeys := checkAll(hists, deadline, opts.workers)
	if opts.html != "" && firstBad != nil {
		// The visualisation gets its own budget: the check's may be spent.
		if err := writeHTML(opts.html, firstBad, firstBadKeys, time.Now().Add(opts.timeout)); err != nil {
			fmt.Fprintf(stderr, "lincheck: --html: %v\n", err)
		} else {
			sum.HTML = opts.html
			fmt.Fprintf(stderr, "lincheck: wrote the violating keys of %s to %s\n", firstBad.Name, opts.html)
		}
	}
	sum.ElapsedMs = time.Since(start).Milliseconds()
	enc := json.NewEncoder(stdout)
	if err := enc.Encode(sum); err != nil {
		fmt.Fprintf(stderr, "lincheck: writing the summary: %v\n", err)
		return exitBadInput
	}
	switch {
	case len(sum.Violations) > 0:
		return exitViolation
	case sum.Unknown:
		return exitUnknown
	}
	return exitOK
}

// checkAll checks every history and sums the reports; it also returns the first history
// with a violation and its violating keys (nil when there is none).
func checkAll(hists []*lincheck.History, deadline time.Time, workers int) (summary, *lincheck.History, []string) {
	sum := summary{Histories: len(hists), Violations: []string{}, PerHistory: []perHist{}}
	seen := make(map[string]bool)
	var firstBad *lincheck.History
	var firstBadKeys []string
	for _, h := range hists {
		rep := lincheck.Check(h, deadline, workers)
		sum.Operations += rep.Operations
		sum.Keys += rep.Keys
		sum.UnknownOps += rep.UnknownOps
		sum.DroppedGets += rep.DroppedGets
		sum.Unknown = sum.Unknown || len(rep.UnknownKeys) > 0
		for _, k := range rep.Violations {
			if !seen[k] {
				seen[k] = true
				sum.Violations = append(sum.Violations, k)
			}
		}
		if firstBad == nil && len(rep.Violations) > 0 {
			firstBad, firstBadKeys = h, rep.Violations
		}
		sum.PerHistory = append(sum.PerHistory, perHist{rep.Name, rep.Operations, rep.Keys,
			nonNil(rep.Violations), nonNil(rep.UnknownKeys)})
	}
	sum.Linearizable = len(sum.Violations) == 0 && !sum.Unknown
	return sum, firstBad, firstBadKeys
}

// parseFlags returns the options, or done with the exit code (help, version, bad usage).
func parseFlags(args []string, stdout, stderr io.Writer) (options, int, bool) {
	var o options
	fs := flag.NewFlagSet("lincheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "time for checking all histories, counted after reading them; keys left undecided are \"unknown\" (exit 3)")
	fs.StringVar(&o.html, "html", "", "write porcupine's visualisation of the first violating history's violating keys (up to 8) to this HTML file")
	fs.IntVar(&o.lim.MaxLine, "max-line", lincheck.DefaultLimits().MaxLine, "longest line accepted, in bytes")
	fs.IntVar(&o.lim.MaxOps, "max-ops", lincheck.DefaultLimits().MaxOps, "most operations accepted per history")
	fs.BoolVar(&o.allowEmpty, "allow-empty", false, "accept a history with no operations (by default an error: a recorder that wrote nothing)")
	fs.IntVar(&o.workers, "workers", 0, "keys checked at once (0: one per CPU)")
	version := fs.Bool("version", false, "print the version of lincheck and porcupine")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, exitOK, true
		}
		return o, exitBadInput, true
	}
	if *version {
		fmt.Fprintln(stdout, versionString())
		return o, exitOK, true
	}
	if o.timeout <= 0 || o.lim.MaxLine <= 0 || o.lim.MaxOps <= 0 || o.workers < 0 {
		fmt.Fprintln(stderr, "lincheck: --timeout, --max-line and --max-ops must be positive, --workers not negative")
		return o, exitBadInput, true
	}
	o.files = fs.Args()
	if len(o.files) == 0 {
		o.files = []string{"-"}
	}
	return o, 0, false
}

func readAll(o options, stdin io.Reader) ([]*lincheck.History, error) {
	var hists []*lincheck.History
	usedStdin := false
	for _, name := range o.files {
		var h *lincheck.History
		var err error
		if name == "-" {
			if usedStdin {
				return nil, errors.New(`"-" (stdin) given twice`)
			}
			usedStdin = true
			h, err = lincheck.ReadHistory("<stdin>", stdin, o.lim)
		} else {
			h, err = readFile(name, o.lim)
		}
		if err != nil {
			return nil, err
		}
		if !o.allowEmpty && len(h.Ops) == 0 {
			return nil, fmt.Errorf("%s: no operations to check (pass --allow-empty to accept an empty history)", h.Name)
		}
		hists = append(hists, h)
	}
	return hists, nil
}

func readFile(name string, lim lincheck.Limits) (*lincheck.History, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return lincheck.ReadHistory(name, f, lim)
}

func writeHTML(path string, h *lincheck.History, keys []string, deadline time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := lincheck.WriteHTML(f, h, keys, deadline); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func versionString() string {
	porcupine := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/anishathalye/porcupine" {
				porcupine = d.Version
			}
		}
	}
	return "lincheck (bavl lab/lincheck), porcupine " + porcupine
}
