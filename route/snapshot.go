package route

import (
	"encoding/binary"

	"github.com/berthrt/berth/payload"
)

// Snapshot is an object's order and trail state as it travels with the
// object (in its move record) or rests with it (in its Location Store row
// while it is deactivated). Durations are relative (how long ago), so that
// hosts need not share a clock.
type Snapshot struct {
	Senders []SenderState
	Trail   []TrailAge
	// Takeover is the inbox's takeover fact, if the object was taken over
	// from a crashed owner (Inbox.TakenOver): it goes with the order
	// state, so that wherever the object runs next, a sender the crashed
	// owner knew and this state does not waits at most Wait before its
	// first message.
	Takeover TakeoverAge
}

// TakeoverAge is a takeover fact in a Snapshot: how long before the
// snapshot it was (Ago), and its Window and Wait. The zero value is none.
type TakeoverAge struct {
	Ago, Window, Wait int64 // nanoseconds
}

// SenderState is one sender's place in an Order.
type SenderState struct {
	Sender string
	Epoch  uint64
	Next   uint64
	Idle   int64 // nanoseconds since its last message
	Waited int64 // nanoseconds its oldest held message has waited
	Held   []HeldFrame
	// Unsure: below it, in Epoch, a sequence number may have been given
	// up on rather than released, so a message sent again there may be
	// new (Order.Repeat). A snapshot of version 2 or older does not carry
	// it: it decodes as Next.
	Unsure uint64
}

// HeldFrame is a held message as an encoded frame.
type HeldFrame struct {
	Seq   uint64
	Frame []byte
}

// TrailAge is a Trail host and how long its forwarding route still lasts.
type TrailAge struct {
	Host string
	Left int64 // nanoseconds
}

// TrailSnapshot returns the live hosts of t for a Snapshot.
func (t *Trail) Snapshot(now int64) []TrailAge {
	var out []TrailAge
	for _, h := range t.Live(now) {
		out = append(out, TrailAge{Host: h.Host, Left: h.Until - now})
	}
	return out
}

// Restore replaces t with the hosts of a Snapshot.
func (t *Trail) Restore(s []TrailAge, now int64) {
	t.hosts = t.hosts[:0]
	for _, h := range s {
		if h.Left > 0 {
			t.Add(h.Host, now+h.Left)
		}
	}
}

// Snapshot encodings: version 1 has no takeover; version 2 ends with a
// byte (1: a takeover follows, its three durations; 0: none); version 3
// ends, after that, with the senders' Unsure: their count again, then one
// each, in the senders' order.
const (
	snapshotV1      = 1
	snapshotV2      = 2
	snapshotVersion = 3
)

// AppendSnapshot appends s's encoding to dst: a version byte, the
// senders, the trail, the takeover, the senders' Unsure. Names are at
// most 255 bytes (longer ones are cut); integers are big-endian.
func AppendSnapshot(dst []byte, s Snapshot) []byte {
	dst = append(dst, snapshotVersion)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s.Senders)))
	for _, st := range s.Senders {
		dst = appendName(dst, st.Sender)
		dst = binary.BigEndian.AppendUint64(dst, st.Epoch)
		dst = binary.BigEndian.AppendUint64(dst, st.Next)
		dst = binary.BigEndian.AppendUint64(dst, uint64(max(st.Idle, 0)))
		dst = binary.BigEndian.AppendUint64(dst, uint64(max(st.Waited, 0)))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(st.Held)))
		for _, h := range st.Held {
			dst = binary.BigEndian.AppendUint64(dst, h.Seq)
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(h.Frame)))
			dst = append(dst, h.Frame...)
		}
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s.Trail)))
	for _, t := range s.Trail {
		dst = appendName(dst, t.Host)
		dst = binary.BigEndian.AppendUint64(dst, uint64(max(t.Left, 0)))
	}
	if s.Takeover == (TakeoverAge{}) {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		for _, v := range []int64{s.Takeover.Ago, s.Takeover.Window, s.Takeover.Wait} {
			dst = binary.BigEndian.AppendUint64(dst, uint64(max(v, 0)))
		}
	}
	return appendUnsure(dst, s.Senders)
}

// appendUnsure appends version 3's last part: the senders' Unsure.
func appendUnsure(dst []byte, senders []SenderState) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(senders)))
	for _, st := range senders {
		dst = binary.BigEndian.AppendUint64(dst, st.Unsure)
	}
	return dst
}

func appendName(dst []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	dst = append(dst, byte(len(s)))
	return append(dst, s...)
}

// DecodeSnapshot decodes an AppendSnapshot encoding; an empty b is the
// empty Snapshot. Held frames alias b. Anything malformed — a wrong
// version, a truncation, a count larger than the bytes, bytes left over —
// is a ProtocolError.
func DecodeSnapshot(b []byte) (Snapshot, error) {
	var s Snapshot
	if len(b) == 0 {
		return s, nil
	}
	d := decoder{b: b, ok: true}
	v := d.u8()
	if v != snapshotVersion && v != snapshotV2 && v != snapshotV1 {
		return Snapshot{}, snapshotError("unknown snapshot version")
	}
	n := int(d.u16())
	if n > len(d.b)/37 { // a sender takes at least 37 bytes
		return Snapshot{}, snapshotError("sender count larger than the snapshot")
	}
	for i := 0; i < n && d.ok; i++ {
		st := SenderState{Sender: d.name(), Epoch: d.u64(), Next: d.u64(),
			Idle: d.dur(), Waited: d.dur()}
		h := int(d.u32())
		if h > len(d.b)/12 {
			return Snapshot{}, snapshotError("held count larger than the snapshot")
		}
		for j := 0; j < h && d.ok; j++ {
			seq := d.u64()
			st.Held = append(st.Held, HeldFrame{Seq: seq, Frame: d.bytes(int(d.u32()))})
		}
		s.Senders = append(s.Senders, st)
	}
	t := int(d.u16())
	if t > len(d.b)/9 {
		return Snapshot{}, snapshotError("trail count larger than the snapshot")
	}
	for i := 0; i < t && d.ok; i++ {
		s.Trail = append(s.Trail, TrailAge{Host: d.name(), Left: d.dur()})
	}
	if v >= snapshotV2 {
		switch d.u8() {
		case 0:
		case 1:
			s.Takeover = TakeoverAge{Ago: d.dur(), Window: d.dur(), Wait: d.dur()}
			if d.ok && s.Takeover == (TakeoverAge{}) {
				return Snapshot{}, snapshotError("an empty takeover marked present")
			}
		default:
			return Snapshot{}, snapshotError("bad takeover flag")
		}
	}
	if v >= snapshotVersion {
		if d.ok && int(d.u16()) != len(s.Senders) {
			return Snapshot{}, snapshotError("unsure count differs from the sender count")
		}
		for i := range s.Senders {
			s.Senders[i].Unsure = d.u64()
		}
	} else {
		for i := range s.Senders {
			s.Senders[i].Unsure = s.Senders[i].Next
		}
	}
	if !d.ok {
		return Snapshot{}, snapshotError("truncated snapshot")
	}
	if len(d.b) != 0 {
		return Snapshot{}, snapshotError("bytes after the snapshot")
	}
	return s, nil
}

func snapshotError(detail string) error {
	return payload.NewError(payload.ProtocolError, "route.DecodeSnapshot", detail)
}

// decoder reads big-endian fields; after a short read ok is false and
// every later read returns zero.
type decoder struct {
	b  []byte
	ok bool
}

func (d *decoder) take(n int) []byte {
	if !d.ok {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.ok, d.b = false, nil
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if b := d.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// dur reads a duration in nanoseconds (at most about 146 years).
func (d *decoder) dur() int64 { return int64(min(d.u64(), 1<<62)) }

func (d *decoder) name() string { return string(d.take(int(d.u8()))) }

func (d *decoder) bytes(n int) []byte { return d.take(n) }
