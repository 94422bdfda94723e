package payload

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func fullHeader() Header {
	return Header{
		Type:        "shop.AddItem",
		ContentType: "application/json",
		Target:      Target{Scope: ScopeObject, Name: "cart", ID: "cart-42"},
		Op:          NewOpID(),
		ReplyTo:     "host-7/req/991",
		Deadline:    time.Unix(1_900_000_000, 123),
		Generation:  77,
		Hops:        3,
		Flags:       0x81,
		Origin:      "host-3",
		Epoch:       0x0102030405060708,
		Seq:         1<<63 + 9,
		Meta:        []MetaEntry{{"trace", "abc"}, {"tenant", "t1"}, {"empty", ""}},
	}
}

func TestHeaderRoundTripsEveryField(t *testing.T) {
	h := fullHeader()
	frame, err := AppendHeader([]byte("prefix"), &h)
	if err != nil {
		t.Fatal(err)
	}
	if string(frame[:6]) != "prefix" {
		t.Fatal("AppendHeader overwrote dst")
	}
	frame = append(frame[6:], "payload bytes"...)
	v, n, err := DecodeHeader(frame)
	if err != nil {
		t.Fatal(err)
	}
	if string(frame[n:]) != "payload bytes" || v.Len() != n {
		t.Fatalf("payload offset %d wrong", n)
	}
	got := v.Header()
	if got.Type != h.Type || got.ContentType != h.ContentType || got.Target != h.Target || got.Op != h.Op ||
		got.ReplyTo != h.ReplyTo || !got.Deadline.Equal(h.Deadline) || got.Generation != h.Generation ||
		got.Hops != h.Hops || got.Flags != h.Flags || got.Origin != h.Origin || got.Epoch != h.Epoch ||
		got.Seq != h.Seq || len(got.Meta) != 3 {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, h)
	}
	for i := range h.Meta {
		if got.Meta[i] != h.Meta[i] {
			t.Fatalf("meta %d = %+v, want %+v", i, got.Meta[i], h.Meta[i])
		}
	}
	if val, ok := v.Meta("tenant"); !ok || string(val) != "t1" {
		t.Fatalf("Meta(tenant) = %q, %v", val, ok)
	}
	if _, ok := v.Meta("missing"); ok {
		t.Fatal("Meta found a missing key")
	}
	if v.Scope() != ScopeObject || string(v.TargetName()) != "cart" || string(v.TargetID()) != "cart-42" {
		t.Fatal("target accessors disagree with Header()")
	}
	if d, ok := v.Deadline(); !ok || d.UnixNano() != h.Deadline.UnixNano() {
		t.Fatal("deadline lost")
	}
	if string(v.Origin()) != h.Origin || v.Epoch() != h.Epoch || v.Seq() != h.Seq {
		t.Fatalf("stamp accessors: origin %q epoch %d seq %d", v.Origin(), v.Epoch(), v.Seq())
	}
	// Re-encoding the decoded header gives the same bytes: the encoding is canonical.
	again, err := AppendHeader(nil, &got)
	if err != nil || !bytes.Equal(again, frame[:n]) {
		t.Fatalf("re-encoding differs: %v", err)
	}
}

func TestHeaderWithoutDeadlineOrMeta(t *testing.T) {
	h := Header{Target: Target{Scope: ScopeChannel, Name: "news"}, Op: NewOpID()}
	frame, err := AppendHeader(nil, &h)
	if err != nil {
		t.Fatal(err)
	}
	v, n, err := DecodeHeader(frame)
	if err != nil || n != len(frame) {
		t.Fatal(err, n)
	}
	if _, ok := v.Deadline(); ok {
		t.Fatal("zero deadline decoded as a deadline")
	}
	if len(v.Origin()) != 0 || v.Epoch() != 0 || v.Seq() != 0 {
		t.Fatal("an unstamped header decoded with a stamp")
	}
	if got := v.Header(); got.Origin != "" || got.Epoch != 0 || got.Seq != 0 {
		t.Fatalf("unstamped Header() = %+v", got)
	}
	for range v.MetaAll() {
		t.Fatal("metadata appeared")
	}
	var zero HeaderView
	if _, ok := zero.Meta("x"); ok {
		t.Fatal("zero view has metadata")
	}
}

func TestDecodeHeaderOfValidHeaderAllocatesNothing(t *testing.T) {
	h := fullHeader()
	frame, _ := AppendHeader(nil, &h)
	allocs := testing.AllocsPerRun(1000, func() {
		v, _, err := DecodeHeader(frame)
		if err != nil || v.Hops() != 3 || v.Seq() != h.Seq || len(v.Origin()) != len(h.Origin) {
			t.Fatal(err)
		}
		if _, ok := v.Meta("tenant"); !ok {
			t.Fatal("meta lost")
		}
	})
	if allocs != 0 {
		t.Fatalf("DecodeHeader allocates %.1f times per call, want 0", allocs)
	}
}

func TestDecodeHeaderTruncatedAtEveryLengthIsProtocolError(t *testing.T) {
	h := fullHeader()
	frame, _ := AppendHeader(nil, &h)
	for i := 0; i < len(frame); i++ {
		if _, _, err := DecodeHeader(frame[:i]); !errors.Is(err, ProtocolError) {
			t.Fatalf("truncated to %d bytes: err = %v, want ProtocolError", i, err)
		}
	}
}

func TestDecodeHeaderMalformedIsProtocolError(t *testing.T) {
	h := fullHeader()
	good, _ := AppendHeader(nil, &h)
	base := fixedLen
	typeLen := int(good[base])
	ctAt := base + 1 + typeLen
	gv, _, err := DecodeHeader(good)
	if err != nil {
		t.Fatal(err)
	}
	originAt := int(gv.origin.off) - 1 // the origin's length byte
	if good[originAt] != byte(len(h.Origin)) {
		t.Fatalf("origin length byte not at %d", originAt)
	}
	cases := map[string]func(b []byte) []byte{
		"bad magic":              func(b []byte) []byte { b[0] = 0x42; return b },
		"version 1 frame":        func(b []byte) []byte { b[0] = 0xB1; return b },
		"length too large":       func(b []byte) []byte { b[1], b[2] = 0xff, 0xff; return b },
		"length too small":       func(b []byte) []byte { b[1], b[2] = 0, 10; return b },
		"length past fields":     func(b []byte) []byte { b[2]++; return append(b, 0) },
		"zero op id":             func(b []byte) []byte { copy(b[offOp:offOp+16], make([]byte, 16)); return b },
		"negative deadline":      func(b []byte) []byte { b[offDeadline] = 0x80; return b },
		"unknown scope":          func(b []byte) []byte { b[offScope] = 9; return b },
		"channel with id":        func(b []byte) []byte { b[offScope] = byte(ScopeChannel); return b },
		"string runs past end":   func(b []byte) []byte { b[ctAt] = 250; return b },
		"origin runs past end":   func(b []byte) []byte { b[originAt] = 250; return b },
		"meta key empty":         func(b []byte) []byte { b[len(b)-len(metaBlock(&h))] = 0; return b },
		"duplicate meta key":     func(b []byte) []byte { return withMeta(t, b, "\x01k\x00\x00\x01k\x00\x00") },
		"meta value runs past":   func(b []byte) []byte { return withMeta(t, b, "\x01k\x00\x09") },
		"meta oversized":         func(b []byte) []byte { return withMeta(t, b, "\x01k"+"\x04\x00"+strings.Repeat("v", 1024)) },
		"target id oversized":    func(b []byte) []byte { return oversizedID(t) },
		"object without kind id": func(b []byte) []byte { return objectWithoutID(t) },
	}
	wantDetail := map[string]string{
		"bad magic":              "unknown header version",
		"version 1 frame":        "unknown header version",
		"length too large":       "header length out of range",
		"length too small":       "header length out of range",
		"length past fields":     "does not match its fields",
		"zero op id":             "zero operation id",
		"negative deadline":      "negative deadline",
		"unknown scope":          "unknown scope",
		"channel with id":        "channel target",
		"string runs past end":   "truncated content type",
		"origin runs past end":   "truncated origin",
		"meta key empty":         "malformed metadata key",
		"duplicate meta key":     "duplicate metadata key",
		"meta value runs past":   "malformed metadata value",
		"meta oversized":         "oversized metadata",
		"target id oversized":    "oversized target id",
		"object without kind id": "object target without",
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			b := corrupt(append([]byte(nil), good...))
			_, _, err := DecodeHeader(b)
			if !errors.Is(err, ProtocolError) {
				t.Fatalf("err = %v, want ProtocolError", err)
			}
			if !strings.Contains(err.Error(), wantDetail[name]) {
				t.Fatalf("err = %v, want it to say %q", err, wantDetail[name])
			}
		})
	}
}

// metaBlock returns the encoded metadata of h.
func metaBlock(h *Header) []byte {
	var m []byte
	for _, e := range h.Meta {
		m = append(m, byte(len(e.Key)))
		m = append(m, e.Key...)
		m = append(m, byte(len(e.Value)>>8), byte(len(e.Value)))
		m = append(m, e.Value...)
	}
	return m
}

// withMeta replaces the metadata block of a header without metadata-related
// validation, fixing up the lengths.
func withMeta(t *testing.T, b []byte, meta string) []byte {
	h := fullHeader()
	h.Meta = nil
	out, err := AppendHeader(nil, &h)
	if err != nil {
		t.Fatal(err)
	}
	out = out[:len(out)-2]
	out = append(out, byte(len(meta)>>8), byte(len(meta)))
	out = append(out, meta...)
	out[1], out[2] = byte(len(out)>>8), byte(len(out))
	return out
}

func oversizedID(t *testing.T) []byte {
	h := Header{Target: Target{Scope: ScopeObject, Name: "k", ID: "x"}, Op: NewOpID()}
	out, _ := AppendHeader(nil, &h)
	// Rebuild with a 1025-byte id by hand.
	idAt := fixedLen + 1 + 1 + 1 + 1
	id := strings.Repeat("i", MaxTargetIDLen+1)
	rebuilt := append([]byte(nil), out[:idAt]...)
	rebuilt = append(rebuilt, byte(len(id)>>8), byte(len(id)))
	rebuilt = append(rebuilt, id...)
	rebuilt = append(rebuilt, out[idAt+2+1:]...)
	rebuilt[1], rebuilt[2] = byte(len(rebuilt)>>8), byte(len(rebuilt))
	return rebuilt
}

func objectWithoutID(t *testing.T) []byte {
	h := Header{Target: Target{Scope: ScopeChannel, Name: "k"}, Op: NewOpID()}
	out, _ := AppendHeader(nil, &h)
	out[offScope] = byte(ScopeObject)
	return out
}

func TestAppendHeaderRejectsOutOfBoundsFields(t *testing.T) {
	long := strings.Repeat("x", 256)
	cases := map[string]func(h *Header){
		"zero op":             func(h *Header) { h.Op = OpID{} },
		"long type":           func(h *Header) { h.Type = long },
		"long content type":   func(h *Header) { h.ContentType = long },
		"long target name":    func(h *Header) { h.Target.Name = long },
		"long id":             func(h *Header) { h.Target.ID = strings.Repeat("i", MaxTargetIDLen+1) },
		"long reply":          func(h *Header) { h.ReplyTo = long },
		"long origin":         func(h *Header) { h.Origin = long },
		"object without id":   func(h *Header) { h.Target.ID = "" },
		"channel with id":     func(h *Header) { h.Target.Scope = ScopeChannel },
		"none with name":      func(h *Header) { h.Target.Scope = ScopeNone },
		"bad scope":           func(h *Header) { h.Target.Scope = 7 },
		"negative deadline":   func(h *Header) { h.Deadline = time.Unix(-5, 0) },
		"empty meta key":      func(h *Header) { h.Meta = []MetaEntry{{"", "v"}} },
		"duplicate meta":      func(h *Header) { h.Meta = []MetaEntry{{"a", "1"}, {"a", "2"}} },
		"meta over 1 KiB":     func(h *Header) { h.Meta = []MetaEntry{{"a", strings.Repeat("v", 1022)}} },
		"meta value too long": func(h *Header) { h.Meta = []MetaEntry{{"a", strings.Repeat("v", 2000)}} },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			h := fullHeader()
			h.Meta = nil
			mutate(&h)
			dst := []byte("keep")
			out, err := AppendHeader(dst, &h)
			if !errors.Is(err, InvalidOperation) {
				t.Fatalf("err = %v, want InvalidOperation", err)
			}
			if string(out) != "keep" {
				t.Fatal("dst changed on error")
			}
		})
	}
	h := fullHeader()
	h.Meta = []MetaEntry{{"a", strings.Repeat("v", MaxMetadataLen-1-1-2)}}
	if _, err := AppendHeader(nil, &h); err != nil {
		t.Fatalf("metadata of exactly 1 KiB rejected: %v", err)
	}
	h = fullHeader()
	h.Origin = strings.Repeat("o", 255)
	if _, err := AppendHeader(nil, &h); err != nil {
		t.Fatalf("origin of exactly 255 bytes rejected: %v", err)
	}
}

func TestHeaderOriginOf256BytesIsInvalidOperation(t *testing.T) {
	h := fullHeader()
	h.Origin = strings.Repeat("o", 256)
	out, err := AppendHeader([]byte("keep"), &h)
	if !errors.Is(err, InvalidOperation) || !strings.Contains(err.Error(), "origin") {
		t.Fatalf("err = %v, want InvalidOperation about the origin", err)
	}
	if string(out) != "keep" {
		t.Fatal("dst changed on error")
	}
}

func TestHeaderVersion1FrameIsProtocolError(t *testing.T) {
	h := fullHeader()
	frame, _ := AppendHeader(nil, &h)
	frame[0] = 0xB1
	_, _, err := DecodeHeader(frame)
	if !errors.Is(err, ProtocolError) || !strings.Contains(err.Error(), "unknown header version") {
		t.Fatalf("version-1 frame: err = %v, want ProtocolError unknown header version", err)
	}
}

func TestHeaderTruncatedOriginIsProtocolError(t *testing.T) {
	// A header whose origin length runs past the header length.
	h := Header{Target: Target{Scope: ScopeChannel, Name: "news"}, Op: NewOpID(), Origin: "h"}
	frame, _ := AppendHeader(nil, &h)
	originAt := len(frame) - 2 - 1 - 1 // metadata length, origin byte, origin length
	if frame[originAt] != 1 || frame[originAt+1] != 'h' {
		t.Fatalf("origin not at %d", originAt)
	}
	frame[originAt] = 4 // 'h' and the metadata length are 3 bytes: one past the header's end
	_, _, err := DecodeHeader(frame)
	if !errors.Is(err, ProtocolError) || !strings.Contains(err.Error(), "truncated origin") {
		t.Fatalf("err = %v, want ProtocolError truncated origin", err)
	}
	// A header cut just before the origin's length byte.
	cut := frame[:originAt:originAt]
	cut[1], cut[2] = byte(len(cut)>>8), byte(len(cut))
	if _, _, err := DecodeHeader(cut); !errors.Is(err, ProtocolError) {
		t.Fatalf("header without an origin field: err = %v, want ProtocolError", err)
	}
}

func TestHeaderStampRoundTrips(t *testing.T) {
	for _, st := range []struct {
		origin     string
		epoch, seq uint64
	}{{"", 0, 0}, {"host-1", 1, 1}, {strings.Repeat("o", 255), 1<<64 - 1, 1<<64 - 1}, {"", 7, 0}, {"x", 0, 42}} {
		h := fullHeader()
		h.Origin, h.Epoch, h.Seq = st.origin, st.epoch, st.seq
		frame, err := AppendHeader(nil, &h)
		if err != nil {
			t.Fatal(err)
		}
		if len(frame) > MaxHeaderLen {
			t.Fatalf("header of %d bytes is over MaxHeaderLen", len(frame))
		}
		v, n, err := DecodeHeader(frame)
		if err != nil || n != len(frame) {
			t.Fatal(err, n)
		}
		got := v.Header()
		if got.Origin != h.Origin || got.Epoch != h.Epoch || got.Seq != h.Seq ||
			got.Type != h.Type || got.ReplyTo != h.ReplyTo || got.Target != h.Target || len(got.Meta) != len(h.Meta) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, h)
		}
		if again, err := AppendHeader(nil, &got); err != nil || !bytes.Equal(again, frame) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	}
}

func TestMaxHeaderLenIsReachableAndFits(t *testing.T) {
	long := strings.Repeat("x", 255)
	meta := strings.Repeat("v", MaxMetadataLen-1-1-2)
	h := Header{Type: long, ContentType: long, Target: Target{Scope: ScopeObject, Name: long, ID: strings.Repeat("i", MaxTargetIDLen)},
		Op: NewOpID(), ReplyTo: long, Origin: long, Epoch: 1, Seq: 2, Meta: []MetaEntry{{"a", meta}}}
	frame, err := AppendHeader(nil, &h)
	if err != nil {
		t.Fatal(err)
	}
	if len(frame) != MaxHeaderLen || MaxHeaderLen > 1<<16-1 {
		t.Fatalf("largest header is %d bytes, MaxHeaderLen %d", len(frame), MaxHeaderLen)
	}
	if _, _, err := DecodeHeader(frame); err != nil {
		t.Fatal(err)
	}
}

func TestOpIDsAreUniqueAndNonZero(t *testing.T) {
	seen := map[OpID]bool{}
	for i := 0; i < 10000; i++ {
		id := NewOpID()
		if id.IsZero() || seen[id] {
			t.Fatalf("op id %s is zero or repeated", id)
		}
		seen[id] = true
	}
	if len(NewOpID().String()) != 32 {
		t.Fatal("OpID.String is not 32 hex digits")
	}
}

func TestSetForwardAndFlagsRewriteFixedFieldsInPlace(t *testing.T) {
	h := fullHeader()
	frame, _ := AppendHeader(nil, &h)
	frame = append(frame, "body"...)
	if err := SetForward(frame, 5, 99); err != nil {
		t.Fatal(err)
	}
	if err := SetFlags(frame, 0x42); err != nil {
		t.Fatal(err)
	}
	v, n, err := DecodeHeader(frame)
	if err != nil || v.Hops() != 5 || v.Generation() != 99 || v.Flags() != 0x42 || string(frame[n:]) != "body" {
		t.Fatalf("after rewrite: hops %d gen %d flags %x err %v", v.Hops(), v.Generation(), v.Flags(), err)
	}
	if v.Op() != h.Op || string(v.TargetID()) != h.Target.ID {
		t.Fatal("other fields changed")
	}
	if err := SetForward([]byte("short"), 1, 1); !errors.Is(err, ProtocolError) {
		t.Fatalf("SetForward of a non-frame = %v", err)
	}
}

func TestSetStampRewritesEpochAndSeqInPlace(t *testing.T) {
	h := fullHeader()
	frame, _ := AppendHeader(nil, &h)
	frame = append(frame, "body"...)
	before := append([]byte(nil), frame...)
	if err := SetStamp(frame, 12, 345); err != nil {
		t.Fatal(err)
	}
	v, n, err := DecodeHeader(frame)
	if err != nil || v.Epoch() != 12 || v.Seq() != 345 || string(frame[n:]) != "body" {
		t.Fatalf("after SetStamp: epoch %d seq %d err %v", v.Epoch(), v.Seq(), err)
	}
	if got := v.Header(); got.Epoch != 12 || got.Seq != 345 || got.Origin != h.Origin {
		t.Fatalf("Header() after SetStamp = %+v", got)
	}
	// Only the sixteen stamp bytes changed.
	for i := range frame {
		if (i < offEpoch || i >= offSeq+8) && frame[i] != before[i] {
			t.Fatalf("byte %d changed", i)
		}
	}
	if err := SetStamp(frame, 0, 0); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := DecodeHeader(frame); v.Epoch() != 0 || v.Seq() != 0 {
		t.Fatal("SetStamp(0, 0) did not clear the stamp")
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := SetStamp(frame, 1, 2); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("SetStamp allocates %.1f times per call, want 0", allocs)
	}
	if err := SetStamp([]byte("short"), 1, 1); !errors.Is(err, ProtocolError) {
		t.Fatalf("SetStamp of a short non-frame = %v", err)
	}
	old := append([]byte(nil), before...)
	old[0] = 0xB1
	if err := SetStamp(old, 1, 1); !errors.Is(err, ProtocolError) || !bytes.Equal(old[1:], before[1:]) {
		t.Fatalf("SetStamp of a version-1 frame = %v, or it wrote", err)
	}
}

func TestAppendHeaderIntoCapacityAllocatesNothing(t *testing.T) {
	h := fullHeader()
	buf := make([]byte, 0, MaxHeaderLen)
	allocs := testing.AllocsPerRun(1000, func() {
		var err error
		if buf, err = AppendHeader(buf[:0], &h); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendHeader allocates %.1f times per call, want 0", allocs)
	}
}
