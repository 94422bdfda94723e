package payload

import (
	"errors"
	"strconv"
)

// Kind classifies an error. Every berth package reports failures with one of
// these kinds (docs/architecture.md, "Errors"), so callers test errors the same way everywhere:
//
//	if errors.Is(err, payload.ProtocolError) { ... }
//
// A Kind is itself an error, which is what makes it usable as the target of
// errors.Is. Errors that carry a kind are *Error values; the kind never
// changes while an error is wrapped by other packages.
type Kind uint8

// The error kinds. The zero Kind is not a valid kind; KindOf reports it for
// errors that carry none.
const (
	// NotFound: the object, kind, channel, message type or route does not exist.
	NotFound Kind = iota + 1
	// AlreadyExists: a registration or reservation collides with an existing one.
	AlreadyExists
	// TypeMismatch: a typed access asked for a type other than the one the
	// payload was decoded as, or a codec cannot handle the declared type.
	TypeMismatch
	// NotConfigured: a required setting or preparation step is missing
	// (for example a Registry used before Freeze).
	NotConfigured
	// Rejected: an admission rule refused the message.
	Rejected
	// Unavailable: a remote queue, route or owner cannot take the message.
	Unavailable
	// CapacityExceeded: a local bounded resource is full.
	CapacityExceeded
	// DeadlineExceeded: the operation's deadline passed before it completed.
	DeadlineExceeded
	// ShuttingDown: the host is stopping and takes no new work.
	ShuttingDown
	// ProtocolError: bytes on the wire are malformed, truncated, or name an
	// unregistered or non-canonical content type.
	ProtocolError
	// InvalidOperation: the call is not allowed in this state or with these
	// arguments (for example registering after Freeze, or a reentrant ask).
	InvalidOperation
	// DataLost: data that was accepted can no longer be delivered intact.
	DataLost
	// InternalFailure: a handler panicked or an internal invariant failed.
	InternalFailure
)

var kindNames = [...]string{
	0:                "unknown",
	NotFound:         "not found",
	AlreadyExists:    "already exists",
	TypeMismatch:     "type mismatch",
	NotConfigured:    "not configured",
	Rejected:         "rejected",
	Unavailable:      "unavailable",
	CapacityExceeded: "capacity exceeded",
	DeadlineExceeded: "deadline exceeded",
	ShuttingDown:     "shutting down",
	ProtocolError:    "protocol error",
	InvalidOperation: "invalid operation",
	DataLost:         "data lost",
	InternalFailure:  "internal failure",
}

// String returns the kind's name, such as "protocol error".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Error makes a Kind usable as an errors.Is target. It returns "berth: " and
// the kind's name.
func (k Kind) Error() string { return "berth: " + k.String() }

// Error is an error with a kind, the operation that failed, and an optional
// detail and cause. errors.Is(err, k) reports whether the error's kind is k;
// errors.Is and errors.As also see the cause through Unwrap.
type Error struct {
	Kind   Kind   // what kind of failure
	Op     string // the operation, such as "payload.DecodeHeader"
	Detail string // what exactly was wrong, for people; may be empty
	Err    error  // the cause, if any
}

// Error formats the error as "op: kind: detail: cause", leaving out empty parts.
func (e *Error) Error() string {
	s := e.Kind.String()
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is this error's Kind.
func (e *Error) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == e.Kind
}

// NewError returns an *Error of kind k for operation op with the given detail.
func NewError(k Kind, op, detail string) error {
	return &Error{Kind: k, Op: op, Detail: detail}
}

// Wrap returns an *Error of kind k for operation op with cause err.
func Wrap(k Kind, op string, err error) error {
	return &Error{Kind: k, Op: op, Err: err}
}

// KindOf returns the kind of the first *Error in err's chain, else the first
// bare Kind, or 0 if there is none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	var k Kind
	if errors.As(err, &k) {
		return k
	}
	return 0
}
