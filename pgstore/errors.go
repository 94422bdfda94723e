package pgstore

import (
	"context"
	"errors"
	"math"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5/pgconn"
)

// Package errors beyond those of the interfaces it implements.
var (
	// ErrGenerationRange: a generation or version above math.MaxInt64 (the
	// store keeps them in bigint columns). RenewLease and Join refuse such
	// a generation; as an expected value of a conditional write it simply
	// matches no row. Kind InvalidOperation.
	ErrGenerationRange = payload.NewError(payload.InvalidOperation, "pgstore", "generation above math.MaxInt64")
)

// wrapErr turns an error of a database call into the error the call
// returns. A done ctx wins: the caller gets ctx.Err() itself, as the
// interfaces promise. Transient failures (the connection, serialization
// or deadlock, the server shutting down or out of resources) are kind
// Unavailable, so callers may retry; anything else (a bug, a schema that
// does not match) is InternalFailure.
func wrapErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if transient(err) {
		return payload.Wrap(payload.Unavailable, op, err)
	}
	return payload.Wrap(payload.InternalFailure, op, err)
}

// transient reports whether err is a failure a retry may get past.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) < 2:
			return false
		case pgErr.Code[:2] == "08": // connection exception
			return true
		case pgErr.Code == "40001", pgErr.Code == "40P01": // serialization failure, deadlock
			return true
		case pgErr.Code[:2] == "53": // insufficient resources (too many connections...)
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // admin/crash shutdown, cannot connect now
			return true
		case pgErr.Code == "55P03": // lock not available
			return true
		case pgErr.Code == "25P03": // idle in transaction past its bound: this client stalled inside one (inTx)
			return true
		}
		return false
	}
	// Not an error the server sent: the connection failed (refused, reset,
	// closed, timed out) or the pool could not get one.
	return true
}

// i64 converts a generation or version for a comparison with a bigint
// column: one above math.MaxInt64 becomes -1, which no row holds.
func i64(u uint64) int64 {
	if u > math.MaxInt64 {
		return -1
	}
	return int64(u)
}
