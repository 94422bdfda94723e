package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// LeasePoolConns is the size of the lease pool OpenPools opens.
const LeasePoolConns = 3

// OpenPools opens the two pools a host on Postgres needs on database url:
// work, as the URL says (pgxpool's defaults), for the store's other calls
// and the objects' state; and leases, of LeasePoolConns connections, for
// the lease calls (Options.LeasePool) and the membership (OpenMembership).
//
// A host's lease renewals and its membership's must never wait for a
// connection behind a burst of store work: after a crash every object of
// the dead host is taken over with a store read and durable writes, and
// after an outage every held message is looked up and every waiting state
// written at once. A renewal that waits past the lease ends the host's run
// (its peers see it fail) though nothing is wrong with it. The caller
// closes both pools; on an error neither is open.
func OpenPools(ctx context.Context, url string) (work, leases *pgxpool.Pool, err error) {
	wcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	lcfg := wcfg.Copy()
	lcfg.MaxConns, lcfg.MinConns = LeasePoolConns, 0
	if work, err = pgxpool.NewWithConfig(ctx, wcfg); err != nil {
		return nil, nil, err
	}
	if leases, err = pgxpool.NewWithConfig(ctx, lcfg); err != nil {
		work.Close()
		return nil, nil, err
	}
	return work, leases, nil
}
