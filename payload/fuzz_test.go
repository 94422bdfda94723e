package payload

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func seedFrames(f *testing.F) {
	h := fullHeader()
	full, _ := AppendHeader(nil, &h)
	f.Add(full)
	f.Add(append(append([]byte(nil), full...), `{"sku":"x"}`...))
	min := Header{Op: OpID{1}}
	minimal, _ := AppendHeader(nil, &min)
	f.Add(minimal)
	ch := Header{Target: Target{Scope: ScopeChannel, Name: "news"}, Op: NewOpID(), Deadline: time.Unix(1, 0)}
	chFrame, _ := AppendHeader(nil, &ch)
	f.Add(chFrame)
	f.Add([]byte{})
	f.Add([]byte{headerMagic, 0, fixedLen + minVarLen})
	stamped := Header{Op: OpID{2}, Origin: "host-9", Epoch: 3, Seq: 1 << 40}
	stampedFrame, _ := AppendHeader(nil, &stamped)
	f.Add(stampedFrame)
	v1 := append([]byte(nil), full...)
	v1[0] = 0xB1
	f.Add(v1)
	f.Add(bytes.Repeat([]byte{0xff}, 64))
}

// FuzzDecodeHeader: decoding never panics; whatever decodes re-encodes to the
// same bytes (the format has one encoding per header), and a failure is
// always a ProtocolError.
func FuzzDecodeHeader(f *testing.F) {
	seedFrames(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		v, n, err := DecodeHeader(frame)
		if err != nil {
			if !errors.Is(err, ProtocolError) {
				t.Fatalf("error of kind %v: %v", KindOf(err), err)
			}
			return
		}
		if n > len(frame) || n != v.Len() {
			t.Fatalf("header length %d of a %d-byte frame", n, len(frame))
		}
		h := v.Header()
		again, err := AppendHeader(nil, &h)
		if err != nil {
			t.Fatalf("a decoded header does not re-encode: %v", err)
		}
		if !bytes.Equal(again, frame[:n]) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", frame[:n], again)
		}
	})
}

// FuzzNormalizeContentType: normalization never panics, its output is
// canonical and a fixed point, and canonical input comes back unchanged.
func FuzzNormalizeContentType(f *testing.F) {
	for _, s := range []string{"application/json", " Application/JSON ", "text/plain; charset=utf-8",
		"a/b/c", "", "/", "x/y", "APPLICATION/VND.A+B", "\tapplication/x-protobuf\r\n", "é/è"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := NormalizeContentType(s)
		canonicalIn := IsCanonicalContentType([]byte(s))
		if err != nil {
			if !errors.Is(err, ProtocolError) {
				t.Fatalf("error of kind %v", KindOf(err))
			}
			if canonicalIn {
				t.Fatalf("canonical %q failed to normalize: %v", s, err)
			}
			return
		}
		if !IsCanonicalContentType([]byte(out)) {
			t.Fatalf("%q normalized to non-canonical %q", s, out)
		}
		if again, err := NormalizeContentType(out); err != nil || again != out {
			t.Fatalf("normalization is not idempotent: %q → %q → %q, %v", s, out, again, err)
		}
		if canonicalIn && out != s {
			t.Fatalf("canonical %q changed to %q", s, out)
		}
	})
}

// FuzzOpen: opening and decoding arbitrary frames never panics; failures are
// typed; the buffer is released exactly once either way.
func FuzzOpen(f *testing.F) {
	seedFrames(f)
	r := NewRegistry()
	if err := r.Register(Raw, ForType[[]byte]()); err != nil {
		f.Fatal(err)
	}
	if err := r.Register(Protobuf, IsProtoMessage); err != nil {
		f.Fatal(err)
	}
	r.Freeze()
	f.Fuzz(func(t *testing.T, frame []byte) {
		log := newReleaseLog()
		p := NewPool(PoolOptions{OnRelease: log.observe})
		b := p.Copy(frame)
		m, err := r.Open(b)
		if err != nil {
			if !errors.Is(err, ProtocolError) {
				t.Fatalf("Open error of kind %v: %v", KindOf(err), err)
			}
			b.Release()
		} else {
			_, err1 := Value[Item](m)
			_, err2 := Value[Item](m)
			if err1 != err2 {
				t.Fatalf("second access changed the outcome: %v then %v", err1, err2)
			}
			if err1 != nil && !errors.Is(err1, ProtocolError) && !errors.Is(err1, TypeMismatch) {
				t.Fatalf("Value error of kind %v: %v", KindOf(err1), err1)
			}
			m.Release()
		}
		if log.total.Load() != 1 {
			t.Fatalf("buffer released %d times", log.total.Load())
		}
		if d := p.Stats().Decodes; d > 1 {
			t.Fatalf("decoded %d times", d)
		}
	})
}
