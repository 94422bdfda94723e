package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/metrics"
)

// BenchmarkEvents measures the per-message cost a host pays: one Admitted
// and one Handled, from parallel goroutines on a few kinds.
func BenchmarkEvents(b *testing.B) {
	m := metrics.New(prometheus.NewRegistry())
	kinds := []string{strings.Repeat("a", 8), strings.Repeat("b", 8), strings.Repeat("c", 8), strings.Repeat("d", 8)}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := kinds[i%len(kinds)]
			m.Admitted(k, mailbox.Application, 128)
			m.Handled(k, time.Microsecond, 10*time.Microsecond, actor.OutcomeOK)
			i++
		}
	})
}
