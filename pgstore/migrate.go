package pgstore

import (
	"context"
	"embed"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/berthrt/berth/internal/migrate"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrateLockKey is the key of the transaction-level advisory lock Migrate
// holds while it applies migrations ("berth/pgstore" folded into 63 bits).
// Other users of advisory locks on the same database must not use it.
const migrateLockKey int64 = 0x6265727468_7067 // "berth" "pg"

// versionTable records the applied migrations: (version integer PRIMARY
// KEY, name text, applied_at timestamptz), no scope column.
const versionTable = "pgstore_schema_version"

// migrations returns the embedded migrations (NNNN_name.sql) in version
// order. It panics on a misnamed file or a gap in the numbering: the set
// is fixed at build time.
func migrations() []migrate.Step {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		panic("pgstore: " + err.Error())
	}
	var out []migrate.Step
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
		out = append(out, migrate.Step{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			panic("pgstore: migrations are not numbered 1, 2, 3...: " + strconv.Itoa(out[i].Version) + " at position " + strconv.Itoa(i+1))
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
	return migrate.Apply(ctx, pool, migrate.Plan{
		Op:      op,
		Table:   versionTable,
		LockKey: migrateLockKey,
		Steps:   migrations(),
		Wrap:    func(err error) error { return wrapErr(ctx, op, err) },
	})
}
