package pgbridge

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Outgoing is a message for an inbox (or outbox) table: the row's key, the
// message's type name and content type, its encoded body (lent: the
// publisher passes it to the driver and does not keep it) and its headers.
type Outgoing struct {
	Key         string
	Type        string
	ContentType string
	Body        []byte
	Headers     map[string]string
	Priority    int16
}

// Publisher inserts messages into tables. db is where the insert runs: the
// pool, or a transaction of the caller's (the outbox pattern: the message
// is published exactly when that transaction commits).
type Publisher interface {
	Publish(ctx context.Context, db Querier, m Outgoing) error
}

// Repository publishes every message into one fixed table.
type Repository struct {
	Broker *Broker
	Table  Table
}

// Publish inserts m into the repository's table.
func (r Repository) Publish(ctx context.Context, db Querier, m Outgoing) error {
	return r.Broker.insert(ctx, db, r.Table, m)
}

// Routed publishes a message into the table its type name is routed to
// (Config.Routes); a type without a route is ErrNoRoute.
type Routed struct {
	Broker *Broker
}

// Publish inserts m into the table of its route.
func (r Routed) Publish(ctx context.Context, db Querier, m Outgoing) error {
	t, ok := r.Broker.routes[m.Type]
	if !ok {
		r.Broker.stats.noRoute.Add(1)
		return payload.Wrap(payload.NotFound, "pgbridge.Routed", &routeError{typ: m.Type})
	}
	return r.Broker.insert(ctx, db, t, m)
}

type routeError struct{ typ string }

func (e *routeError) Error() string { return "no route for message type " + e.typ }
func (e *routeError) Is(target error) bool {
	return target == ErrNoRoute
}

// insert checks the broker and the table, inserts m and announces it.
func (b *Broker) insert(ctx context.Context, db Querier, t Table, m Outgoing) error {
	if b.shut.Load() {
		return ErrClosed
	}
	c := t.cols()
	if len(m.Headers) > 0 && c.Headers == "" {
		return payload.NewError(payload.CapacityExceeded, "pgbridge.Publish",
			"table "+t.Name+" has no headers column for the message's "+itoa(len(m.Headers))+" headers")
	}
	if m.Type != "" && c.Type == "" || c.Payload == "" || c.ContentType == "" {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Publish",
			"table "+t.Name+" cannot hold a message (needs type, content_type and payload columns)")
	}
	var hdr *string // JSON text: a text parameter works in every query mode
	if len(m.Headers) > 0 {
		j, err := json.Marshal(m.Headers)
		if err != nil {
			return payload.Wrap(payload.InvalidOperation, "pgbridge.Publish", err)
		}
		s := string(j)
		hdr = &s
	}
	args := [7]any{m.Key, m.Type, m.ContentType, m.Body}
	n := 4
	if c.Headers != "" {
		args[n] = hdr
		n++
	}
	if c.Priority != "" {
		args[n] = m.Priority
		n++
	}
	// In a transaction the row is visible only at its commit: pg_notify in
	// the insert (Postgres delivers it at the commit, once per channel and
	// transaction) wakes the listeners then, and nothing wakes anyone
	// before — a subscription woken early finds nothing and sleeps until
	// its poll. The cooldown applies to autocommit inserts only: its
	// trailing notify, sent on another connection, could come before the
	// commit.
	ct, inTx := inTransaction(db)
	notify := b.notify != nil && (inTx || b.notify.due(channelName(t.Name)))
	var err error
	if notify {
		args[n] = channelName(t.Name)
		n++
		_, err = db.Exec(ctx, b.insertSQL(t, c, true), args[:n]...)
	} else {
		_, err = db.Exec(ctx, b.insertSQL(t, c, false), args[:n]...)
	}
	if err != nil {
		return dbError("pgbridge.Publish", err)
	}
	if notify {
		b.stats.notifies.Add(1)
	}
	b.stats.published.Add(1)
	switch {
	case ct != nil:
		ct.wakeAfterCommit(t.Name) // a claim's transaction: its claimer commits it
	case !inTx || b.notify == nil:
		// Autocommit: visible now. A caller's transaction without
		// ListenNotify: nothing will announce the commit, so wake now —
		// a claim that comes before the commit finds nothing, and the row
		// waits for the poll.
		b.wakeTable(t.Name)
	}
	return nil
}

// inTransaction reports whether db runs its statements in an open
// transaction (ct: a row-lock claim's, whose claimer knows when it
// commits).
func inTransaction(db Querier) (ct *claimTx, in bool) {
	switch x := db.(type) {
	case *claimTx:
		return x, true
	case pgx.Tx:
		return nil, true
	case *pgx.Conn:
		return nil, x.PgConn().TxStatus() != 'I'
	case *pgxpool.Conn:
		return nil, x.Conn().PgConn().TxStatus() != 'I'
	}
	return nil, false
}

// insertSQL is the insert statement of a table (with pg_notify on the
// table's channel in the same statement when notify is set).
func (b *Broker) insertSQL(t Table, c Columns, notify bool) string {
	n := 0
	if notify {
		n = 1
	}
	// Cached by table name, for the columns it was first published with;
	// the same name with other columns (rare) under a key naming them too.
	key := t.Name
	if v, ok := b.sqlCache.Load(key); ok {
		e := v.(*insertSQLs)
		if e.cols == c {
			return e.sql[n]
		}
		key = t.Name + "\x00" + strings.Join([]string{c.Key, c.Type, c.ContentType, c.Payload, c.Headers, c.Priority}, "\x00")
		if v, ok := b.sqlCache.Load(key); ok {
			return v.(*insertSQLs).sql[n]
		}
	}
	e := &insertSQLs{cols: c, sql: [2]string{b.buildInsert(t, c, false), b.buildInsert(t, c, true)}}
	v, _ := b.sqlCache.LoadOrStore(key, e)
	return v.(*insertSQLs).sql[n]
}

// insertSQLs are a table's insert statements for its columns: without and
// with pg_notify.
type insertSQLs struct {
	cols Columns
	sql  [2]string
}

func (b *Broker) buildInsert(t Table, c Columns, notify bool) string {
	cols := q(c.Key) + ", " + q(c.Type) + ", " + q(c.ContentType) + ", " + q(c.Payload)
	vals := "$1, $2, $3, $4"
	n := 4
	if c.Headers != "" {
		n++
		cols += ", " + q(c.Headers)
		vals += ", $" + itoa(n) + "::jsonb"
	}
	if c.Priority != "" {
		n++
		cols += ", " + q(c.Priority)
		vals += ", $" + itoa(n) + "::smallint"
	}
	s := "INSERT INTO " + ident(t.Name) + " (" + cols + ") VALUES (" + vals + ")"
	if notify {
		s = "WITH ins AS (" + s + " RETURNING 1) SELECT pg_notify($" + itoa(n+1) + "::text, '') FROM (SELECT 1 FROM ins LIMIT 1) x"
	}
	return s
}

// encBufs are the reused encode buffers of Send.
var encBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Send encodes msg (its declared type M picks the codec in the broker's
// registry and names the message) into a reused buffer and publishes it
// for key through pub into db — the pool, or the caller's own transaction
// (a transactional publish in one call).
func Send[M any](ctx context.Context, b *Broker, db Querier, pub Publisher, key string, msg M) error {
	ce, err := payload.SendCodecFor[M](b.reg)
	if err != nil {
		return err
	}
	bp := encBufs.Get().(*[]byte)
	box := getBox[M]() // &msg would escape through the codec interface
	*box = msg
	body, err := ce.Codec().Encode((*bp)[:0], box)
	var zero M
	*box = zero
	putBox(box)
	if err != nil {
		encBufs.Put(bp)
		return payload.Wrap(payload.InvalidOperation, "pgbridge.Send", err)
	}
	err = pub.Publish(ctx, db, Outgoing{Key: key, Type: actor.TypeName[M](), ContentType: ce.ContentType(), Body: body})
	if cap(body) <= 64<<10 {
		*bp = body[:0]
		encBufs.Put(bp)
	}
	return err
}

// boxes holds a sync.Pool of *M per message type M, for Send.
var boxes sync.Map // reflect.Type → *sync.Pool

func boxPool[M any]() *sync.Pool {
	t := reflect.TypeFor[M]()
	if p, ok := boxes.Load(t); ok {
		return p.(*sync.Pool)
	}
	p, _ := boxes.LoadOrStore(t, &sync.Pool{New: func() any { return new(M) }})
	return p.(*sync.Pool)
}

func getBox[M any]() *M  { return boxPool[M]().Get().(*M) }
func putBox[M any](b *M) { boxPool[M]().Put(b) }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
