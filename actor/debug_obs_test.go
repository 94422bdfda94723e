package actor

import (
	"sync"
	"time"

	"github.com/berthrt/berth/mailbox"
)

// rejections is an Observer that counts rejections by reason.
type rejections struct {
	noObserver
	mu sync.Mutex
	n  map[string]int
}

func (r *rejections) Rejected(kind, reason string) {
	r.mu.Lock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[reason]++
	r.mu.Unlock()
}

func (r *rejections) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.n {
		out[k] = v
	}
	return out
}

var _ = time.Second
var _ mailbox.Lane
