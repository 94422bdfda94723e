// Package migrate applies versioned schema migrations to Postgres: the one
// runner pgstore.Migrate and pgbridge.Migrate share.
//
// A Plan names a version table, an optional scope within it (pgbridge
// migrates each inbox table on its own and keys its version table by
// table), the advisory lock key its Applies serialize on, and its ordered
// steps. Apply brings the database (or the plan's scope) up to the plan's
// last step.
//
// Invariants:
//   - Apply runs in one transaction (a savepoint when db is itself a
//     pgx.Tx): every missing step applies and is recorded, or nothing does —
//     Postgres DDL is transactional.
//   - Its first statement takes the transaction-level advisory lock
//     pg_advisory_xact_lock(Plan.LockKey), held until the commit: Applies
//     of one plan from any number of connections and processes run one
//     after another, each of them succeeds, and each step is applied once.
//     Plans with different keys (pgbridge's tables) run side by side.
//   - The version table is created when missing, under a second advisory
//     lock keyed by its name (Key("berth/migrate table " + Plan.Table)),
//     taken only while the table is missing, so that the first Applies of
//     different scopes do not race on CREATE TABLE.
//   - Step versions are 1, 2, 3…; each applied step is recorded with its
//     version and name, so a scope's recorded versions are 1..n for some n,
//     and Apply applies the steps above the highest. Only a plan's Stale
//     (which says that what the steps made is gone) makes it forget a
//     scope's records and apply every step again.
//   - A version table that records, for the scope, a version above the
//     plan's last step (a newer binary migrated it) is left alone: Apply
//     applies nothing and reports kind payload.NotConfigured with a
//     *NewerSchemaError (the binary is older than its database).
//   - A done context applies nothing, not even the version table.
//   - Failures carry a payload kind: Plan.Wrap's, or by default
//     Unavailable for a connection, serialization or resource failure,
//     DeadlineExceeded for a deadline and InternalFailure for a statement
//     the server refused.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Step is one migration: the SQL that takes a schema from version
// Version-1 to Version. Its SQL runs with the simple protocol, so it may
// hold several statements; it must not commit or roll back.
type Step struct {
	Version int    // 1 for the first step, then 2, 3…
	Name    string // recorded in the version table, for people
	SQL     string
}

// Plan is what Apply does: the steps to apply, where their versions are
// recorded, and the lock that serializes Applies of one plan.
type Plan struct {
	// Op names the operation in errors ("pgstore.Migrate").
	Op string
	// Table is the version table, optionally schema-qualified ("s.t").
	// Without a scope its columns are (version integer PRIMARY KEY, name,
	// applied_at); with one, (scope, version, name, applied_at) with
	// PRIMARY KEY (scope, version). Every plan on one table uses one shape.
	Table string
	// Scope is the set of versions this plan reads and writes in a keyed
	// version table (pgbridge: the inbox table's name); "" means the table
	// has no scope column.
	Scope string
	// LockKey is the key of the transaction-level advisory lock Apply takes
	// first; Applies that must not run at once share it (Key derives one
	// from a name). Other users of advisory locks on the database must not
	// use it.
	LockKey int64
	// Steps are the migrations, in order: Steps[i].Version is i+1.
	Steps []Step
	// Stale, if set, runs in the transaction after the lock and the check
	// for a newer schema, and reports whether the scope's recorded versions
	// no longer describe the database (what the steps made was dropped).
	// Apply then forgets them and applies every step again: the steps of a
	// plan with Stale must be idempotent (IF NOT EXISTS).
	Stale func(ctx context.Context, tx pgx.Tx) (bool, error)
	// Wrap, if set, turns a database failure (or the error of a done
	// context) into the error Apply returns. Nil wraps it with
	// payload.Wrap and a kind as the package doc says.
	Wrap func(err error) error
}

// Beginner begins a transaction: a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx
// (whose Begin makes a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// NewerSchemaError reports a version table that records a version above
// the plan's last step: a newer binary migrated the database. Apply returns
// it wrapped in a *payload.Error of kind NotConfigured.
type NewerSchemaError struct {
	Table string // the version table
	Scope string // the plan's scope; "" without one
	Have  int    // the highest version recorded
	Want  int    // the plan's last version
}

// Error says which version is newer than which.
func (e *NewerSchemaError) Error() string {
	of := ""
	if e.Scope != "" {
		of = fmt.Sprintf(" of %q", e.Scope)
	}
	return fmt.Sprintf("database schema version %d%s is newer than this binary's %d", e.Have, of, e.Want)
}

// Key returns an advisory lock key for name: its 64-bit FNV-1a hash. Keys of
// different names may collide (a collision only serializes two Applies).
func Key(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// check reports what is wrong with the plan, or "".
func (p Plan) check() string {
	if p.Table == "" {
		return "no version table"
	}
	for i, s := range p.Steps {
		if s.Version != i+1 {
			return fmt.Sprintf("steps are not numbered 1, 2, 3…: version %d at position %d", s.Version, i+1)
		}
	}
	return ""
}

// Apply brings the database up to p's last step, as the package doc says:
// in one transaction on db, under p's advisory lock, it creates p.Table if
// missing, refuses a recorded version above p's, and applies and records
// every step above the recorded one, in order. A plan whose steps are not
// numbered 1, 2, 3… or that names no version table is refused with kind
// InvalidOperation.
func Apply(ctx context.Context, db Beginner, p Plan) error {
	if msg := p.check(); msg != "" {
		return payload.NewError(payload.InvalidOperation, p.Op, msg)
	}
	if err := ctx.Err(); err != nil {
		return p.wrap(err)
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return p.apply(ctx, tx) })
	var newer *NewerSchemaError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &newer):
		return payload.Wrap(payload.NotConfigured, p.Op, newer)
	}
	return p.wrap(err)
}

func (p Plan) apply(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", p.LockKey); err != nil {
		return err
	}
	if err := p.createTable(ctx, tx); err != nil {
		return err
	}
	table := ident(p.Table)
	where, args := "", []any(nil)
	if p.Scope != "" {
		where, args = " WHERE scope = $1", []any{p.Scope}
	}
	var have int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+table+where, args...).Scan(&have); err != nil {
		return err
	}
	if have > len(p.Steps) {
		return &NewerSchemaError{Table: p.Table, Scope: p.Scope, Have: have, Want: len(p.Steps)}
	}
	if have > 0 && p.Stale != nil {
		stale, err := p.Stale(ctx, tx)
		if err != nil {
			return err
		}
		if stale {
			if _, err := tx.Exec(ctx, "DELETE FROM "+table+where, args...); err != nil {
				return err
			}
			have = 0
		}
	}
	for _, s := range p.Steps[have:] {
		if _, err := tx.Exec(ctx, s.SQL); err != nil {
			return fmt.Errorf("migration %04d_%s: %w", s.Version, s.Name, err)
		}
		var err error
		if p.Scope != "" {
			_, err = tx.Exec(ctx, "INSERT INTO "+table+" (scope, version, name) VALUES ($1, $2, $3)", p.Scope, s.Version, s.Name)
		} else {
			_, err = tx.Exec(ctx, "INSERT INTO "+table+" (version, name) VALUES ($1, $2)", s.Version, s.Name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// createTable creates the version table if it is missing. Two
// transactions that both find it missing and both run CREATE TABLE IF NOT
// EXISTS collide on the catalog (the second waits for the first and then
// fails on pg_type's unique index), so a missing table is created under an
// advisory lock of its name; the lock is held until the commit, which is
// what makes the table visible to the next one (whose CREATE TABLE, taking
// the schema's lock, then sees it). A table that exists is not locked:
// scopes with different LockKeys then run side by side.
func (p Plan) createTable(ctx context.Context, tx pgx.Tx) error {
	table := ident(p.Table)
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", Key("berth/migrate table "+p.Table)); err != nil {
		return err
	}
	ddl := `CREATE TABLE IF NOT EXISTS ` + table + ` (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`
	if p.Scope != "" {
		ddl = `CREATE TABLE IF NOT EXISTS ` + table + ` (
	scope      text NOT NULL,
	version    integer NOT NULL,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (scope, version))`
	}
	_, err := tx.Exec(ctx, ddl)
	return err
}

// wrap turns a failure into the error Apply returns.
func (p Plan) wrap(err error) error {
	if p.Wrap != nil {
		return p.Wrap(err)
	}
	return payload.Wrap(kind(err), p.Op, err)
}

// kind is the default kind of a failure.
func kind(err error) payload.Kind {
	if errors.Is(err, context.DeadlineExceeded) {
		return payload.DeadlineExceeded
	}
	var pge *pgconn.PgError
	if !errors.As(err, &pge) {
		return payload.Unavailable // the connection failed, or the pool could not get one
	}
	if len(pge.Code) == 5 {
		switch pge.Code[:2] {
		case "08", "40", "53", "57", "58": // connection, serialization/deadlock, resources, shutting down, system
			return payload.Unavailable
		}
	}
	return payload.InternalFailure
}

// ident quotes a possibly schema-qualified name.
func ident(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}
