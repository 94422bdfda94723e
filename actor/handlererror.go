package actor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/payload"
)

// HandlerError is a handler's error as the one who sent the message sees
// it — the same whether the object ran on the sender's host or another:
//
//   - Error() is the handler error's message, unchanged;
//   - its kind is the handler error's berth kind (payload.KindOf), or
//     InternalFailure if it has none: errors.Is(err, actor.Rejected) and
//     payload.KindOf work as on the original;
//   - errors.Is(err, sentinel) holds for every sentinel registered with
//     RegisterError that the original matched (errors.Is on the handler's
//     side). Unregistered errors, and errors.As to the handler's own types,
//     do not survive — on any host, so that code behaves the same whether
//     its object is local or not.
//
// A handler that panicked gives a HandlerError of kind InternalFailure.
type HandlerError struct {
	Kind  payload.Kind
	Msg   string
	Codes []string // the codes of the registered sentinels the original matched
}

// Error returns the handler error's message.
func (e *HandlerError) Error() string { return e.Msg }

// Is reports whether target is the error's kind or one of the registered
// sentinels the original matched.
func (e *HandlerError) Is(target error) bool {
	if k, ok := target.(payload.Kind); ok {
		return k == e.Kind
	}
	for _, c := range e.Codes {
		if s, ok := registered.byCode.Load(c); ok && s.(error) == target {
			return true
		}
	}
	return false
}

// As sets a *payload.Kind target to the error's kind (so payload.KindOf
// works).
func (e *HandlerError) As(target any) bool {
	if k, ok := target.(*payload.Kind); ok {
		*k = e.Kind
		return true
	}
	return false
}

// registered holds the sentinels of RegisterError.
var registered struct {
	mu     sync.Mutex
	byCode sync.Map // code → error
	list   []registration
	snap   atomic.Pointer[[]registration] // list, published for lock-free reads
}

type registration struct {
	code     string
	sentinel error
}

// RegisterError makes errors.Is(err, sentinel) hold for a handler error
// that matched sentinel, on every host: code names the sentinel between
// hosts, so register the same code for the same sentinel in every process
// (typically in an init function, next to the sentinel). Registering a code
// twice for different sentinels panics. berth registers its own sentinels
// and context.Canceled and context.DeadlineExceeded under codes beginning
// with "berth.".
func RegisterError(code string, sentinel error) {
	if code == "" || sentinel == nil {
		panic("actor.RegisterError: empty code or nil sentinel")
	}
	registered.mu.Lock()
	defer registered.mu.Unlock()
	if old, ok := registered.byCode.Load(code); ok {
		if old.(error) != sentinel {
			panic("actor.RegisterError: code " + code + " is registered for another error")
		}
		return
	}
	registered.byCode.Store(code, sentinel)
	list := append(slices.Clip(registered.list), registration{code, sentinel})
	registered.list = list
	registered.snap.Store(&list)
}

func init() {
	RegisterError("berth.context_canceled", context.Canceled)
	RegisterError("berth.context_deadline_exceeded", context.DeadlineExceeded)
	RegisterError("berth.shutting_down", ErrShuttingDown)
	RegisterError("berth.too_many_requests", ErrTooManyRequests)
	RegisterError("berth.reentrant", ErrReentrant)
	RegisterError("berth.send_timeout", ErrSendTimeout)
	RegisterError("berth.paused", ErrPaused)
	RegisterError("berth.not_handed_on", ErrNotHandedOn)
	RegisterError("berth.request_timeout", ErrRequestTimeout)
	RegisterError("berth.not_active", ErrNotActive)
	RegisterError("berth.not_local", ErrNotLocal)
	RegisterError("berth.move_in_progress", ErrMoveInProgress)
	RegisterError("berth.already_there", ErrAlreadyThere)
	RegisterError("berth.no_network", ErrNoNetwork)
	RegisterError("berth.nowhere_to_drain", ErrNowhereToDrain)
	RegisterError("berth.peer_backlog", ErrPeerBacklog)
	RegisterError("berth.too_many_relocations", ErrTooManyRelocations)
}

// handlerError is the error a sender sees for a handler's err (see
// HandlerError).
func handlerError(err error) *HandlerError {
	var he *HandlerError
	if errors.As(err, &he) && he.Msg == err.Error() {
		return he // already converted (a handler returned another's error)
	}
	k := payload.KindOf(err)
	if k == 0 {
		k = payload.InternalFailure
	}
	e := &HandlerError{Kind: k, Msg: err.Error()}
	var list []registration
	if p := registered.snap.Load(); p != nil {
		list = *p
	}
	for _, r := range list {
		if errors.Is(err, r.sentinel) {
			e.Codes = append(e.Codes, r.code)
		}
	}
	return e
}
