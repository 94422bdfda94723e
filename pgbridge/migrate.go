package pgbridge

import (
	"context"
	"fmt"
	"strings"

	pgmigrate "github.com/berthrt/berth/internal/migrate"
	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
)

// versionTable records, per inbox table, the steps Migrate applied to it:
// (scope text, version integer, name text, applied_at timestamptz) with
// PRIMARY KEY (scope, version), the scope being Table.Name as given.
const versionTable = "pgbridge_schema_version"

// inboxStep is one migration of an inbox table: its name (recorded in the
// version table) and its SQL for a table.
type inboxStep struct {
	name string
	sql  func(t Table) string
}

// inboxSteps are the migrations of an inbox table, in order: inboxSteps[i]
// is version i+1. To change the schema, append a step; never edit, remove
// or reorder one that shipped — databases recorded it as applied. Every
// step must be idempotent (IF NOT EXISTS): Migrate applies them all again
// to a table whose inbox or dead-letter table is missing (it was dropped,
// or the dead-letter table was named only later), and step 1 adopts the
// tables the unversioned Migrate of earlier releases made.
var inboxSteps = []inboxStep{
	{name: "inbox", sql: func(t Table) string { return InboxDDL(t.Name, t.DeadLetter) }},
	{name: "dedupe_key", sql: dedupeDDL},
}

// dedupeDDL adds the dedupe column (Outgoing.DedupeKey) to an inbox table,
// and its unique index over the rows that have one.
func dedupeDDL(t Table) string {
	base := strings.ReplaceAll(strings.ReplaceAll(t.Name, ".", "_"), `"`, "")
	return "ALTER TABLE " + ident(t.Name) + " ADD COLUMN IF NOT EXISTS dedupe_key text;\n" +
		"CREATE UNIQUE INDEX IF NOT EXISTS " + q(base+"_dedupe") + " ON " + ident(t.Name) + " (dedupe_key) WHERE dedupe_key IS NOT NULL;\n"
}

// inboxSchemaVersion is the version Migrate brings an inbox table to.
func inboxSchemaVersion() int { return len(inboxSteps) }

// migrateLockKey is the key of the transaction-level advisory lock Migrate
// holds while it migrates the table named name: Migrates of one table wait
// for each other, those of different tables do not.
func migrateLockKey(name string) int64 { return pgmigrate.Key("berth/pgbridge.Migrate " + name) }

// migratePlan is Migrate's plan for t.
func migratePlan(op string, t Table) pgmigrate.Plan {
	steps := make([]pgmigrate.Step, len(inboxSteps))
	for i, s := range inboxSteps {
		steps[i] = pgmigrate.Step{Version: i + 1, Name: s.name, SQL: s.sql(t)}
	}
	return pgmigrate.Plan{
		Op:      op,
		Table:   versionTable,
		Scope:   t.Name,
		LockKey: migrateLockKey(t.Name),
		Steps:   steps,
		// The records stand while the tables they describe exist.
		Stale: func(ctx context.Context, tx pgx.Tx) (bool, error) {
			tables := []string{ident(t.Name)}
			if t.DeadLetter != "" {
				tables = append(tables, ident(t.DeadLetter))
			}
			var gone bool
			err := tx.QueryRow(ctx, "SELECT bool_or(to_regclass(n) IS NULL) FROM unnest($1::text[]) n", tables).Scan(&gone)
			return gone, err
		},
		Wrap: func(err error) error { return dbError(op, err) },
	}
}

// Migrate brings the inbox table t up to this package's schema: it
// creates the table (with the default columns), its indexes and its
// dead-letter table if they do not exist (InboxDDL), and applies the
// schema's later steps, recording each per table in the table
// pgbridge_schema_version (scope = t.Name). Tables of your own need only
// the columns a subscription reads; do not Migrate them.
//
// It is idempotent, and safe to run from several processes at once: it
// runs in one transaction that first takes a transaction-level advisory
// lock derived from t.Name (pg_advisory_xact_lock), so a second Migrate of
// the table waits for the first to commit and then finds nothing to do,
// while Migrates of other tables go on. On failure nothing is applied.
// Tables made by the unversioned Migrate of earlier releases are adopted;
// a table (or its dead-letter table) dropped since it was migrated is made
// again. A table whose recorded version is above this package's (a newer
// binary migrated it) is left alone and reported with kind NotConfigured.
//
// db must be able to begin a transaction (a *pgxpool.Pool, a *pgx.Conn, or
// a pgx.Tx, in which Migrate uses a savepoint; the lock is then held until
// that transaction ends); another Execer is refused with kind
// InvalidOperation, as is an empty table name.
func Migrate(ctx context.Context, db Execer, t Table) error {
	const op = "pgbridge.Migrate"
	if t.Name == "" {
		return payload.NewError(payload.InvalidOperation, op, "empty table name")
	}
	b, ok := db.(pgmigrate.Beginner)
	if !ok {
		return payload.NewError(payload.InvalidOperation, op,
			fmt.Sprintf("%T cannot begin a transaction: pass a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx", db))
	}
	return pgmigrate.Apply(ctx, b, migratePlan(op, t))
}
