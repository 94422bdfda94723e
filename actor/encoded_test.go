package actor

import (
	"errors"
	"testing"

	"github.com/berthrt/berth/payload"
)

func TestDeliverEncodedRequestRepliesAndCopiesBodyOnce(t *testing.T) {
	h := startHost(t, Config{Logger: quietLogger()}, counterKind(newGates()))
	before := h.pool.Stats()
	body := []byte(`{"S":"hi"}`)
	rep, err := h.Deliver(bg, Ref{"counter", "a"}, Encoded{Type: TypeName[Echo](), ContentType: "application/json", Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(rep.Header().Type()); got != TypeName[string]() {
		t.Errorf("reply type %q, want %q", got, TypeName[string]())
	}
	s, err := payload.Value[string](rep)
	rep.Release()
	if err != nil || s != "hi" {
		t.Fatalf("reply %q, %v", s, err)
	}
	after := h.pool.Stats()
	if d := after.FullCopyBytes - before.FullCopyBytes; d < uint64(len(body)) {
		t.Errorf("the body's boundary copy was not counted: %d bytes copied, body %d", d, len(body))
	}
}

func TestDeliverEncodedOneWayHandlerAnswersNilThenRuns(t *testing.T) {
	h := startHost(t, Config{Logger: quietLogger()}, counterKind(newGates()))
	for i := 0; i < 3; i++ {
		rep, err := h.Deliver(bg, Ref{"counter", "a"}, Encoded{Type: TypeName[Inc](), ContentType: "application/json", Body: []byte(`{"By":2}`)})
		if err != nil || rep != nil {
			t.Fatalf("one-way: %v, %v", rep, err)
		}
	}
	n, err := Ask[Get, int](bg, h, Ref{"counter", "a"}, Get{})
	if err != nil || n != 6 {
		t.Fatalf("counter %d, %v; want 6", n, err)
	}
}

func TestDeliverEncodedErrors(t *testing.T) {
	h := startHost(t, Config{Logger: quietLogger()}, counterKind(newGates()))
	to := Ref{"counter", "a"}
	cases := []struct {
		name string
		enc  Encoded
		kind payload.Kind
	}{
		{"undecodable body", Encoded{Type: TypeName[Inc](), ContentType: "application/json", Body: []byte(`{"By":`)}, payload.ProtocolError},
		{"unknown content type", Encoded{Type: TypeName[Inc](), ContentType: "application/x-nope", Body: []byte(`x`)}, payload.ProtocolError},
		{"unknown type", Encoded{Type: "nope.Nope", ContentType: "application/json", Body: []byte(`{}`)}, payload.NotFound},
		{"handler error", Encoded{Type: TypeName[Fail](), ContentType: "application/json", Body: []byte(`{}`)}, 0},
		{"handler panic", Encoded{Type: TypeName[Boom](), ContentType: "application/json", Body: []byte(`{}`)}, payload.InternalFailure},
	}
	for _, c := range cases {
		rep, err := h.Deliver(bg, to, c.enc)
		if rep != nil || err == nil {
			t.Errorf("%s: reply %v, err %v", c.name, rep, err)
			continue
		}
		if c.kind == 0 {
			if !errors.Is(err, errFail) {
				t.Errorf("%s: %v is not the handler's error", c.name, err)
			}
		} else if payload.KindOf(err) != c.kind {
			t.Errorf("%s: %v, want kind %v", c.name, err, c.kind)
		}
	}
	if n := h.stats.inflight.Load(); n != 0 {
		t.Errorf("%d requests still counted in flight", n)
	}
}

func TestRequestSendThenWaitManyInFlight(t *testing.T) {
	h := startHost(t, Config{Logger: quietLogger()}, counterKind(newGates()))
	var reqs []*Request
	for i := 0; i < 50; i++ {
		r, err := h.NewRequest(bg, Ref{"counter", string(rune('a' + i%5))}, Encoded{Type: TypeName[Inc](), ContentType: "application/json", Body: []byte(`{"By":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Send(bg); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	for _, r := range reqs {
		if rep, err := r.Wait(bg); err != nil || rep != nil {
			t.Fatalf("wait: %v %v", rep, err)
		}
	}
	r, err := h.NewRequest(bg, Ref{"counter", "z"}, Encoded{Type: TypeName[Inc](), ContentType: "application/json", Body: []byte(`{"By":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	r.Discard()
	if n := h.stats.inflight.Load(); n != 0 {
		t.Errorf("%d requests still counted in flight", n)
	}
}

func TestPrepareReusesAFinishedRequestAndRefusesOneInUse(t *testing.T) {
	h := startHost(t, Config{Logger: quietLogger()}, counterKind(newGates()))
	var r Request
	enc := Encoded{Type: TypeName[Inc](), ContentType: "application/json", Body: []byte(`{"By":1}`)}
	for i := 0; i < 3; i++ {
		if err := h.Prepare(bg, &r, Ref{"counter", "a"}, enc); err != nil {
			t.Fatal(err)
		}
		if err := h.Prepare(bg, &r, Ref{"counter", "a"}, enc); payload.KindOf(err) != payload.InvalidOperation {
			t.Fatalf("Prepare of a request in use: %v, want InvalidOperation", err)
		}
		if err := r.Send(bg); err != nil {
			t.Fatal(err)
		}
		if rep, err := r.Wait(bg); err != nil || rep != nil {
			t.Fatalf("wait: %v %v", rep, err)
		}
	}
	n, err := Ask[Get, int](bg, h, Ref{"counter", "a"}, Get{})
	if err != nil || n != 3 {
		t.Fatalf("counter %d, %v; want 3", n, err)
	}
	if n := h.stats.inflight.Load(); n != 0 {
		t.Errorf("%d requests still counted in flight", n)
	}
}
