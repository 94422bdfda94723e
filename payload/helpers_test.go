package payload

import (
	"sync"
	"sync/atomic"
	"testing"
)

// releaseLog is a Pool observer that counts releases per buffer id.
type releaseLog struct {
	mu     sync.Mutex
	counts map[uint64]int
	total  atomic.Int64
}

func newReleaseLog() *releaseLog { return &releaseLog{counts: map[uint64]int{}} }

func (l *releaseLog) observe(ev ReleaseEvent) {
	l.mu.Lock()
	l.counts[ev.ID]++
	l.mu.Unlock()
	l.total.Add(1)
}

func (l *releaseLog) count(id uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[id]
}

// countingCodec wraps JSON under its own content type and counts decode
// callbacks. fail makes every decode fail.
type countingCodec struct {
	ct      string
	decodes atomic.Int64
	encodes atomic.Int64
	fail    bool
}

func (c *countingCodec) ContentType() string { return c.ct }

func (c *countingCodec) Encode(dst []byte, v any) ([]byte, error) {
	c.encodes.Add(1)
	return JSON.Encode(dst, v)
}

func (c *countingCodec) Decode(data []byte, v any) error {
	c.decodes.Add(1)
	if c.fail {
		return errDecodeFailed
	}
	return JSON.Decode(data, v)
}

var errDecodeFailed = NewError(InternalFailure, "countingCodec", "decode failure injected by the test")

// mustPanic runs f and fails the test unless f panics.
func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s: did not panic", what)
		}
	}()
	f()
}

func testHeader() Header {
	return Header{
		Target: Target{Scope: ScopeObject, Name: "cart", ID: "cart-42"},
		Op:     NewOpID(),
	}
}

type Item struct {
	SKU   string   `json:"sku"`
	Qty   int      `json:"qty"`
	Notes []string `json:"notes,omitempty"`
}

type Other struct {
	Name string `json:"name"`
}

// frozen returns a frozen registry with the given registrations applied in order.
func frozen(t testing.TB, regs ...func(*Registry) error) *Registry {
	t.Helper()
	r := NewRegistry()
	for _, reg := range regs {
		if err := reg(r); err != nil {
			t.Fatal(err)
		}
	}
	r.Freeze()
	return r
}
