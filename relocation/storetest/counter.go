package storetest

import (
	"slices"
	"testing"

	"github.com/berthrt/berth/relocation"
)

// A Counter counts rows by the host they name and kind: Active and
// Reserved rows count, Preserved ones do not. (Skipped for a store that
// is no relocation.Counter: counting is optional.)
func countObjectsCountsRowsByOwnerAndKind(t *testing.T, x *suite) {
	c, ok := x.s.(relocation.Counter)
	if !ok {
		t.Skip("the store is no relocation.Counter")
	}
	x.lease(t, "h1", 1)
	x.lease(t, "h2", 1)
	other := relocation.Object{Kind: "storetest2", ID: "a"}
	x.active(t, objA, "h1")
	x.reserve(t, objB, "h1") // Reserved: counts for h1
	x.active(t, other, "h2")
	gone := relocation.Object{Kind: "storetest", ID: "gone"}
	x.preserve(t, gone, x.active(t, gone, "h2").Ownership, nil) // Preserved: counts for none
	got, err := c.CountObjects(x.ctx)
	if err != nil {
		t.Fatalf("CountObjects = %v", err)
	}
	want := []relocation.ObjectCount{{Host: "h1", Kind: "storetest", Objects: 2}, {Host: "h2", Kind: "storetest2", Objects: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("CountObjects = %+v, want %+v", got, want)
	}
}
