package pgbridge

import (
	"context"
	"strings"
	"time"

	"github.com/berthrt/berth/payload"
)

// Redrive moves the dead letters of table t with the given ids (ids in
// t.DeadLetter) back into t, in one statement: each becomes a new row of t
// — a new id, so it comes after the rows of its key now in t — with its
// key, type, content type, payload, headers, priority and row columns,
// attempt 0 and ready now; the subscriptions of t in this process are
// woken. It returns how many rows moved (ids not in the dead-letter table
// are skipped).
func (b *Broker) Redrive(ctx context.Context, t Table, ids []int64) (int, error) {
	const op = "pgbridge.Redrive"
	if t.DeadLetter == "" {
		return 0, payload.NewError(payload.NotConfigured, op, "table "+t.Name+" has no dead-letter table")
	}
	if len(ids) == 0 {
		return 0, nil
	}
	c := t.cols()
	var cols []string
	for _, col := range []string{c.Key, c.Type, c.ContentType, c.Payload, c.Headers, c.Priority} {
		if col != "" {
			cols = append(cols, q(col))
		}
	}
	for _, col := range t.RowColumns {
		cols = append(cols, q(col))
	}
	list := strings.Join(cols, ", ")
	sql := "WITH m AS (DELETE FROM " + ident(t.DeadLetter) + " WHERE " + q(c.ID) + " = ANY($1::bigint[]) RETURNING " + q(c.ID) + ", " + list +
		") INSERT INTO " + ident(t.Name) + " (" + list + ") SELECT " + list + " FROM m ORDER BY " + q(c.ID)
	tag, err := b.pool.Exec(ctx, sql, ids)
	if err != nil {
		return 0, dbError(op, err)
	}
	n := int(tag.RowsAffected())
	if n > 0 {
		b.wakeTable(t.Name)
	}
	return n, nil
}

// PruneDeadLetters deletes the dead letters of table t that were
// dead-lettered before before, and returns how many.
func (b *Broker) PruneDeadLetters(ctx context.Context, t Table, before time.Time) (int, error) {
	const op = "pgbridge.PruneDeadLetters"
	if t.DeadLetter == "" {
		return 0, payload.NewError(payload.NotConfigured, op, "table "+t.Name+" has no dead-letter table")
	}
	tag, err := b.pool.Exec(ctx, "DELETE FROM "+ident(t.DeadLetter)+" WHERE dead_at < $1", before)
	if err != nil {
		return 0, dbError(op, err)
	}
	return int(tag.RowsAffected()), nil
}
