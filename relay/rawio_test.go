package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// rawIO reads and writes a TCP connection as net.Conn does: the bytes, a large write through a
// full send buffer, io.EOF at the peer's close, deadlines, and errors worded "read tcp ...".
func TestRawIO(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peerc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); peerc <- c }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-peerc
	rw := newRawIO(c)
	if _, ok := rw.(*rawIO); !ok {
		t.Fatalf("a TCP connection is not wrapped: %T", rw)
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MB: more than a socket buffer holds
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(io.LimitReader(peer, int64(len(big)))); got <- b }()
	if n, err := rw.Write(big); n != len(big) || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("the peer read %d bytes, not what was written", len(b))
	}

	peer.Write([]byte("hello"))
	buf := make([]byte, 16)
	if n, err := io.ReadAtLeast(rw, buf, 5); n != 5 || err != nil || string(buf[:5]) != "hello" {
		t.Fatalf("read: %q, %v", buf[:n], err)
	}

	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = rw.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.HasPrefix(err.Error(), "read tcp ") {
		t.Fatalf("deadline: %v", err)
	}
	c.SetReadDeadline(time.Time{})

	peer.Close()
	if _, err := rw.Read(buf); err != io.EOF {
		t.Fatalf("peer closed: %v, want EOF", err)
	}
	c.Close()
	if _, err := rw.Write([]byte("x")); err == nil || !strings.Contains(err.Error(), "use of closed network connection") ||
		!strings.HasPrefix(err.Error(), "write tcp ") {
		t.Fatalf("write after close: %v", err)
	}
}
