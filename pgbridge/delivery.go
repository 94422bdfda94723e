package pgbridge

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Delivery is one claimed row on its way to a handler: its id, key and
// attempt, and the handle of its claim form. It is valid until the handler
// returns (the bridge reuses it); a handler must not keep it.
type Delivery struct {
	ID          int64
	Key         string
	Attempt     int    // this attempt, counting from 1
	Type        string // the type column ("" without one)
	ContentType string // the content_type column ("" without one)

	form  Form
	conn  *pgx.Conn // row lock: the claim's transaction; advisory: the key's connection
	tx    *claimTx  // row lock: the claim's transaction, as handlers see it
	token time.Time // lease: the claim's token (locked_until)

	hdrRaw []byte // lent from the claimer's arena; nil when NULL
	hdrMu  sync.Mutex
	hdr    map[string]string
	hdrErr error
	hdrOK  bool

	row     Row
	outcome Outcome
	lost    atomic.Bool // lease lost before settlement
	tokMu   sync.Mutex
	undec   error // decode failure, settled by the decode policy
	serr    error // the row's own settlement failed (settleEach)
	slot    int   // index of the typed value in the handler's slice
	claimNs int64
}

// Tx is the claim's transaction in the row-lock form (nil in the others):
// statements on it commit or roll back with the row's settlement — a reply
// inserted through it (Repository, Routed, Send) is published exactly when
// the row is settled. In a batch it is shared by every row of the claim,
// whose handlers may run side by side (Subscription.Concurrency): it runs
// one statement at a time, from the statement's start until its rows are
// read to the end or closed (or a QueryRow's Scan) — so a handler finishes
// with one Query's rows before its next statement on it.
func (d *Delivery) Tx() Querier {
	if d.form != RowLock || d.tx == nil {
		return nil
	}
	return d.tx
}

// claimTx is a row-lock claim's transaction as a handler sees it: its
// connection, and its claimer — which wakes, after the commit, the
// subscriptions of the tables a publish in it inserted into.
//
// The rows of a batch may run side by side (Subscription.Concurrency) and
// share the transaction: one statement runs at a time (use, the lock of
// the connection, is held from a statement's start until its rows are
// read or closed).
type claimTx struct {
	conn  *pgx.Conn
	c     *claimer
	use   sync.Mutex
	mu    sync.Mutex
	wakes []string // tables published into, to wake after the commit
}

// Exec runs sql in the claim's transaction.
func (t *claimTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.use.Lock()
	defer t.use.Unlock()
	return t.conn.Exec(ctx, sql, args...)
}

// Query runs sql in the claim's transaction; the transaction runs no other
// statement until the rows are read to their end or closed.
func (t *claimTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t.use.Lock()
	rows, err := t.conn.Query(ctx, sql, args...)
	if err != nil {
		t.use.Unlock()
		return nil, err
	}
	return &txRows{Rows: rows, t: t}, nil
}

// QueryRow runs sql in the claim's transaction.
func (t *claimTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	t.use.Lock()
	return txRow{row: t.conn.QueryRow(ctx, sql, args...), t: t}
}

// txRows are a claim transaction's rows: reading them to their end, or
// closing them, frees the transaction for the next statement.
type txRows struct {
	pgx.Rows
	t    *claimTx
	done bool
}

func (r *txRows) free() {
	if !r.done {
		r.done = true
		r.t.use.Unlock()
	}
}

// Next advances to the next row.
func (r *txRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.free()
	return false
}

// Close closes the rows.
func (r *txRows) Close() {
	r.Rows.Close()
	r.free()
}

type txRow struct {
	row pgx.Row
	t   *claimTx
}

// Scan reads the row and frees the transaction.
func (r txRow) Scan(dest ...any) error {
	defer r.t.use.Unlock()
	return r.row.Scan(dest...)
}

// wakeAfterCommit notes that a row was published into table.
func (t *claimTx) wakeAfterCommit(table string) {
	t.mu.Lock()
	if !slices.Contains(t.wakes, table) {
		t.wakes = append(t.wakes, table)
	}
	t.mu.Unlock()
}

// committed wakes the tables published into (the claim committed) and
// forgets them.
func (t *claimTx) committed(b *Broker) {
	t.mu.Lock()
	w := t.wakes
	t.wakes = t.wakes[:0]
	t.mu.Unlock()
	for _, table := range w {
		b.wakeTable(table)
	}
}

// forget forgets the tables published into (the claim rolled back).
func (t *claimTx) forget() {
	t.mu.Lock()
	t.wakes = t.wakes[:0]
	t.mu.Unlock()
}

// Conn is the connection holding the key's advisory lock in the advisory
// form (nil in the others).
func (d *Delivery) Conn() Querier {
	if d.form != Advisory {
		return nil
	}
	return d.conn
}

// LeaseToken is the lease-form token: the row's locked_until as claimed (or
// last extended). Zero in the other forms.
func (d *Delivery) LeaseToken() time.Time {
	d.tokMu.Lock()
	defer d.tokMu.Unlock()
	return d.token
}

func (d *Delivery) setToken(t time.Time) {
	d.tokMu.Lock()
	d.token = t
	d.tokMu.Unlock()
}

// LeaseLost reports (lease form) that an extension found the row's lease
// taken over while the handler ran: its settlement will change nothing.
func (d *Delivery) LeaseLost() bool { return d.lost.Load() }

func (d *Delivery) markLost() { d.lost.Store(true) }

// Headers returns the row's headers column (a JSON object of strings),
// parsed on the first call; a handler that never calls it never pays for
// parsing. A NULL column is an empty map; a malformed one a ProtocolError.
func (d *Delivery) Headers() (map[string]string, error) {
	d.hdrMu.Lock()
	defer d.hdrMu.Unlock()
	if !d.hdrOK {
		d.hdrOK = true
		d.hdr = map[string]string{}
		if len(d.hdrRaw) > 0 {
			if err := json.Unmarshal(d.hdrRaw, &d.hdr); err != nil {
				d.hdrErr = payload.Wrap(payload.ProtocolError, "pgbridge.Delivery.Headers", err)
			}
		}
	}
	return d.hdr, d.hdrErr
}

func (d *Delivery) reset() {
	d.ID, d.Key, d.Attempt, d.Type, d.ContentType = 0, "", 0, "", ""
	d.conn, d.tx, d.token, d.hdrRaw = nil, nil, time.Time{}, nil
	d.hdr, d.hdrErr, d.hdrOK = nil, nil, false
	d.row.vals = d.row.vals[:0]
	d.row.oids = d.row.oids[:0]
	d.row.fmts = d.row.fmts[:0]
	d.outcome, d.undec, d.serr, d.slot, d.claimNs = Ack, nil, nil, 0, 0
	d.lost.Store(false)
}

// Row is a row-mode row: the values of Table.RowColumns as the driver read
// them (raw wire bytes, kept in the claimer's reused arena; nil for NULL).
// Scan converts them with pgx's type map. A Row is valid until its handler
// returns.
type Row struct {
	ID      int64
	Key     string
	Attempt int
	Columns []string // Table.RowColumns
	vals    [][]byte
	oids    []uint32
	fmts    []int16
}

// Raw returns column i's raw value (nil for NULL).
func (r *Row) Raw(i int) []byte { return r.vals[i] }

// Scan reads column i into dst (a pointer, as pgx's Rows.Scan takes).
func (r *Row) Scan(i int, dst any) error {
	if err := typeMap.Scan(r.oids[i], r.fmts[i], r.vals[i], dst); err != nil {
		return payload.Wrap(payload.TypeMismatch, "pgbridge.Row.Scan", err)
	}
	return nil
}

var typeMap = pgtype.NewMap()

// Raw value decoders for the fixed columns: binary format (what pgx asks
// for with its statement cache) without allocating, text format through the
// type map.

func rawInt64(raw []byte, f int16, oid uint32) (int64, error) {
	if f == pgx.BinaryFormatCode {
		switch len(raw) {
		case 8:
			return int64(binary.BigEndian.Uint64(raw)), nil
		case 4:
			return int64(int32(binary.BigEndian.Uint32(raw))), nil
		case 2:
			return int64(int16(binary.BigEndian.Uint16(raw))), nil
		}
	}
	var v int64
	err := typeMap.Scan(oid, f, raw, &v)
	return v, err
}

var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func rawTime(raw []byte, f int16, oid uint32) (time.Time, error) {
	if raw == nil {
		return time.Time{}, nil
	}
	if f == pgx.BinaryFormatCode && len(raw) == 8 {
		us := int64(binary.BigEndian.Uint64(raw))
		return pgEpoch.Add(time.Duration(us) * time.Microsecond), nil
	}
	var v time.Time
	err := typeMap.Scan(oid, f, raw, &v)
	return v, err
}

// rawJSON returns the JSON text of a json or jsonb value.
func rawJSON(raw []byte, f int16, oid uint32) []byte {
	if f == pgx.BinaryFormatCode && oid == pgtype.JSONBOID && len(raw) > 0 && raw[0] == 1 {
		return raw[1:]
	}
	return raw
}
