package payload

import "testing"

// The message path adds no allocation of its own: encoding into pooled
// storage, opening, typed access and release allocate exactly what the codec
// allocates by itself. Pools are involved, and sync.Pool drops items at
// random under the race detector, so this runs in the non-race pass of
// .ci/run.
func TestMessagePathAllocatesNothingBeyondTheCodec(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race; .ci/run runs this test without it")
	}
	var p Pool
	r := frozen(t, func(r *Registry) error { return r.Register(Raw, ForType[[]byte]()) })
	h := testHeader()
	body := []byte("0123456789abcdef")
	framework := testing.AllocsPerRun(1000, func() {
		m, err := NewMessage(&p, r, h, body)
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
	})
	if framework != 0 {
		t.Fatalf("encode+open+release allocates %.1f times per message, want 0", framework)
	}

	item := Item{SKU: "sku-1", Qty: 2, Notes: []string{"n"}}
	buf := make([]byte, 0, 256)
	codecOnly := testing.AllocsPerRun(1000, func() {
		var err error
		if buf, err = JSON.Encode(buf[:0], &item); err != nil {
			t.Fatal(err)
		}
		out := new(Item)
		if err := JSON.Decode(buf, out); err != nil {
			t.Fatal(err)
		}
	})
	whole := testing.AllocsPerRun(1000, func() {
		m, err := NewMessage(&p, r, h, item)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Value[Item](m); err != nil {
			t.Fatal(err)
		}
		m.Release()
	})
	if whole != codecOnly {
		t.Fatalf("a JSON message allocates %.1f times, the codec alone %.1f: the framework adds %.1f",
			whole, codecOnly, whole-codecOnly)
	}
}
