package verifier

import (
	"errors"
	"fmt"
)

// ErrorKind is one of the six stable error kinds of docs/design.md §3 ("Order of checks
// and error kinds"). Every bavl verifier, in any language, reports the same kind for the
// same input; the messages are informative only.
type ErrorKind string

// The error kinds, in the order of docs/design.md §3.
const (
	// KindInput: the caller's key, value or bounds are outside the limits.
	KindInput ErrorKind = "Input"
	// KindDecode: the bytes are not a well-formed encoding.
	KindDecode ErrorKind = "Decode"
	// KindWrongKind: the proof is of another kind than the verifier's.
	KindWrongKind ErrorKind = "WrongKind"
	// KindStructure: well formed, but not the shape a proof of its kind has.
	KindStructure ErrorKind = "Structure"
	// KindRootMismatch: well formed, but hashes to another root.
	KindRootMismatch ErrorKind = "RootMismatch"
	// KindWrongIndex: a valid chunk of another index than the one asked for.
	KindWrongIndex ErrorKind = "WrongIndex"
)

// Kinds lists every error kind.
var Kinds = []ErrorKind{KindInput, KindDecode, KindWrongKind, KindStructure, KindRootMismatch, KindWrongIndex}

// Error is every error the verifiers return.
type Error struct {
	Kind ErrorKind
	// At is the byte offset where a Decode error was found (-1 otherwise).
	At  int
	Msg string
}

func (e *Error) Error() string {
	if e.At >= 0 {
		return fmt.Sprintf("bavl: %s: %s at byte %d", e.Kind, e.Msg, e.At)
	}
	return fmt.Sprintf("bavl: %s: %s", e.Kind, e.Msg)
}

// KindOf returns the error kind of an error returned by this package ("" for nil or a
// foreign error).
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

func decodeErr(at int, format string, args ...any) *Error {
	return &Error{Kind: KindDecode, At: at, Msg: fmt.Sprintf(format, args...)}
}

func kindErr(kind ErrorKind, msg string) *Error {
	return &Error{Kind: kind, At: -1, Msg: msg}
}
