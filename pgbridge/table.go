package pgbridge

import (
	"context"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Columns names the columns of an inbox table. The zero value of a field
// means the default name (DefaultColumns); a table without a column sets it
// to "-" (row mode has no payload, content type or type column; only the
// lease form needs locked_until, and it must exist for Migrate's index).
type Columns struct {
	ID          string // bigint, unique, increasing: the per-key order
	Key         string // text: the object id (group)
	Type        string // text: the message type name (actor.TypeName)
	ContentType string // text: the payload's canonical content type
	Payload     string // bytea: the encoded message body
	Headers     string // jsonb, nullable: string headers
	Attempt     string // int: attempts so far
	RunAt       string // timestamptz: not before
	Priority    string // smallint: higher first
	LockedUntil string // timestamptz, nullable: the lease token
	LastError   string // text, nullable
	DedupeKey   string // text, nullable, unique where set: Outgoing.DedupeKey
}

// DefaultColumns returns the column names Migrate creates.
func DefaultColumns() Columns {
	return Columns{ID: "id", Key: "key", Type: "type", ContentType: "content_type", Payload: "payload",
		Headers: "headers", Attempt: "attempt", RunAt: "run_at", Priority: "priority",
		LockedUntil: "locked_until", LastError: "last_error", DedupeKey: "dedupe_key"}
}

// Table describes an inbox table and its dead-letter table.
type Table struct {
	// Name is the inbox table, optionally schema-qualified ("s.inbox").
	Name string
	// Columns names its columns; zero fields take DefaultColumns' names.
	Columns Columns
	// DeadLetter is the dead-letter table (the inbox's columns plus
	// dead_at and reason); "" means none: the DeadLetter outcome, the
	// DecodeDeadLetter policy and MaxAttempts are then configuration errors.
	DeadLetter string
	// RowColumns are further columns a row-mode handler reads (Row.Values,
	// in this order). Dead-lettering copies them too.
	RowColumns []string
}

func (t Table) cols() Columns {
	d := DefaultColumns()
	c := t.Columns
	pick := func(s, def string) string {
		switch s {
		case "":
			return def
		case "-":
			return ""
		}
		return s
	}
	return Columns{ID: pick(c.ID, d.ID), Key: pick(c.Key, d.Key), Type: pick(c.Type, d.Type),
		ContentType: pick(c.ContentType, d.ContentType), Payload: pick(c.Payload, d.Payload),
		Headers: pick(c.Headers, d.Headers), Attempt: pick(c.Attempt, d.Attempt), RunAt: pick(c.RunAt, d.RunAt),
		Priority: pick(c.Priority, d.Priority), LockedUntil: pick(c.LockedUntil, d.LockedUntil),
		LastError: pick(c.LastError, d.LastError), DedupeKey: pick(c.DedupeKey, d.DedupeKey)}
}

// ident quotes a possibly schema-qualified name.
func ident(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

func q(col string) string { return pgx.Identifier{col}.Sanitize() }

// maxChannel is the longest channel name Postgres takes, in bytes
// (NAMEDATALEN − 1): pg_notify refuses a longer one, LISTEN truncates it.
const maxChannel = 63

// channelName is the pg_notify channel of a table: berth_inbox_ and the
// table's name; past maxChannel bytes, as much of that as fits (whole
// characters) and a hash of the whole name, so that every table's
// channel fits and tables that share a long prefix do not share one.
func channelName(table string) string {
	c := "berth_inbox_" + strings.NewReplacer(".", "_", `"`, "").Replace(table)
	if len(c) <= maxChannel {
		return c
	}
	h := fnv.New64a()
	h.Write([]byte(table))
	sum := "_" + strconv.FormatUint(h.Sum64(), 36)
	c = c[:maxChannel-len(sum)]
	for !utf8.ValidString(c) { // a character cut in two
		c = c[:len(c)-1]
	}
	return c + sum
}

// InboxDDL returns the SQL of Migrate's first step for an inbox table
// named name with the default columns: the table, the partial index on its
// ready set in claim order (priority descending as -priority, then id:
// claims use it for their order and to continue from the latest claim's
// position), the index the per-key order guard and the advisory form use,
// the index of leased rows the lease rescue uses, and (when deadLetter is
// not "") the dead-letter table. Migrate's second step adds the dedupe
// column (dedupe_key text) and its unique index over the rows that have
// one.
//
//	CREATE TABLE IF NOT EXISTS inbox (
//	    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
//	    key          text        NOT NULL,
//	    type         text        NOT NULL DEFAULT '',
//	    content_type text        NOT NULL DEFAULT 'application/json',
//	    payload      bytea,
//	    headers      jsonb,
//	    attempt      integer     NOT NULL DEFAULT 0,
//	    run_at       timestamptz NOT NULL DEFAULT now(),
//	    priority     smallint    NOT NULL DEFAULT 0,
//	    locked_until timestamptz,
//	    last_error   text
//	);
//	CREATE INDEX IF NOT EXISTS inbox_ready ON inbox ((-priority::integer), id) WHERE locked_until IS NULL;
//	CREATE INDEX IF NOT EXISTS inbox_key ON inbox (key, id);
//	CREATE INDEX IF NOT EXISTS inbox_leased ON inbox (locked_until) WHERE locked_until IS NOT NULL;
//	CREATE TABLE IF NOT EXISTS inbox_dead (LIKE inbox INCLUDING DEFAULTS,
//	    dead_at timestamptz NOT NULL DEFAULT now(), reason text);
func InboxDDL(name, deadLetter string) string {
	base := strings.ReplaceAll(strings.ReplaceAll(name, ".", "_"), `"`, "")
	t := ident(name)
	s := `CREATE TABLE IF NOT EXISTS ` + t + ` (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key          text        NOT NULL,
    type         text        NOT NULL DEFAULT '',
    content_type text        NOT NULL DEFAULT 'application/json',
    payload      bytea,
    headers      jsonb,
    attempt      integer     NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL DEFAULT now(),
    priority     smallint    NOT NULL DEFAULT 0,
    locked_until timestamptz,
    last_error   text
);
CREATE INDEX IF NOT EXISTS ` + q(base+"_ready") + ` ON ` + t + ` ((-priority::integer), id) WHERE locked_until IS NULL;
CREATE INDEX IF NOT EXISTS ` + q(base+"_key") + ` ON ` + t + ` (key, id);
CREATE INDEX IF NOT EXISTS ` + q(base+"_leased") + ` ON ` + t + ` (locked_until) WHERE locked_until IS NOT NULL;
`
	if deadLetter != "" {
		s += `CREATE TABLE IF NOT EXISTS ` + ident(deadLetter) + ` (LIKE ` + t + ` INCLUDING DEFAULTS,
    dead_at timestamptz NOT NULL DEFAULT now(),
    reason  text
);
`
	}
	return s
}

// Execer runs SQL: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Querier runs SQL and reads rows: a *pgxpool.Pool, a *pgx.Conn, a pgx.Tx
// or a Delivery's Tx.
type Querier interface {
	Execer
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
