package pgbridge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/payload"
)

// Handler runs claimed rows: Messages, Batches, Rows or Objects.
type Handler interface {
	// kind describes the handler for configuration checks.
	mode() handlerMode
	// newRunner makes the per-claimer state (each claimer has its own).
	newRunner(b *Broker, s *Subscription) runner
}

type handlerMode uint8

const (
	modePayload handlerMode = iota
	modeRow
)

// runner is one claimer's handler state.
type runner interface {
	// read is called for each claimed row while the driver's raw values
	// are current (lent): it decodes what the handler needs. An error is
	// a decode failure (the decode policy settles the row).
	read(d *Delivery, body []byte) error
	// run sets the outcome of every delivery that has no decode failure.
	run(ctx context.Context, ds []*Delivery)
	// reset drops the typed values of the last claim.
	reset()
}

// recovered turns a panic in a handler into a retry outcome.
func recovered(d *Delivery, r any) {
	d.outcome = Outcome{Kind: KindRetry, Reason: fmt.Sprintf("handler panicked: %v", r)}
}

// codecs remembers the last content type's codec: the rows of a table
// mostly share one, and the registry look-up takes bytes.
type codecs struct {
	ct string
	ce *payload.CodecEntry
}

// decode decodes a lent body into v with the registry's codec for ct.
func (cc *codecs) decode(b *Broker, ct string, body []byte, v any) error {
	if cc.ce == nil || ct != cc.ct {
		ce, err := b.reg.ReceiveCodec([]byte(ct))
		if err != nil {
			return err
		}
		cc.ct, cc.ce = ct, ce
	}
	b.stats.decodes.Add(1)
	if err := cc.ce.Codec().Decode(body, v); err != nil {
		return payload.Wrap(payload.ProtocolError, "pgbridge: decode "+ct, err)
	}
	return nil
}

// Messages handles one row at a time in payload mode: the row's payload is
// decoded into M by the codec of its content_type, straight from the bytes
// the driver read (lent, not copied), and fn's Outcome settles the row. A
// panic in fn is a retry.
func Messages[M any](fn func(ctx context.Context, d *Delivery, m M) Outcome) Handler {
	return msgHandler[M]{fn: fn}
}

type msgHandler[M any] struct {
	fn func(ctx context.Context, d *Delivery, m M) Outcome
}

func (msgHandler[M]) mode() handlerMode { return modePayload }

func (h msgHandler[M]) newRunner(b *Broker, s *Subscription) runner {
	return &msgRunner[M]{b: b, fn: h.fn, each: concurrent{n: s.Concurrency}}
}

type msgRunner[M any] struct {
	codecs
	each concurrent
	b    *Broker
	fn   func(ctx context.Context, d *Delivery, m M) Outcome
	vals []M
}

func (r *msgRunner[M]) read(d *Delivery, body []byte) error {
	var zero M
	r.vals = append(r.vals, zero)
	d.slot = len(r.vals) - 1
	return r.decode(r.b, d.ContentType, body, &r.vals[d.slot])
}

func (r *msgRunner[M]) run(ctx context.Context, ds []*Delivery) {
	if r.each.alone(ds) { // no closure: r.one as a value allocates
		for _, d := range ds {
			if d.undec == nil {
				r.one(ctx, d)
			}
		}
		return
	}
	r.each.run(ctx, ds, r.one)
}

func (r *msgRunner[M]) one(ctx context.Context, d *Delivery) {
	defer func() {
		if p := recover(); p != nil {
			recovered(d, p)
		}
	}()
	d.outcome = r.fn(ctx, d, r.vals[d.slot])
}

func (r *msgRunner[M]) reset() {
	clear(r.vals)
	r.vals = r.vals[:0]
}

// Item is one row of a batch: its delivery, its decoded message, and the
// outcome the batch handler sets (Ack unless it sets another).
type Item[M any] struct {
	Delivery *Delivery
	Msg      M
	Outcome  Outcome
}

// Batches handles a claim of up to Subscription.Batch rows at once in
// payload mode: each row is decoded on its own (a row that does not decode
// is settled by the decode policy and left out), and fn sets each item's
// Outcome. A panic in fn retries every row of the call.
func Batches[M any](fn func(ctx context.Context, items []Item[M])) Handler {
	return batchHandler[M]{fn: fn}
}

type batchHandler[M any] struct {
	fn func(ctx context.Context, items []Item[M])
}

func (batchHandler[M]) mode() handlerMode { return modePayload }

func (h batchHandler[M]) newRunner(b *Broker, s *Subscription) runner {
	return &batchRunner[M]{b: b, fn: h.fn}
}

type batchRunner[M any] struct {
	codecs
	b     *Broker
	fn    func(ctx context.Context, items []Item[M])
	items []Item[M]
}

func (r *batchRunner[M]) read(d *Delivery, body []byte) error {
	r.items = append(r.items, Item[M]{Delivery: d, Outcome: Ack})
	it := &r.items[len(r.items)-1]
	if err := r.decode(r.b, d.ContentType, body, &it.Msg); err != nil {
		r.items = r.items[:len(r.items)-1]
		return err
	}
	return nil
}

func (r *batchRunner[M]) run(ctx context.Context, ds []*Delivery) {
	if len(r.items) == 0 {
		return
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				for i := range r.items {
					recovered(r.items[i].Delivery, p)
					r.items[i].Outcome = r.items[i].Delivery.outcome
				}
			}
		}()
		r.fn(ctx, r.items)
	}()
	for i := range r.items {
		r.items[i].Delivery.outcome = r.items[i].Outcome
	}
}

func (r *batchRunner[M]) reset() {
	clear(r.items)
	r.items = r.items[:0]
}

// Rows handles one row at a time in row mode: the table has no payload
// column, no codec runs, and fn reads the row's Table.RowColumns as the
// driver read them.
func Rows(fn func(ctx context.Context, d *Delivery, r *Row) Outcome) Handler {
	return rowHandler{fn: fn}
}

type rowHandler struct {
	fn func(ctx context.Context, d *Delivery, r *Row) Outcome
}

func (rowHandler) mode() handlerMode { return modeRow }

func (h rowHandler) newRunner(b *Broker, s *Subscription) runner {
	return &rowRunner{fn: h.fn, each: concurrent{n: s.Concurrency}}
}

type rowRunner struct {
	fn   func(ctx context.Context, d *Delivery, r *Row) Outcome
	each concurrent
}

func (r *rowRunner) read(d *Delivery, body []byte) error { return nil }

func (r *rowRunner) run(ctx context.Context, ds []*Delivery) {
	if r.each.alone(ds) {
		for _, d := range ds {
			if d.undec == nil {
				r.one(ctx, d)
			}
		}
		return
	}
	r.each.run(ctx, ds, r.one)
}

func (r *rowRunner) one(ctx context.Context, d *Delivery) {
	defer func() {
		if p := recover(); p != nil {
			recovered(d, p)
		}
	}()
	d.outcome = r.fn(ctx, d, &d.row)
}

// concurrent runs one row-at-a-time handler over a claim's deliveries, up
// to n at once: the rows of one key one after another in claim order (the
// claim's order of a key's rows is their id order), different keys side by
// side. Rows whose payload did not decode are skipped.
type concurrent struct {
	n      int
	chains [][]*Delivery  // the claim's rows by key, in claim order
	byKey  map[string]int // key → its chain
	next   atomic.Int64   // the next chain to run
}

// alone reports whether ds run one after another (one row, or a
// concurrency of 1).
func (c *concurrent) alone(ds []*Delivery) bool { return c.n <= 1 || len(ds) <= 1 }

func (c *concurrent) run(ctx context.Context, ds []*Delivery, one func(context.Context, *Delivery)) {
	if c.alone(ds) {
		for _, d := range ds {
			if d.undec == nil {
				one(ctx, d)
			}
		}
		return
	}
	if c.byKey == nil {
		c.byKey = map[string]int{}
	}
	clear(c.byKey)
	n := 0
	for _, d := range ds {
		if d.undec != nil {
			continue
		}
		i, ok := c.byKey[d.Key]
		if !ok {
			i = n
			n++
			c.byKey[d.Key] = i
			if i == len(c.chains) {
				c.chains = append(c.chains, nil)
			}
			c.chains[i] = c.chains[i][:0]
		}
		c.chains[i] = append(c.chains[i], d)
	}
	c.next.Store(0)
	work := func() {
		for {
			i := int(c.next.Add(1) - 1)
			if i >= n {
				return
			}
			for _, d := range c.chains[i] {
				one(ctx, d)
			}
		}
	}
	var wg sync.WaitGroup
	for range min(c.n, n) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	for i := range n {
		clear(c.chains[i])
	}
}

func (r *rowRunner) reset() {}
