package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrateLockKey is the key of the transaction-level advisory lock Migrate
// holds while it applies migrations ("berth/pgstore" folded into 63 bits).
// Other users of advisory locks on the same database must not use it.
const migrateLockKey int64 = 0x6265727468_7067 // "berth" "pg"

// migration is one embedded .sql file: NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order. It panics
// on a misnamed file: the set is fixed at build time.
func migrations() []migration {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		panic("pgstore: " + err.Error())
	}
	var out []migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			panic("pgstore: migration file " + e.Name() + " is not named NNNN_name.sql")
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic("pgstore: " + err.Error())
		}
		out = append(out, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := range out {
		if out[i].version != i+1 {
			panic(fmt.Sprintf("pgstore: migrations are not numbered 1, 2, 3...: %d at position %d", out[i].version, i+1))
		}
	}
	return out
}

// SchemaVersion is the schema version this package's migrations produce:
// the number of its embedded migrations.
func SchemaVersion() int { return len(migrations()) }

// Migrate brings the database's pgstore schema up to SchemaVersion: it
// applies, in order, every embedded migration not yet recorded in the table
// pgstore_schema_version, and records each one. It is idempotent, and safe
// to run from several processes at once: it runs in one transaction that
// first takes a transaction-level advisory lock (pg_advisory_xact_lock), so
// a second Migrate waits for the first to commit and then finds nothing to
// do. On failure nothing is applied (the transaction rolls back). A
// database whose recorded version is above SchemaVersion (a newer binary
// migrated it) is left alone and reported with kind NotConfigured.
//
// Open and OpenMembership call Migrate; call it yourself to migrate ahead
// of a deployment.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	const op = "pgstore.Migrate"
	if err := ctx.Err(); err != nil {
		return err
	}
	// One transaction: the advisory lock is held until it commits, and a
	// failed migration leaves no half-applied schema (Postgres DDL is
	// transactional).
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgstore_schema_version (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM pgstore_schema_version").Scan(&have); err != nil {
			return err
		}
		all := migrations()
		if have > len(all) {
			return errNewerSchema{have: have, want: len(all)}
		}
		for _, m := range all[have:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO pgstore_schema_version (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if e, ok := err.(errNewerSchema); ok {
			return newError(kindNotConfigured, op, e.Error())
		}
		return wrapErr(ctx, op, err)
	}
	return nil
}

// errNewerSchema: the database was migrated by a newer pgstore.
type errNewerSchema struct{ have, want int }

func (e errNewerSchema) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this binary's %d", e.have, e.want)
}
