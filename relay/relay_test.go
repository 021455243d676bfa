package main

// The relay in process between a test client and two fake backends that speak just enough of
// the protocol: statement ids are mapped across a move, types are sent again after the
// re-prepare, a held command waits, a transaction goes on through a hold.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeBackend struct {
	t    *testing.T
	ln   net.Listener
	h2   []byte
	base uint32
	mu   sync.Mutex
	seen []string
	more chan struct{} // STREAM: the result set's end is sent once this is closed
}

func newFakeBackend(t *testing.T, h2 []byte, base uint32) *fakeBackend {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBackend{t: t, ln: ln, h2: h2, base: base}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return f
}

func (f *fakeBackend) addr() string { return f.ln.Addr().String() }

func (f *fakeBackend) note(s string) {
	f.mu.Lock()
	f.seen = append(f.seen, s)
	f.mu.Unlock()
}

func (f *fakeBackend) log() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.seen, "; ")
}

func (f *fakeBackend) serve(c net.Conn) {
	defer c.Close()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	send := func(seq byte, p []byte) { writePacket(w, seq, p); w.Flush() }
	nonce := newNonce()
	g := greeting{version: "5.5.5-10.11.99-MariaDB-fake", connID: 1, nonce: nonce, caps: relayCaps, charset: 45, plugin: nativePlugin}
	send(0, g.encode())
	p, seq, err := readPacket(r, nil)
	if err != nil {
		return // the relay's probe
	}
	hr, err := parseHandshakeResponse(p)
	if _, good := recoverH1(hr.token, nonce, f.h2); err != nil || !good {
		send(seq+1, errPacket(erAccessDenied, "28000", "Access denied"))
		return
	}
	f.note("login db=" + hr.db)
	var status uint16 = statusAutocommit
	send(seq+1, ok(status, 0))
	next := f.base
	for {
		p, _, err := readPacket(r, nil)
		if err != nil || len(p) == 0 || p[0] == comQuit {
			return
		}
		switch p[0] {
		case comQuery:
			q := string(p[1:])
			f.note(q)
			if q == "STREAM" { // a result set whose end comes later
				send(1, []byte{1})
				send(2, colDef)
				send(3, eof(status))
				send(4, []byte{1, '1'})
				<-f.more
				send(5, eof(status))
				continue
			}
			switch q {
			case "BEGIN":
				status |= statusInTrans
			case "COMMIT":
				status &^= statusInTrans
			}
			send(1, ok(status, 0))
		case comStmtPrepare:
			f.note(fmt.Sprintf("prepare %d %s", next, p[1:]))
			send(1, prepareOK(next, 0, 1))
			send(2, colDef)
			send(3, eof(status))
			next++
		case comStmtExecute:
			f.note(fmt.Sprintf("execute %d bound=%d", binary.LittleEndian.Uint32(p[1:]), p[11]))
			send(1, ok(status, 0))
		case comStmtClose:
			f.note(fmt.Sprintf("close %d", binary.LittleEndian.Uint32(p[1:])))
		}
	}
}

type testClient struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dialRelay(t *testing.T, addr, user, password, db string) *testClient {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tc := &testClient{t: t, c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}
	p, seq, err := readPacket(tc.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := parseGreeting(p)
	if err != nil {
		t.Fatal(err)
	}
	h1 := sha1sum([]byte(password))
	hr := handshakeResponse{caps: g.caps &^ clientDeprecateEOF, maxPacket: 1 << 24, charset: 45, user: user,
		token: nativeToken(h1, g.nonce, sha1sum(h1)), db: db, plugin: nativePlugin}
	writePacket(tc.w, seq+1, hr.encode())
	tc.w.Flush()
	if p, _, err = readPacket(tc.r, nil); err != nil || p[0] != 0 {
		t.Fatalf("login: %v %v", p, err)
	}
	return tc
}

// do sends a command and reads its response; the first packet of it is returned.
func (tc *testClient) do(cmd []byte, kind respKind) ([]byte, error) {
	writePacket(tc.w, 0, cmd)
	tc.w.Flush()
	if kind == respNone {
		return nil, nil
	}
	w := newWalker(kind, false)
	var first []byte
	for {
		p, _, err := readPacket(tc.r, nil)
		if err != nil {
			return nil, err
		}
		if first == nil {
			first = p
		}
		if done, err := w.feed(p); err != nil || done {
			return first, err
		}
	}
}

func executeCmd(id uint32, bound bool) []byte {
	p := []byte{comStmtExecute, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(p[1:], id)
	if bound {
		return append(p, 1, 3, 0, 7, 0, 0, 0)
	}
	return append(p, 0, 7, 0, 0, 0)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestHoldMoveReleaseWithFakeBackends(t *testing.T) {
	h2 := sha1sum(sha1sum([]byte("pw")))
	a, b := newFakeBackend(t, h2, 100), newFakeBackend(t, h2, 500)
	users := filepath.Join(t.TempDir(), "users")
	os.WriteFile(users, []byte(fmt.Sprintf("app *%X\n", h2)), 0o600)
	r, err := newRelay(a.addr(), users, 5*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go r.serve(ln)

	cl := dialRelay(t, ln.Addr().String(), "app", "pw", "shop")
	cl.do(append([]byte{comQuery}, "SET @x = 1"...), respResults)
	cl.do(append([]byte{comQuery}, "USE other"...), respResults)
	p, err := cl.do(append([]byte{comStmtPrepare}, "SELECT ?"...), respPrepare)
	if err != nil {
		t.Fatal(err)
	}
	id := binary.LittleEndian.Uint32(p[1:])
	if id != 1 {
		t.Fatalf("the client sees the relay's statement id 1, got %d", id)
	}
	cl.do(executeCmd(id, true), respResults)
	if !strings.Contains(a.log(), "execute 100 bound=1") {
		t.Fatalf("backend a: %s", a.log())
	}

	tx := dialRelay(t, ln.Addr().String(), "app", "pw", "shop")
	tx.do(append([]byte{comQuery}, "BEGIN"...), respResults)

	r.hold()
	// The transaction goes on through the hold.
	if _, err := tx.do(append([]byte{comQuery}, "INSERT 1"...), respResults); err != nil {
		t.Fatal(err)
	}
	tx.do(append([]byte{comQuery}, "COMMIT"...), respResults)
	if st := r.status(); st.InTransaction != 0 {
		t.Fatalf("%+v", st)
	}
	// The next command of each waits.
	answered := make(chan error, 2)
	go func() { _, err := cl.do(executeCmd(id, false), respResults); answered <- err }()
	go func() { _, err := tx.do(append([]byte{comQuery}, "SELECT 2"...), respResults); answered <- err }()
	waitFor(t, "two sessions held", func() bool { return r.status().Held == 2 })
	select {
	case <-answered:
		t.Fatal("a held command was answered")
	case <-time.After(100 * time.Millisecond):
	}
	res, err := r.move(b.addr(), time.Second)
	if err != nil || res.Moved != 2 {
		t.Fatalf("move: %+v %v", res, err)
	}
	r.release("test")
	for i := 0; i < 2; i++ {
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
	}
	// On b: logged in to the session's current database, its SET replayed, the statement
	// prepared again, and the execute that sent no types given them back, under b's id.
	// (The two sessions moved in parallel: their lines interleave, each in its own order.)
	last, seen := -1, b.log()
	for _, want := range []string{"login db=other", "SET @x = 1", "prepare 500 SELECT ?", "execute 500 bound=1"} {
		at := strings.Index(seen, want)
		if at <= last {
			t.Fatalf("backend b: %s\nwant, in this order: %s", seen, want)
		}
		last = at
	}
	cl.do([]byte{comStmtClose, 1, 0, 0, 0}, respNone)
	cl.do(append([]byte{comQuery}, "SELECT 3"...), respResults)
	if !strings.Contains(b.log(), "close 500") {
		t.Fatalf("backend b: %s", b.log())
	}
	if p, _ := cl.do(executeCmd(1, true), respResults); p[0] != 0xff {
		t.Fatal("a closed statement must be unknown")
	}
	if st := r.status(); st.Backend != b.addr() || st.OnOldBackend != 0 || st.Holding {
		t.Fatalf("%+v", st)
	}
}

func TestHoldReleasesByItself(t *testing.T) {
	h2 := sha1sum(sha1sum([]byte("pw")))
	a := newFakeBackend(t, h2, 1)
	users := filepath.Join(t.TempDir(), "users")
	os.WriteFile(users, []byte(fmt.Sprintf("app *%X\n", h2)), 0o600)
	r, err := newRelay(a.addr(), users, 200*time.Millisecond, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go r.serve(ln)
	r.hold()
	start := time.Now()
	cl := dialRelay(t, ln.Addr().String(), "app", "pw", "") // held at its login, then let through
	if _, err := cl.do(append([]byte{comQuery}, "SELECT 1"...), respResults); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || r.status().Holding {
		t.Fatalf("released after %s", d)
	}
}

func TestWrongPasswordIsRefused(t *testing.T) {
	h2 := sha1sum(sha1sum([]byte("pw")))
	a := newFakeBackend(t, h2, 1)
	users := filepath.Join(t.TempDir(), "users")
	os.WriteFile(users, []byte(fmt.Sprintf("app *%X\n", h2)), 0o600)
	r, _ := newRelay(a.addr(), users, time.Second, time.Second)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go r.serve(ln)
	c, _ := net.Dial("tcp", ln.Addr().String())
	defer c.Close()
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	p, _, _ := readPacket(br, nil)
	g, _ := parseGreeting(p)
	h1 := sha1sum([]byte("not-pw"))
	hr := handshakeResponse{caps: g.caps, maxPacket: 1 << 24, charset: 45, user: "app",
		token: nativeToken(h1, g.nonce, sha1sum(h1)), plugin: nativePlugin}
	writePacket(bw, 1, hr.encode())
	bw.Flush()
	p, _, _ = readPacket(br, nil)
	if code, _ := errInfo(p); code != erAccessDenied {
		t.Fatalf("got %v", p)
	}
}

func TestATransactionStillOpenAfterTheDrainIsEndedWithAClearError(t *testing.T) {
	h2 := sha1sum(sha1sum([]byte("pw")))
	a, b := newFakeBackend(t, h2, 1), newFakeBackend(t, h2, 1)
	users := filepath.Join(t.TempDir(), "users")
	os.WriteFile(users, []byte(fmt.Sprintf("app *%X\n", h2)), 0o600)
	r, _ := newRelay(a.addr(), users, 5*time.Second, time.Second)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go r.serve(ln)
	tx := dialRelay(t, ln.Addr().String(), "app", "pw", "")
	idle := dialRelay(t, ln.Addr().String(), "app", "pw", "")
	tx.do(append([]byte{comQuery}, "BEGIN"...), respResults)
	res, _ := r.move(b.addr(), 150*time.Millisecond)
	if res.Moved != 1 || res.WaitingForCommit != 1 {
		t.Fatalf("%+v", res)
	}
	// Within the drain the transaction goes on, on the old backend.
	if p, err := tx.do(append([]byte{comQuery}, "INSERT 1"...), respResults); err != nil || p[0] != 0 {
		t.Fatalf("%v %v", p, err)
	}
	waitFor(t, "the session ended", func() bool { return r.status().Ended == 1 })
	p, err := tx.do(append([]byte{comQuery}, "COMMIT"...), respResults)
	code, msg := errInfo(p)
	if err != nil || code != erConnectionKilled || !strings.Contains(msg, "still in a transaction") {
		t.Fatalf("got %d %q %v", code, msg, err)
	}
	if strings.Contains(a.log(), "COMMIT") || strings.Contains(b.log(), "COMMIT") {
		t.Fatal("the COMMIT of an ended session reached a backend")
	}
	if p, _ := idle.do(append([]byte{comQuery}, "SELECT 1"...), respResults); p[0] != 0 || !strings.Contains(b.log(), "SELECT 1") {
		t.Fatal("the idle session works on the new backend")
	}
}

// A row the backend sent reaches the client while the relay waits for the rest of the result.
func TestRowsAreForwardedWhileTheResultIsStreamed(t *testing.T) {
	h2 := sha1sum(sha1sum([]byte("pw")))
	a := newFakeBackend(t, h2, 1)
	a.more = make(chan struct{})
	users := filepath.Join(t.TempDir(), "users")
	os.WriteFile(users, []byte(fmt.Sprintf("app *%X\n", h2)), 0o600)
	r, _ := newRelay(a.addr(), users, time.Second, time.Second)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go r.serve(ln)
	cl := dialRelay(t, ln.Addr().String(), "app", "pw", "")
	writePacket(cl.w, 0, append([]byte{comQuery}, "STREAM"...))
	cl.w.Flush()
	cl.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for i, want := range [][]byte{{1}, colDef, eof(statusAutocommit), {1, '1'}} {
		p, _, err := readPacket(cl.r, nil)
		if err != nil || string(p) != string(want) {
			t.Fatalf("packet %d: %v %v (the relay kept back what it had)", i, p, err)
		}
	}
	close(a.more)
	if p, _, err := readPacket(cl.r, nil); err != nil || !isEOF(p) {
		t.Fatalf("the end of the result: %v %v", p, err)
	}
}
