package pgbridge

import (
	"context"
	"errors"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5/pgconn"
)

// dbError wraps err, a database call's failure, with the kind of its
// cause: a statement the server refused for what it asked (a unique key
// taken, a constraint or trigger refusing, a missing table or column, a
// malformed value) is not Unavailable — sending it again would fail the
// same way — while a connection that failed, a serialization failure or a
// server going down is.
func dbError(op string, err error) error {
	return payload.Wrap(dbKind(err), op, err)
}

func dbKind(err error) payload.Kind {
	var pge *pgconn.PgError
	if errors.As(err, &pge) {
		code := pge.Code
		switch code {
		case "23505": // unique_violation
			return payload.AlreadyExists
		case "42P01", "42703", "3F000", "42883", "42704": // undefined table, column, schema, function, object
			return payload.NotFound
		case "P0001", "42501": // raise_exception (a trigger's), insufficient_privilege
			return payload.Rejected
		case "57014": // query_canceled: statement_timeout
			return payload.DeadlineExceeded
		}
		switch code[:2] {
		case "23": // integrity constraint violation
			return payload.Rejected
		case "22", "42", "0A", "2B", "44": // data exception, syntax or access rule, not supported, dependent objects, check option
			return payload.InvalidOperation
		}
		return payload.Unavailable // 08 connection, 40 serialization/deadlock, 53 resources, 57 shutting down, 58 system…
	}
	var te interface{ Timeout() bool } // a net.Error, pgconn's timeouts
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &te) && te.Timeout() {
		return payload.DeadlineExceeded
	}
	return payload.Unavailable
}
