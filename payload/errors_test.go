package payload

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorKindsMatchWithErrorsIs(t *testing.T) {
	kinds := []Kind{NotFound, AlreadyExists, TypeMismatch, NotConfigured, Rejected, Unavailable,
		CapacityExceeded, DeadlineExceeded, ShuttingDown, ProtocolError, InvalidOperation, DataLost, InternalFailure}
	if len(kinds) != 13 {
		t.Fatalf("docs/architecture.md names 13 error kinds, test lists %d", len(kinds))
	}
	for _, k := range kinds {
		err := fmt.Errorf("outer: %w", NewError(k, "op", "detail"))
		if !errors.Is(err, k) {
			t.Errorf("errors.Is(%v, %v) = false", err, k)
		}
		if KindOf(err) != k {
			t.Errorf("KindOf(%v) = %v, want %v", err, KindOf(err), k)
		}
		for _, other := range kinds {
			if other != k && errors.Is(err, other) {
				t.Errorf("errors.Is(%v, %v) = true", err, other)
			}
		}
		if k.String() == "unknown" || k.Error() != "berth: "+k.String() {
			t.Errorf("kind %d has name %q / %q", k, k.String(), k.Error())
		}
	}
}

func TestErrorUnwrapsCauseAndFormats(t *testing.T) {
	cause := errors.New("boom")
	err := Wrap(ProtocolError, "payload.Value", cause)
	if !errors.Is(err, cause) || !errors.Is(err, ProtocolError) {
		t.Fatalf("wrapped error lost its cause or kind: %v", err)
	}
	if got, want := err.Error(), "payload.Value: protocol error: boom"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	e := &Error{Kind: NotFound, Op: "x", Detail: "no such thing"}
	if got, want := e.Error(), "x: not found: no such thing"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if KindOf(errors.New("plain")) != 0 || KindOf(nil) != 0 {
		t.Fatal("KindOf of an error without a kind must be 0")
	}
	if KindOf(fmt.Errorf("w: %w", Unavailable)) != Unavailable {
		t.Fatal("KindOf must see a bare Kind")
	}
	if KindOf(errors.Join(errors.New("a"), NewError(DataLost, "", ""))) != DataLost {
		t.Fatal("KindOf must see kinds inside errors.Join")
	}
}
