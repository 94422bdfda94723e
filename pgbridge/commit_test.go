package pgbridge

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cutProxy forwards TCP connections to a Postgres server. Armed, it lets
// the next client message that contains COMMIT through, then drops every
// byte of the server's answer and closes both sides once the server has
// answered: the transaction committed, and its client never learns it.
type cutProxy struct {
	l     net.Listener
	to    string
	armed atomic.Bool
	cut   atomic.Int32
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, to string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, to: to}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { l.Close(); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		var cutting atomic.Bool
		answered := make(chan struct{}, 1)
		p.wg.Add(2)
		go func() { // client → server
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if p.armed.Load() && bytes.Contains(buf[:n], []byte("COMMIT")) && p.armed.CompareAndSwap(true, false) {
						cutting.Store(true)
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						break
					}
					if cutting.Load() {
						// Wait for the server's answer, then cut both sides.
						select {
						case <-answered:
						case <-time.After(5 * time.Second):
						}
						p.cut.Add(1)
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
			s.Close()
		}()
		go func() { // server → client
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if cutting.Load() {
						select {
						case answered <- struct{}{}:
						default:
						}
						continue // the answer is lost
					}
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
			s.Close()
		}()
	}
}

// TestRowLockCommitAnswerLostIsResolvedByTheServer: the connection ends
// after the settlement's COMMIT reached the server but before its answer
// came back. The bridge asks the server (txid_status) and reports the rows
// settled — not rolled back — and they are not run again.
func TestRowLockCommitAnswerLostIsResolvedByTheServer(t *testing.T) {
	_, db := newPool(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, u.Host)
	u.Host = proxy.l.Addr().String()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	// No prepare round trip: the COMMIT's text travels with its execution,
	// so the proxy cuts after the server ran it.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	sendJobs(t, b, tb, 4)
	var runs atomic.Int32
	var mu sync.Mutex
	var errs []error
	settled := 0
	proxy.armed.Store(true)
	subscribe(t, b, &Subscription{Table: tb, Batch: 4, PollInterval: 10 * time.Millisecond,
		OnSettled: func(d *Delivery, o Outcome, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				settled++
			}
		}},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { runs.Add(1); return Ack }))
	waitFor(t, "four settlements reported", func() bool { mu.Lock(); defer mu.Unlock(); return settled+len(errs) >= 4 })
	if err := b.Stop(bg); err != nil {
		t.Fatal(err)
	}
	if proxy.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d commits, want 1", proxy.cut.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 || settled != 4 {
		t.Fatalf("settled %d, errors %v: a committed settlement whose answer was lost must be reported settled", settled, errs)
	}
	if n := runs.Load(); n != 4 {
		t.Errorf("%d runs for 4 rows", n)
	}
	if st := b.Stats(); st.Rollbacks != 0 || st.Acked != 4 {
		t.Errorf("stats %+v", st)
	}
	if n := count(t, pool, "inbox"); n != 0 {
		t.Errorf("%d rows left", n)
	}
}
