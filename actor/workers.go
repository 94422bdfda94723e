package actor

import (
	"sync"
	"time"
)

// workerPool is the dispatcher's goroutines: a mailbox's drain is handed
// to an idle worker, or starts a new one; a worker idle for workerIdle
// ends.
//
// Owns: its goroutines. Lock: none (channels). May call: the drains it is
// handed. Invariants: after stop is closed and running is waited, no
// drain runs.
type workerPool struct {
	running sync.WaitGroup // the workers
	handoff chan func()    // unbuffered: drains handed to idle workers
	stop    chan struct{}  // closed by Close after the last drain
}

// dispatcher runs mailbox drains on worker goroutines that it keeps for a
// while after their drain (a cached pool): a drain handed to an idle worker
// needs no new goroutine and no stack growth. When no worker is idle it
// starts one, so a drain never waits behind a blocked handler. Workers are
// counted in drains, so Close can wait for every one.
type dispatcher struct {
	workers    *workerPool
	throughput int // Config.Throughput
}

// workerIdle is how long a worker waits for another drain before it exits.
const workerIdle = time.Second

func (d dispatcher) Schedule(fn func()) {
	select {
	case d.workers.handoff <- fn: // an idle worker took it
	default:
		d.workers.running.Add(1)
		go d.workers.worker(fn)
	}
}

func (d dispatcher) Throughput() int { return d.throughput }

// worker runs fn, then the drains handed to it, until it has been idle
// for workerIdle or the pool stops.
func (w *workerPool) worker(fn func()) {
	defer w.running.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(workerIdle)
		select {
		case fn = <-w.handoff:
		case <-idle.C:
			return
		case <-w.stop:
			return
		}
	}
}
