package pgbridge

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Outgoing is a message for an inbox (or outbox) table: the row's key, the
// message's type name and content type, its encoded body (lent: the
// publisher passes it to the driver and does not keep it) and its headers,
// and how the row is to be claimed: its priority (higher first), when it
// becomes ready, and its dedupe key.
type Outgoing struct {
	Key         string
	Type        string
	ContentType string
	Body        []byte
	Headers     map[string]string
	Priority    int16
	// RunAt: the row is not claimed before it (zero: now).
	RunAt time.Time
	// DedupeKey, if set, is stored in the table's dedupe column: while a
	// row with the same dedupe key is in the table (not yet settled), the
	// message is not inserted again (Published.Duplicate). Needs the
	// column and its unique index (Migrate makes both).
	DedupeKey string
}

// Published is what a publish did: the new row's id, or that a row with
// the message's dedupe key was already in the table (Duplicate; ID 0).
type Published struct {
	ID        int64
	Duplicate bool
}

// Publisher inserts messages into tables. db is where the insert runs: the
// pool, or a transaction of the caller's (the outbox pattern: the message
// is published exactly when that transaction commits).
type Publisher interface {
	Publish(ctx context.Context, db Querier, m Outgoing) error
}

// Inserter is a Publisher that also reports what it inserted (Repository
// and Routed are both).
type Inserter interface {
	Publisher
	Insert(ctx context.Context, db Querier, m Outgoing) (Published, error)
	// InsertMany inserts ms with one statement (one round trip) and
	// reports each message's row, in ms's order.
	InsertMany(ctx context.Context, db Querier, ms []Outgoing) ([]Published, error)
}

// Repository publishes every message into one fixed table.
type Repository struct {
	Broker *Broker
	Table  Table
}

// Publish inserts m into the repository's table.
func (r Repository) Publish(ctx context.Context, db Querier, m Outgoing) error {
	_, err := r.Broker.insert(ctx, db, r.Table, m, false)
	return err
}

// Insert inserts m into the repository's table and reports its row.
func (r Repository) Insert(ctx context.Context, db Querier, m Outgoing) (Published, error) {
	return r.Broker.insert(ctx, db, r.Table, m, true)
}

// InsertMany inserts ms into the repository's table with one statement.
func (r Repository) InsertMany(ctx context.Context, db Querier, ms []Outgoing) ([]Published, error) {
	return r.Broker.insertMany(ctx, db, r.Table, ms)
}

// Routed publishes a message into the table its type name is routed to
// (Config.Routes); a type without a route is ErrNoRoute.
type Routed struct {
	Broker *Broker
}

// Publish inserts m into the table of its route.
func (r Routed) Publish(ctx context.Context, db Querier, m Outgoing) error {
	t, err := r.route(m.Type)
	if err != nil {
		return err
	}
	_, err = r.Broker.insert(ctx, db, t, m, false)
	return err
}

// Insert inserts m into the table of its route and reports its row.
func (r Routed) Insert(ctx context.Context, db Querier, m Outgoing) (Published, error) {
	t, err := r.route(m.Type)
	if err != nil {
		return Published{}, err
	}
	return r.Broker.insert(ctx, db, t, m, true)
}

// InsertMany inserts ms — all of one type, so of one route — with one
// statement.
func (r Routed) InsertMany(ctx context.Context, db Querier, ms []Outgoing) ([]Published, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	for _, m := range ms[1:] {
		if m.Type != ms[0].Type {
			return nil, payload.NewError(payload.InvalidOperation, "pgbridge.Routed",
				"InsertMany takes messages of one type: "+ms[0].Type+" and "+m.Type)
		}
	}
	t, err := r.route(ms[0].Type)
	if err != nil {
		return nil, err
	}
	return r.Broker.insertMany(ctx, db, t, ms)
}

func (r Routed) route(typ string) (Table, error) {
	t, ok := r.Broker.routes[typ]
	if !ok {
		r.Broker.stats.noRoute.Add(1)
		return Table{}, payload.Wrap(payload.NotFound, "pgbridge.Routed", &routeError{typ: typ})
	}
	return t, nil
}

type routeError struct{ typ string }

func (e *routeError) Error() string { return "no route for message type " + e.typ }
func (e *routeError) Is(target error) bool {
	return target == ErrNoRoute
}

// check refuses a message the broker or the table cannot take.
func (b *Broker) check(t Table, c Columns, m *Outgoing) error {
	if b.shut.Load() {
		return ErrClosed
	}
	if len(m.Headers) > 0 && c.Headers == "" {
		return payload.NewError(payload.CapacityExceeded, "pgbridge.Publish",
			"table "+t.Name+" has no headers column for the message's "+itoa(len(m.Headers))+" headers")
	}
	if m.Type != "" && c.Type == "" || c.Payload == "" || c.ContentType == "" {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Publish",
			"table "+t.Name+" cannot hold a message (needs type, content_type and payload columns)")
	}
	if m.DedupeKey != "" && c.DedupeKey == "" {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Publish",
			"table "+t.Name+" has no dedupe column for the message's dedupe key")
	}
	if !m.RunAt.IsZero() && c.RunAt == "" {
		return payload.NewError(payload.InvalidOperation, "pgbridge.Publish", "table "+t.Name+" has no run_at column")
	}
	return nil
}

// headersJSON is m's headers as JSON text (a text parameter works in every
// query mode), nil without any.
func headersJSON(h map[string]string) (*string, error) {
	if len(h) == 0 {
		return nil, nil
	}
	j, err := json.Marshal(h)
	if err != nil {
		return nil, payload.Wrap(payload.InvalidOperation, "pgbridge.Publish", err)
	}
	s := string(j)
	return &s, nil
}

// The variants of a table's insert statement (insertSQLs.sql's index).
const (
	insNotify    = 1 << iota // pg_notify on the table's channel
	insDedupe                // a dedupe key: ON CONFLICT DO NOTHING
	insReturning             // RETURNING the row's id
	insRunAt                 // a run_at
	insVariants  = 1 << iota
)

// insert checks the broker and the table, inserts m and announces it; ret:
// report the row (a statement with RETURNING).
func (b *Broker) insert(ctx context.Context, db Querier, t Table, m Outgoing, ret bool) (Published, error) {
	c := t.cols()
	if err := b.check(t, c, &m); err != nil {
		return Published{}, err
	}
	hdr, err := headersJSON(m.Headers)
	if err != nil {
		return Published{}, err
	}
	args := [9]any{m.Key, m.Type, m.ContentType, m.Body}
	n, v := 4, 0
	if c.Headers != "" {
		args[n] = hdr
		n++
	}
	if c.Priority != "" {
		args[n] = m.Priority
		n++
	}
	if !m.RunAt.IsZero() {
		args[n] = m.RunAt
		n++
		v |= insRunAt
	}
	if m.DedupeKey != "" {
		args[n] = m.DedupeKey
		n++
		v |= insDedupe
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
	if notify {
		args[n] = channelName(t.Name)
		n++
		v |= insNotify
	}
	var p Published
	if ret || m.DedupeKey != "" {
		v |= insReturning
		p, err = insertReturning(ctx, db, b.insertSQL(t, c, v), args[:n])
	} else {
		_, err = db.Exec(ctx, b.insertSQL(t, c, v), args[:n]...)
	}
	if err != nil {
		return Published{}, dbError("pgbridge.Publish", err)
	}
	if p.Duplicate {
		b.stats.duplicates.Add(1)
		return p, nil
	}
	if notify {
		b.stats.notifies.Add(1)
	}
	b.stats.published.Add(1)
	b.published(db, ct, inTx, t.Name)
	return p, nil
}

// insertReturning runs an insert that returns the row's id (none: the
// dedupe key's row is in the table). Its own function, so that the id
// scanned into does not move the publish's result to the heap.
func insertReturning(ctx context.Context, db Querier, sql string, args []any) (Published, error) {
	var id int64
	err := db.QueryRow(ctx, sql, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Published{Duplicate: true}, nil
	}
	return Published{ID: id}, err
}

// published wakes the subscriptions of a table a row was inserted into,
// when the row is visible.
func (b *Broker) published(db Querier, ct *claimTx, inTx bool, table string) {
	switch {
	case ct != nil:
		ct.wakeAfterCommit(table) // a claim's transaction: its claimer commits it
	case !inTx || b.notify == nil:
		// Autocommit: visible now. A caller's transaction without
		// ListenNotify: nothing will announce the commit, so wake now —
		// a claim that comes before the commit finds nothing, and the row
		// waits for the poll.
		b.wakeTable(table)
	}
}

// insertMany inserts ms into t with one statement (unnest of arrays) and
// reports each message's row.
func (b *Broker) insertMany(ctx context.Context, db Querier, t Table, ms []Outgoing) ([]Published, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	c := t.cols()
	keys, types, cts := make([]string, len(ms)), make([]string, len(ms)), make([]string, len(ms))
	bodies, hdrs := make([][]byte, len(ms)), make([]*string, len(ms))
	prios, runAts, dedupes := make([]int16, len(ms)), make([]*time.Time, len(ms)), make([]*string, len(ms))
	for i := range ms {
		m := &ms[i]
		if err := b.check(t, c, m); err != nil {
			return nil, err
		}
		h, err := headersJSON(m.Headers)
		if err != nil {
			return nil, err
		}
		keys[i], types[i], cts[i], bodies[i], hdrs[i], prios[i] = m.Key, m.Type, m.ContentType, m.Body, h, m.Priority
		if !m.RunAt.IsZero() {
			runAts[i] = &m.RunAt
		}
		if m.DedupeKey != "" {
			dedupes[i] = &m.DedupeKey
		}
	}
	args := []any{keys, types, cts, bodies}
	if c.Headers != "" {
		args = append(args, hdrs)
	}
	if c.Priority != "" {
		args = append(args, prios)
	}
	if c.RunAt != "" {
		args = append(args, runAts)
	}
	dedupe := slices.ContainsFunc(dedupes, func(k *string) bool { return k != nil })
	if dedupe {
		args = append(args, dedupes)
	}
	ct, inTx := inTransaction(db)
	notify := b.notify != nil && (inTx || b.notify.due(channelName(t.Name)))
	if notify {
		args = append(args, channelName(t.Name))
	}
	rows, err := db.Query(ctx, b.insertManySQL(t, c, notify, dedupe), args...)
	if err != nil {
		return nil, dbError("pgbridge.Publish", err)
	}
	// The rows are inserted in ms's order, so their ids increase in it;
	// a message is a duplicate when its dedupe key is not among those the
	// statement inserted (or an earlier message of ms took it).
	type ins struct {
		id  int64
		key *string
	}
	var got []ins
	for rows.Next() {
		var r ins
		if err := rows.Scan(&r.id, &r.key); err != nil {
			rows.Close()
			return nil, dbError("pgbridge.Publish", err)
		}
		got = append(got, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, dbError("pgbridge.Publish", err)
	}
	slices.SortFunc(got, func(a, b ins) int { return cmp.Compare(a.id, b.id) })
	out := make([]Published, len(ms))
	j := 0
	for i := range ms {
		if j < len(got) && (dedupes[i] == nil || got[j].key != nil && *got[j].key == *dedupes[i]) {
			out[i].ID = got[j].id
			j++
			continue
		}
		out[i].Duplicate = true
	}
	if j != len(got) {
		return out, payload.NewError(payload.InternalFailure, "pgbridge.Publish", "inserted rows do not match the messages")
	}
	b.stats.duplicates.Add(uint64(len(ms) - j))
	if j == 0 {
		return out, nil
	}
	if notify {
		b.stats.notifies.Add(1)
	}
	b.stats.published.Add(uint64(j))
	b.published(db, ct, inTx, t.Name)
	return out, nil
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

// insertSQL is the insert statement of a table in variant v (insNotify …).
func (b *Broker) insertSQL(t Table, c Columns, v int) string {
	return b.insertSQLs(t, c).sql[v]
}

// insertManySQL is the multi-row insert statement of a table.
func (b *Broker) insertManySQL(t Table, c Columns, notify, dedupe bool) string {
	v := 0
	if notify {
		v |= insNotify
	}
	if dedupe {
		v |= insDedupe
	}
	return b.insertSQLs(t, c).many[v]
}

// insertSQLs returns a table's insert statements, cached by table name for
// the columns it was first published with; the same name with other
// columns (rare) under a key naming them too.
func (b *Broker) insertSQLs(t Table, c Columns) *insertSQLs {
	key := t.Name
	if v, ok := b.sqlCache.Load(key); ok {
		e := v.(*insertSQLs)
		if e.cols == c {
			return e
		}
		key = t.Name + "\x00" + strings.Join([]string{c.Key, c.Type, c.ContentType, c.Payload, c.Headers, c.Priority, c.RunAt, c.DedupeKey, c.ID}, "\x00")
		if v, ok := b.sqlCache.Load(key); ok {
			return v.(*insertSQLs)
		}
	}
	e := &insertSQLs{cols: c}
	for v := range insVariants {
		e.sql[v] = buildInsert(t, c, v)
	}
	for v := range len(e.many) {
		e.many[v] = buildInsertMany(t, c, v)
	}
	v, _ := b.sqlCache.LoadOrStore(key, e)
	return v.(*insertSQLs)
}

// insertSQLs are a table's insert statements for its columns.
type insertSQLs struct {
	cols Columns
	sql  [insVariants]string
	many [insNotify | insDedupe + 1]string // by insNotify, insDedupe
}

// buildInsert writes the insert statement of variant v.
func buildInsert(t Table, c Columns, v int) string {
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
	if v&insRunAt != 0 && c.RunAt != "" {
		n++
		cols += ", " + q(c.RunAt)
		vals += ", $" + itoa(n) + "::timestamptz"
	}
	conflict := ""
	if v&insDedupe != 0 && c.DedupeKey != "" {
		n++
		cols += ", " + q(c.DedupeKey)
		vals += ", $" + itoa(n) + "::text"
		conflict = " ON CONFLICT (" + q(c.DedupeKey) + ") WHERE " + q(c.DedupeKey) + " IS NOT NULL DO NOTHING"
	}
	s := "INSERT INTO " + ident(t.Name) + " (" + cols + ") VALUES (" + vals + ")" + conflict
	switch {
	case v&insNotify != 0 && v&insReturning != 0:
		s = "WITH ins AS (" + s + " RETURNING " + q(c.ID) + ") SELECT " + q(c.ID) + " FROM ins, pg_notify($" + itoa(n+1) + "::text, '')"
	case v&insNotify != 0:
		s = "WITH ins AS (" + s + " RETURNING 1) SELECT pg_notify($" + itoa(n+1) + "::text, '') FROM (SELECT 1 FROM ins LIMIT 1) x"
	case v&insReturning != 0:
		s += " RETURNING " + q(c.ID)
	}
	return s
}

// buildInsertMany writes the multi-row insert statement: the messages as
// arrays, unnested WITH ORDINALITY and inserted in their order, each row's
// id and dedupe key returned.
func buildInsertMany(t Table, c Columns, v int) string {
	notify, dedupe := v&insNotify != 0, v&insDedupe != 0 && c.DedupeKey != ""
	cols := []string{q(c.Key), q(c.Type), q(c.ContentType), q(c.Payload)}
	arrs := []string{"$1::text[]", "$2::text[]", "$3::text[]", "$4::bytea[]"}
	add := func(col, typ string) {
		cols = append(cols, q(col))
		arrs = append(arrs, "$"+itoa(len(arrs)+1)+"::"+typ+"[]")
	}
	if c.Headers != "" {
		add(c.Headers, "jsonb")
	}
	if c.Priority != "" {
		add(c.Priority, "smallint")
	}
	runAt := -1
	if c.RunAt != "" {
		runAt = len(cols)
		add(c.RunAt, "timestamptz")
	}
	if dedupe {
		add(c.DedupeKey, "text")
	}
	sel := make([]string, len(cols))
	names := make([]string, len(cols))
	for i := range cols {
		names[i] = "c" + itoa(i)
		sel[i] = names[i]
	}
	if runAt >= 0 {
		sel[runAt] = "coalesce(" + names[runAt] + ", now())"
	}
	s := "INSERT INTO " + ident(t.Name) + " (" + strings.Join(cols, ", ") + ") SELECT " + strings.Join(sel, ", ") +
		" FROM unnest(" + strings.Join(arrs, ", ") + ") WITH ORDINALITY AS m(" + strings.Join(names, ", ") + ", ord) ORDER BY ord"
	key := "NULL::text"
	if dedupe {
		s += " ON CONFLICT (" + q(c.DedupeKey) + ") WHERE " + q(c.DedupeKey) + " IS NOT NULL DO NOTHING"
		key = q(c.DedupeKey)
	}
	s += " RETURNING " + q(c.ID) + ", " + key
	if notify {
		s = "WITH ins AS (" + s + ") SELECT ins.* FROM ins LEFT JOIN LATERAL (SELECT pg_notify($" + itoa(len(arrs)+1) +
			"::text, '') FROM (SELECT 1 FROM ins LIMIT 1) x) n ON true"
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
	_, err := send(ctx, b, db, pub, key, msg, SendOptions{}, false)
	return err
}

// SendOptions are the row options of SendWith and SendMany.
type SendOptions struct {
	Headers  map[string]string
	Priority int16     // higher first
	RunAt    time.Time // not claimed before (zero: now)
	// DedupeKey: while a row with this dedupe key is in the table, the
	// message is not inserted again (Published.Duplicate).
	DedupeKey string
}

// SendWith is Send with row options, and reports the row: its id, or that
// it was a duplicate. pub must be an Inserter (Repository, Routed).
func SendWith[M any](ctx context.Context, b *Broker, db Querier, pub Inserter, key string, msg M, opts SendOptions) (Published, error) {
	return send(ctx, b, db, pub, key, msg, opts, true)
}

func send[M any](ctx context.Context, b *Broker, db Querier, pub Publisher, key string, msg M, opts SendOptions, ret bool) (Published, error) {
	ce, err := payload.SendCodecFor[M](b.reg)
	if err != nil {
		return Published{}, err
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
		return Published{}, payload.Wrap(payload.InvalidOperation, "pgbridge.Send", err)
	}
	m := Outgoing{Key: key, Type: actor.TypeName[M](), ContentType: ce.ContentType(), Body: body,
		Headers: opts.Headers, Priority: opts.Priority, RunAt: opts.RunAt, DedupeKey: opts.DedupeKey}
	var p Published
	if ret {
		p, err = pub.(Inserter).Insert(ctx, db, m)
	} else {
		err = pub.Publish(ctx, db, m)
	}
	if cap(body) <= 64<<10 {
		*bp = body[:0]
		encBufs.Put(bp)
	}
	return p, err
}

// Keyed is one message of SendMany: its row's key, the message and its
// row options.
type Keyed[M any] struct {
	Key  string
	Msg  M
	Opts SendOptions
}

// SendMany encodes msgs and inserts them through pub into db with one
// statement — one round trip, one notify — and reports each message's
// row, in msgs's order. Nothing is inserted if one does not encode or the
// statement fails.
func SendMany[M any](ctx context.Context, b *Broker, db Querier, pub Inserter, msgs []Keyed[M]) ([]Published, error) {
	ce, err := payload.SendCodecFor[M](b.reg)
	if err != nil {
		return nil, err
	}
	typ, ct := actor.TypeName[M](), ce.ContentType()
	ms := make([]Outgoing, len(msgs))
	var buf []byte
	ends := make([]int, len(msgs))
	for i := range msgs {
		if buf, err = ce.Codec().Encode(buf, &msgs[i].Msg); err != nil {
			return nil, payload.Wrap(payload.InvalidOperation, "pgbridge.SendMany", err)
		}
		ends[i] = len(buf)
	}
	start := 0
	for i, k := range msgs {
		ms[i] = Outgoing{Key: k.Key, Type: typ, ContentType: ct, Body: buf[start:ends[i]:ends[i]],
			Headers: k.Opts.Headers, Priority: k.Opts.Priority, RunAt: k.Opts.RunAt, DedupeKey: k.Opts.DedupeKey}
		start = ends[i]
	}
	return pub.InsertMany(ctx, db, ms)
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
