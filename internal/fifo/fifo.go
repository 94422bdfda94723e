// Package fifo holds the one rule berth's head-indexed queues share: a
// queue is a slice s whose items from s[head] on are still queued, and
// whose consumed prefix s[:head] (already zeroed by the consumer, so that
// it pins nothing) is given back by Compact.
//
// Invariants of Compact: it never drops or reorders a queued item; it
// reuses the array when the queue is empty; and it copies the queued items
// down only when the consumed prefix is over 1,024 items and more than half
// of the slice, so that each item is copied O(1) times on average.
package fifo

// Compact returns the queue s with its consumed prefix s[:head] dropped,
// and the new head. An empty queue (head == len(s)) becomes s[:0]; a
// prefix over 1,024 items and more than half of s is removed by copying
// the queued items down; otherwise s and head are returned as they are.
func Compact[T any](s []T, head int) ([]T, int) {
	switch {
	case head == len(s):
		return s[:0], 0
	case head > 1024 && head > len(s)/2:
		k := copy(s, s[head:])
		clear(s[k:])
		return s[:k], 0
	}
	return s, head
}
