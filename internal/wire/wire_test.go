package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/berthrt/berth/payload"
)

func TestReaderReadsWhatTheAppendersWrote(t *testing.T) {
	b := AppendString(nil, "héllo")
	b = AppendBytes(b, []byte{1, 2, 3})
	b = AppendBool(b, true)
	r := &Reader{B: b, Op: "test", What: "item"}
	if s, p, ok := r.String("s"), r.Bytes("b"), r.Bool("ok"); s != "héllo" || string(p) != "\x01\x02\x03" || !ok || r.End() != nil {
		t.Fatalf("read %q %v %v, err %v", s, p, ok, r.End())
	}
}

func TestReaderRejectsMalformedInputNamingTheField(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		read func(r *Reader)
		want string
	}{
		{[]byte{5, 'a'}, func(r *Reader) { r.String("name") }, "item.name: length 5 past the end"},
		{[]byte{0x80, 0x00}, func(r *Reader) { r.Bytes("data") }, "item.data: length varint is not minimally encoded"},
		{[]byte{2}, func(r *Reader) { r.Bool("flag") }, "item.flag: bool byte 2"},
		{[]byte{1, 2}, func(r *Reader) { r.Uint32("n") }, "truncated item.n: need 4 bytes, 2 left"},
		{[]byte{0, 9}, func(r *Reader) { r.String("empty") }, "1 trailing bytes after item"},
	} {
		r := &Reader{B: c.in, Op: "test", What: "item"}
		c.read(r)
		err := r.End()
		if !errors.Is(err, payload.ProtocolError) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%x: %v, want a ProtocolError saying %q", c.in, err, c.want)
		}
		if r.Uint64("after") != 0 || r.String("after") != "" {
			t.Errorf("%x: a read after the failure returned a value", c.in)
		}
	}
}

func TestReaderAliasesOnlyWhenAsked(t *testing.T) {
	b := AppendBytes(nil, []byte("abc"))
	copied := (&Reader{B: b}).Bytes("x")
	aliased := (&Reader{B: b, Alias: true}).Bytes("x")
	if &copied[0] == &b[1] || &aliased[0] != &b[1] || cap(aliased) != 3 {
		t.Fatal("Bytes copies unless Alias, and an aliased slice ends where its field ends")
	}
}
