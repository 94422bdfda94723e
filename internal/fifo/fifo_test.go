package fifo

import (
	"slices"
	"testing"
)

// Compact keeps every queued item, in order: empty queues reuse the array;
// a large consumed prefix is copied out; a small one is left in place.
func TestCompactKeepsTheQueuedItemsInOrder(t *testing.T) {
	s := []int{1, 2, 3}
	if got, head := Compact(s, 3); len(got) != 0 || cap(got) != 3 || head != 0 {
		t.Fatalf("empty queue: %v (cap %d), head %d", got, cap(got), head)
	}
	if got, head := Compact([]int{0, 0, 7}, 2); !slices.Equal(got[head:], []int{7}) || head != 2 {
		t.Fatalf("small prefix: %v, head %d; want it left in place", got, head)
	}
	big := make([]*int, 3000)
	for i := 2000; i < 3000; i++ {
		v := i
		big[i] = &v
	}
	got, head := Compact(big, 2000)
	if head != 0 || len(got) != 1000 || *got[0] != 2000 || *got[999] != 2999 {
		t.Fatalf("large prefix: len %d, head %d", len(got), head)
	}
	if tail := big[1000:3000]; slices.ContainsFunc(tail, func(p *int) bool { return p != nil }) {
		t.Fatal("the slots past the queue still hold items")
	}
}
