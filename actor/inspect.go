package actor

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
)

// Inspect asks object ref, in a turn of its own on the host that runs it,
// where it runs and how: its row, its queue, the messages it ran and
// when the last ended, its moves from that host, and its kind's summary
// of its state (Kind.Summarize). The request goes as any Ask does — after
// the messages this host sent the object before it, through its moves.
//
// It first asks the Location Store where the object is: an object that
// runs nowhere (never activated, removed, or its owner's run ended) is
// ErrNotActive, and nothing is sent — an inspection does not activate an
// object. If the owner fails between that look-up and the request, the
// request takes the object over like any message. A host that predates
// inspections answers with kind NotFound (no handler for the request).
func (h *Host) Inspect(ctx context.Context, ref Ref) (Inspection, error) {
	if _, err := h.Locate(ctx, ref); err != nil {
		return Inspection{}, err
	}
	return Ask[inspectRequest, Inspection](ctx, h, ref, inspectRequest{})
}

// ObjectRate is how many messages an object ran over a window
// (Host.Busiest).
type ObjectRate struct {
	Ref Ref
	// Messages is how many messages it ran in the window; PerSecond the
	// same a second (over the window asked for).
	Messages  uint64
	PerSecond float64
	// Queued is how many application messages were queued for it (or
	// held for their order) at the window's end.
	Queued int
}

// MaxBusiestWindow bounds Host.Busiest's window.
const MaxBusiestWindow = time.Minute

// Busiest watches this host's objects for window and returns the n that
// ran the most messages in it, most first, and how many messages all of
// them ran (berth's own requests, such as inspections, not counted). An
// object that activated or moved here during the window counts all it
// ran here; one that left during it is not listed (it ran elsewhere
// since). It returns early with ctx's error if ctx ends first. A window
// outside (0, MaxBusiestWindow] or n < 1 is kind InvalidOperation.
func (h *Host) Busiest(ctx context.Context, n int, window time.Duration) (top []ObjectRate, total uint64, err error) {
	const op = "actor.Host.Busiest"
	if window <= 0 || window > MaxBusiestWindow {
		return nil, 0, payload.NewError(payload.InvalidOperation, op, "window "+window.String()+" is outside (0, MaxBusiestWindow = "+MaxBusiestWindow.String()+"]")
	}
	if n < 1 {
		return nil, 0, payload.NewError(payload.InvalidOperation, op, "n "+strconv.Itoa(n)+" is below 1")
	}
	before := map[*owner]uint64{}
	for _, kr := range h.owners.allKinds() {
		for _, o := range kr.all() {
			before[o] = o.turns.Load()
		}
	}
	wait := h.windowWait
	if wait == nil {
		wait = waitWindow
	}
	if err := wait(ctx, window); err != nil {
		return nil, 0, err
	}
	secs := window.Seconds()
	for _, kr := range h.owners.allKinds() {
		for _, o := range kr.all() {
			ran := o.turns.Load() - before[o] // a new activation: all it ran
			if ran == 0 {
				continue
			}
			total += ran
			top = append(top, ObjectRate{Ref: o.ref, Messages: ran, PerSecond: float64(ran) / secs})
		}
	}
	slices.SortFunc(top, func(a, b ObjectRate) int {
		if c := cmp.Compare(b.Messages, a.Messages); c != 0 {
			return c
		}
		return cmp.Compare(a.Ref.String(), b.Ref.String())
	})
	top = top[:min(n, len(top))]
	for i := range top {
		if o := h.owners.kind(top[i].Ref.Kind).local(top[i].Ref.ID); o != nil {
			top[i].Queued = o.mb.Len(mailbox.Application)
		}
	}
	return top, total, nil
}

// waitWindow waits d, or until ctx ends (its error).
func waitWindow(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-t.C:
		return nil
	}
}
