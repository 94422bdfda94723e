package tests

// The floor of the benchmarks across processes: raw TCP (and TLS 1.3)
// ping-pong with a rawtcp child (rawtcp_child_test.go) on loopback, no
// actors, no serialization but a 4-byte length. Each frame carries a
// 64-byte payload whose first 8 bytes are the message's number; every
// echo must come back exactly as sent.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
)

const rawPayload = 64

// rawConn starts a rawtcp child (with TLS 1.3 when tlsOn, its certificate
// from the tests' CA) and dials it, with TCP_NODELAY.
func rawConn(b *testing.B, tlsOn bool) net.Conn {
	b.Helper()
	if testutil.Race {
		b.Skip("benchmarks run without -race")
	}
	var env []string
	if tlsOn {
		env = []string{"BERTH_CHILD_TLS=1"}
	}
	ch := startChild(b, "rawtcp", "rawtcp", env...)
	raw, err := net.Dial("tcp", ch.addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { raw.Close() })
	if err := raw.(*net.TCPConn).SetNoDelay(true); err != nil { // Go's default
		b.Fatal(err)
	}
	if !tlsOn {
		return raw
	}
	host, _, _ := net.SplitHostPort(ch.addr)
	c := tls.Client(raw, &tls.Config{RootCAs: testCA().Pool(), ServerName: host, MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS13})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		b.Fatal(err)
	}
	if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
		b.Fatalf("TLS version %x, want TLS 1.3", v)
	}
	return c
}

// rawFrame returns a frame of a rawPayload-byte payload.
func rawFrame() []byte {
	f := make([]byte, 4+rawPayload)
	binary.BigEndian.PutUint32(f, rawPayload)
	for i := 4 + 8; i < len(f); i++ {
		f[i] = byte(i)
	}
	return f
}

// setRawSeq numbers frame f with seq.
func setRawSeq(f []byte, seq uint64) { binary.BigEndian.PutUint64(f[4:], seq) }

// benchRawRoundTrips: one frame out, its echo back, per op.
func benchRawRoundTrips(b *testing.B, c net.Conn) {
	out, in := rawFrame(), make([]byte, 4+rawPayload)
	roundTrip := func(seq uint64) {
		setRawSeq(out, seq)
		if _, err := c.Write(out); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, in); err != nil {
			b.Fatal(err)
		}
		if !bytes.Equal(in, out) {
			b.Fatalf("echo %d: got %x, want %x", seq, in, out)
		}
	}
	roundTrip(0) // warm up, outside the clock
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		roundTrip(uint64(i + 1))
	}
	b.StopTimer()
}

// BenchmarkProcsRawTCPRoundTrip: one 64-byte frame and its echo at a
// time over plain TCP to another process; ns/op is the round trip.
func BenchmarkProcsRawTCPRoundTrip(b *testing.B) {
	benchRawRoundTrips(b, rawConn(b, false))
}

// BenchmarkProcsRawTLSRoundTrip is BenchmarkProcsRawTCPRoundTrip over TLS
// 1.3.
func BenchmarkProcsRawTLSRoundTrip(b *testing.B) {
	benchRawRoundTrips(b, rawConn(b, true))
}

// BenchmarkProcsRawTCPPipelined: a writer goroutine sends b.N 64-byte
// frames through a bufio.Writer — it writes to the socket when its buffer
// fills and flushes when no frame is left to send — while this goroutine
// reads the b.N echoes; ns/op is per message.
func BenchmarkProcsRawTCPPipelined(b *testing.B) {
	c := rawConn(b, false)
	_ = c.SetDeadline(time.Now().Add(10 * time.Minute)) // a hang fails rather than blocks
	in := make([]byte, 4+rawPayload)
	if _, err := c.Write(rawFrame()); err != nil { // warm up, outside the clock
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, in); err != nil {
		b.Fatal(err)
	}
	r := bufio.NewReaderSize(c, 16<<10)
	// want is what echo seq must be: the writer's frame, renumbered.
	want := rawFrame()
	w, out, werr := bufio.NewWriterSize(c, 16<<10), rawFrame(), make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for i := range b.N {
			setRawSeq(out, uint64(i))
			if _, err := w.Write(out); err != nil {
				werr <- err
				c.Close() // unblocks the reader
				return
			}
		}
		werr <- w.Flush()
	}()
	for i := range b.N {
		if _, err := io.ReadFull(r, in); err != nil {
			c.Close() // the writer stops too
			b.Fatal(errors.Join(err, <-werr))
		}
		setRawSeq(want, uint64(i))
		if !bytes.Equal(in, want) {
			b.Fatalf("echo %d: got %x, want %x", i, in, want)
		}
	}
	b.StopTimer()
	if err := <-werr; err != nil {
		b.Fatal(err)
	}
}
