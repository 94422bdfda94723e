package actor

import (
	"math"
	"testing"
	"time"
)

// A relocate request from another host runs under the deadline it
// carries, bounded: none, or one past maxRemoteRelocate, becomes
// maxRemoteRelocate from its arrival.
func TestARelocateRequestsDeadlineFromAPeerIsBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		carried int64
		want    time.Time
	}{
		{0, now.Add(maxRemoteRelocate)},
		{now.Add(time.Second).UnixNano(), now.Add(time.Second)},
		{now.Add(-time.Second).UnixNano(), now.Add(-time.Second)}, // already past: the move is not started
		{now.Add(maxRemoteRelocate + time.Hour).UnixNano(), now.Add(maxRemoteRelocate)},
		{math.MaxInt64, now.Add(maxRemoteRelocate)},
	} {
		if got := remoteDeadline(now, c.carried); !got.Equal(c.want) {
			t.Errorf("deadline %d carried: %v; want %v", c.carried, got, c.want)
		}
	}
}
