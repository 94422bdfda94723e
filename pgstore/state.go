package pgstore

import (
	"context"

	"github.com/berthrt/berth/relocation"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

var _ relocation.StateStore = (*Store)(nil)

// LoadState implements relocation.StateStore: one statement that reads the
// object's row of pgstore_object_state. The returned bytes are the
// caller's.
func (s *Store) LoadState(ctx context.Context, obj relocation.Object) (relocation.StoredState, error) {
	const op = "pgstore.Store.LoadState"
	if err := ctx.Err(); err != nil {
		return relocation.StoredState{}, err
	}
	var (
		st  relocation.StoredState
		gen int64
	)
	err := s.pool.QueryRow(ctx, `SELECT data, owner_gen FROM pgstore_object_state WHERE kind = $1 AND id = $2`,
		obj.Kind, obj.ID).Scan(&st.Data, &gen)
	if err == pgx.ErrNoRows {
		return relocation.StoredState{}, relocation.ErrNoState
	}
	if err != nil {
		return relocation.StoredState{}, wrapErr(ctx, op, err)
	}
	st.OwnerGen = uint64(gen)
	return st, nil
}

// writeStatesSQL is WriteStates' one statement. The batch comes as arrays
// of one element per write, in batch order: $1 kinds, $2 ids, $3 hosts, $4
// lease generations, $5 owner generations, $6 data. Why each write is
// fenced atomically with it:
//   - v is the batch, each write numbered by its place (i, from 1).
//   - f is the writes whose location row is Active and names the writer's
//     host, lease generation and owner generation, and locks those rows
//     (FOR SHARE), in key order so that concurrent batches lock (and then
//     write) in one order. A location write (Reserve, Commit, NewOwner,
//     Preserve, Delete) locks its row FOR UPDATE: one that comes after f's
//     lock waits until this statement's transaction ends, so the state
//     write lands before it. One that came first is seen: if it committed
//     before this statement began, in the statement's snapshot; if later
//     (f waited for its lock, or found the row changed), when f locks the
//     row, since in READ COMMITTED locking a row a concurrent transaction
//     changed takes its latest version and checks f's conditions again on
//     it (EvalPlanQual). A write whose owner was replaced, or whose row was
//     preserved or deleted, so drops out of f.
//   - w writes the state of every write in f (a NULL data element is
//     stored as empty bytes) and returns what it wrote.
//   - The statement returns the numbers of the writes w did not write, in
//     ascending order: the fenced ones.
//
// The batch has at most one write per object (WriteStates checks), so ON
// CONFLICT never meets one row twice. A generation above math.MaxInt64
// arrives as -1 (i64), which no row holds: fenced.
const writeStatesSQL = `
WITH v AS MATERIALIZED (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bytea[])
		WITH ORDINALITY AS v (kind, id, host, lease_gen, owner_gen, data, i)),
f AS (
	SELECT v.kind, v.id, v.owner_gen, v.data
	FROM v JOIN pgstore_locations l ON l.kind = v.kind AND l.id = v.id
	WHERE l.state = 2 AND l.host = v.host AND l.lease_gen = v.lease_gen AND l.owner_gen = v.owner_gen
	ORDER BY l.kind, l.id
	FOR SHARE OF l),
w AS (
	INSERT INTO pgstore_object_state AS s (kind, id, owner_gen, data, written_at)
	SELECT f.kind, f.id, f.owner_gen, coalesce(f.data, ''::bytea), now() FROM f
	ON CONFLICT (kind, id) DO UPDATE
	SET owner_gen = excluded.owner_gen, data = excluded.data, written_at = excluded.written_at
	RETURNING s.kind, s.id)
SELECT v.i FROM v
WHERE NOT EXISTS (SELECT 1 FROM w WHERE w.kind = v.kind AND w.id = v.id)
ORDER BY v.i`

// WriteStates implements relocation.StateStore: the whole batch is one
// statement (writeStatesSQL), one round trip, that judges every write on
// the object's location row and writes the states of those it lets
// through, in one transaction: on an error nothing was written. A batch
// with two writes of one object is relocation.ErrDuplicateWrite, found
// before any statement; an empty batch sends none. A generation above
// math.MaxInt64 matches no row: the write is fenced. The store keeps its
// own copy of the data.
func (s *Store) WriteStates(ctx context.Context, writes []relocation.StateWrite) ([]int, error) {
	const op = "pgstore.Store.WriteStates"
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(writes) == 0 {
		return nil, nil
	}
	if err := relocation.CheckWrites(writes); err != nil {
		return nil, err
	}
	n := len(writes)
	strs := make([]string, 3*n)
	kinds, ids, hosts := strs[:n:n], strs[n:2*n:2*n], strs[2*n:]
	gens := make([]int64, 2*n)
	leaseGens, ownerGens := gens[:n:n], gens[n:]
	datas := make(pgtype.FlatArray[[]byte], n) // a [][]byte would be encoded by reflection
	for i, w := range writes {
		kinds[i], ids[i], hosts[i] = w.Object.Kind, w.Object.ID, w.Owner.Host
		leaseGens[i], ownerGens[i] = i64(w.Owner.LeaseGen), i64(w.Owner.OwnerGen)
		datas[i] = w.Data
	}
	rows, err := s.pool.Query(ctx, writeStatesSQL, kinds, ids, hosts, leaseGens, ownerGens, datas)
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	defer rows.Close()
	var fenced []int
	for rows.Next() {
		var i int64
		if err := rows.Scan(&i); err != nil {
			return nil, wrapErr(ctx, op, err)
		}
		fenced = append(fenced, int(i-1))
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	return fenced, nil
}
