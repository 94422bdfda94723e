package mailbox_test

import (
	"context"
	"fmt"

	"github.com/berthrt/berth/mailbox"
)

// inline is a dispatcher that runs a drain at once, on the caller.
type inline struct{}

func (inline) Schedule(fn func()) { fn() }
func (inline) Throughput() int    { return 100 }

// printer is a protoactor MessageInvoker that prints each item's content.
type printer struct{}

func (printer) InvokeSystemMessage(any)  {}
func (printer) EscalateFailure(any, any) {}
func (printer) InvokeUserMessage(m any) {
	e := m.(*mailbox.Envelope)
	fmt.Println("turn", e.Seq, e.Control)
}

func item(lane mailbox.Lane, v any) *mailbox.Envelope {
	e := mailbox.NewEnvelope()
	e.Lane, e.Control = lane, v
	return e
}

// A mailbox admits items in one span and runs them one turn at a time;
// whoever fills the idle mailbox schedules its drain.
func ExampleMailbox_Admit() {
	m := mailbox.New(mailbox.Limits{Items: 2, Bytes: 1 << 20}, mailbox.Limits{}, nil)
	m.RegisterHandlers(printer{}, inline{})
	fmt.Println(m.Admit(item(mailbox.Application, "hello")))
	// Output:
	// turn 0 hello
	// <nil>
}

// Sealing holds application arrivals; Drain hands back the queue and the
// hold, in order and undecoded; Reopen puts them back (an aborted move).
func ExampleMailbox_Seal() {
	m := mailbox.New(mailbox.Limits{}, mailbox.Limits{}, nil)
	m.RegisterHandlers(printer{}, inline{})
	m.Seal()
	m.Admit(item(mailbox.Application, "held while sealed"))
	m.Admit(item(mailbox.Lifecycle, "control still runs"))
	queued, held := m.Drain()
	fmt.Println(len(queued), len(held))
	m.Reopen(append(queued, held...))
	// Output:
	// turn 1 control still runs
	// 0 1
	// turn 0 held while sealed
}

// Permits are the host-wide job queue: waiting is FIFO and cancellable,
// and the pressure state tells network links when to pause.
func ExamplePermits() {
	p := mailbox.NewPermits(5, func(paused bool) { fmt.Println("links paused:", paused) })
	for i := 0; i < 4; i++ {
		p.Acquire(context.Background())
	}
	fmt.Println(p.InUse(), p.TryAcquire()) // 4 in use, then the 5th
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fmt.Println(p.Acquire(ctx)) // all 5 in use: it would wait; cancelled
	for i := 0; i < 3; i++ {
		p.Release()
	}
	fmt.Println(p.InUse())
	// Output:
	// links paused: true
	// 4 true
	// context canceled
	// links paused: false
	// 2
}
