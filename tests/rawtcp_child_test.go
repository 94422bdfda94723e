package tests

// The rawtcp child role: a bare TCP echo server, the floor of the
// benchmarks across processes (bench_rawtcp_test.go). It listens on
// 127.0.0.1:0, prints "ready rawtcp <addr>" (the first line startChild
// waits for) and echoes every frame — a 4-byte big-endian length and that
// many bytes — back as it came, on every connection. It exits when its
// standard input ends.
//
// BERTH_CHILD_TLS=1 makes it a TLS 1.3 server instead, with a certificate
// for 127.0.0.1 from the tests' CA (tls_test.go; the parent hands it over
// in the environment), which the parent trusts.

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
)

// rawFrameMax bounds the frames the rawtcp child accepts.
const rawFrameMax = 1 << 20

func childRawTCP() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		return 1
	}
	defer ln.Close()
	if os.Getenv("BERTH_CHILD_TLS") == "1" {
		cert, err := testCA().IssueTLS("rawtcp", "127.0.0.1")
		if err != nil {
			fmt.Fprintln(os.Stderr, "certificate:", err)
			return 1
		}
		ln = tls.NewListener(ln, &tls.Config{
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS13,
			MaxVersion:   tls.VersionTLS13,
		})
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					fmt.Fprintln(os.Stderr, "accept:", err)
				}
				return
			}
			go rawEchoConn(c)
		}
	}()
	fmt.Printf("ready rawtcp %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent is gone
	return 0
}

// rawEchoConn echoes c's frames until it ends. Its writes are coalesced:
// it flushes when no more of the peer's bytes are already read, so one
// frame at a time goes back at once and a pipelined stream in batches.
func rawEchoConn(c net.Conn) {
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // Go's default, said out loud
	}
	r, w := bufio.NewReaderSize(c, 16<<10), bufio.NewWriterSize(c, 16<<10)
	var hdr [4]byte
	buf := make([]byte, 0, 64)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintln(os.Stderr, "read:", err)
			}
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > rawFrameMax {
			fmt.Fprintf(os.Stderr, "frame of %d bytes: more than %d\n", n, rawFrameMax)
			return
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			fmt.Fprintln(os.Stderr, "read:", err)
			return
		}
		_, _ = w.Write(hdr[:])
		_, _ = w.Write(buf)
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				fmt.Fprintln(os.Stderr, "write:", err)
				return
			}
		}
	}
}
