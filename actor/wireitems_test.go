package actor

import (
	"errors"
	"reflect"
	"testing"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

func sampleControls() []any {
	op := payload.NewOpID()
	return []any{
		&relocateRequest{op: op, ref: Ref{"cart", "alice"}, target: "b", deadline: 1_700_000_000_123_456_789},
		&relocateRequest{op: op, ref: Ref{"", ""}, target: ""},
		&relocateAnswer{op: op},
		&relocateAnswer{op: op, err: &HandlerError{Kind: payload.Rejected, Msg: "move aborted: x", Codes: []string{"berth.not_local", "test.code"}}},
		&relocateAnswer{op: op, err: &HandlerError{Kind: payload.InternalFailure, Msg: ""}},
		&relocateCancel{op: op},
		&loadReport{load: 12345},
		&pressureItem{obj: relocation.Object{Kind: "cart", ID: "alice"}, paused: true},
		&pressureItem{obj: relocation.Object{Kind: "", ID: ""}},
		&creditReport{settledN: 1 << 40, settledB: 1<<63 + 7, windowN: 16384, windowB: 32 << 20},
		&creditReport{},
		&creditAsk{},
	}
}

func TestLinkItemCodecsRoundTrip(t *testing.T) {
	obj, hint := relocation.Object{Kind: "cart", ID: "alice/ü"}, routeHint{host: "host-7", gen: 1<<63 + 5}
	gotObj, gotHint, err := decodeHint(appendHint(nil, obj, hint))
	if err != nil || gotObj != obj || gotHint != hint {
		t.Fatalf("hint round trip: %v %v %v", gotObj, gotHint, err)
	}
	for _, c := range sampleControls() {
		got, err := decodeControl(appendControl(nil, c))
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("control %#v round trip: %#v, %v", c, got, err)
		}
	}
}

func TestLinkItemCodecsRejectEveryTruncationAndTrailingBytes(t *testing.T) {
	check := func(name string, b []byte, decode func([]byte) error) {
		for n := 0; n < len(b); n++ {
			if err := decode(b[:n]); !errors.Is(err, payload.ProtocolError) {
				t.Fatalf("%s truncated to %d of %d bytes: %v, want ProtocolError", name, n, len(b), err)
			}
		}
		if err := decode(append(append([]byte(nil), b...), 0)); !errors.Is(err, payload.ProtocolError) {
			t.Fatalf("%s with a trailing byte: %v, want ProtocolError", name, err)
		}
		bad := append([]byte(nil), b...)
		bad[0] = 9
		if err := decode(bad); !errors.Is(err, payload.ProtocolError) {
			t.Fatalf("%s with an unknown version: %v, want ProtocolError", name, err)
		}
	}
	check("hint", appendHint(nil, relocation.Object{Kind: "k", ID: "i"}, routeHint{host: "h", gen: 3}),
		func(b []byte) error { _, _, err := decodeHint(b); return err })
	for _, c := range sampleControls() {
		check("control", appendControl(nil, c), func(b []byte) error { _, err := decodeControl(b); return err })
	}
	unknown := appendControl(nil, &relocateCancel{})
	unknown[1] = 77
	if _, err := decodeControl(unknown); !errors.Is(err, payload.ProtocolError) {
		t.Fatalf("unknown control tag: %v", err)
	}
}

func FuzzDecodeLinkItems(f *testing.F) {
	f.Add(appendHint(nil, relocation.Object{Kind: "k", ID: "i"}, routeHint{host: "h", gen: 3}))
	for _, c := range sampleControls() {
		f.Add(appendControl(nil, c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if obj, hint, err := decodeHint(b); err == nil {
			if o2, h2, err := decodeHint(appendHint(nil, obj, hint)); err != nil || o2 != obj || h2 != hint {
				t.Fatalf("hint does not re-encode: %v", err)
			}
		} else if !errors.Is(err, payload.ProtocolError) {
			t.Fatalf("hint error of another kind: %v", err)
		}
		if c, err := decodeControl(b); err == nil {
			if c2, err := decodeControl(appendControl(nil, c)); err != nil || !reflect.DeepEqual(c, c2) {
				t.Fatalf("control does not re-encode: %v", err)
			}
		} else if !errors.Is(err, payload.ProtocolError) {
			t.Fatalf("control error of another kind: %v", err)
		}
	})
}
