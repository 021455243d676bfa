package main

// One client session: its login, its command loop (read one command, send it, forward the
// response packet by packet until the response is complete), and the state it would need on
// another backend. Between two commands the session is at a statement boundary; there the
// hold gate may stop it, and a move may give it a new backend connection.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

const (
	phaseLogin = iota // authenticating, or waiting at the gate before its first backend login
	phaseIdle         // waiting for the client's next command
	phaseHeld         // a command (or the first login) waits at the gate
	phaseBusy         // a command is on the backend
)

type stmt struct {
	backendID uint32
	query     []byte // COM_STMT_PREPARE's text, to prepare again on a new backend
	numParams uint16
	types     []byte // the parameter types last sent, to send again after a re-prepare
	needTypes bool   // prepared again: the backend has no parameter types bound yet
	cursor    bool   // executed with a cursor not fully fetched
}

type session struct {
	id     uint32
	r      *Relay
	client net.Conn
	cr     *bufio.Reader
	cw     *bufio.Writer
	remote string

	hr           handshakeResponse // as the client logged in (token and plugin are per backend)
	h1, h2       []byte
	deprecateEOF bool

	// mu is held while the backend connection is replaced, by the session itself (at a command)
	// or by a move (while the session is idle or held): never while a command is on the backend.
	mu  sync.Mutex
	be  *backendConn
	gen atomic.Uint64 // the relay's backend generation this session's connection belongs to

	// The replayable state: touched by the session's goroutine while busy, by a move under mu.
	db       string
	sets     []string
	stmts    map[uint32]*stmt
	nextID   uint32
	lastID   uint32 // the client's id of the last statement prepared (MariaDB's id 0xffffffff)
	longData bool   // COM_STMT_SEND_LONG_DATA sent, its execute not yet
	cursors  int    // statements with an open cursor

	phase  atomic.Int32
	status atomic.Uint32 // the server status flags of the last OK/EOF
	ended  atomic.Pointer[string]
	beConn atomic.Pointer[backendConn] // for end(), from another goroutine
	buf    []byte                      // a response packet longer than the backend reader's buffer, reused
	cmdBuf []byte                      // the command being relayed, reused
}

func (s *session) inTrans() bool { return s.status.Load()&statusInTrans != 0 }

// pinned: the session holds server-side state the relay cannot move now (an open transaction,
// long data sent for an execute to come, an open cursor): it is neither held nor moved.
func (s *session) pinned() bool { return s.inTrans() || s.longData || s.cursors > 0 }

func (s *session) logf(format string, args ...any) {
	log.Printf("session %d (%s@%s): %s", s.id, s.hr.user, s.remote, fmt.Sprintf(format, args...))
}

func (s *session) serve() {
	defer s.close()
	if err := s.handshake(); err != nil {
		if !errors.Is(err, io.EOF) {
			s.logf("login failed: %v", err)
		}
		return
	}
	for {
		s.phase.Store(phaseIdle)
		cmd, packets, err := readLogical(s.cr, s.cmdBuf)
		s.cmdBuf = cmd
		if err != nil || len(cmd) == 0 || cmd[0] == comQuit {
			return
		}
		if err := s.admit(); err != nil {
			s.reply(byte(packets), errPacket(erConnectionKilled, "70100", err.Error()))
			return
		}
		if err := s.command(cmd, packets); err != nil {
			s.logf("%v", err)
			return
		}
	}
}

func (s *session) close() {
	s.r.forget(s)
	s.mu.Lock()
	s.be.close()
	s.mu.Unlock()
	s.client.Close()
}

// end ends a session that cannot be moved (still in a transaction after the drain): its
// backend connection is closed now; the client gets an ERR with msg (at once when a command
// is on its way, else at its next command).
func (s *session) end(msg string) {
	s.ended.Store(&msg)
	if b := s.beConn.Load(); b != nil {
		b.conn.Close()
	}
	s.logf("ended: %s", msg)
}

// handshake: the relay's greeting, the client's token checked against the stored hash, then
// (after the gate, if the relay holds) the login to the current backend.
func (s *session) handshake() error {
	s.phase.Store(phaseLogin)
	nonce := newNonce()
	g := s.r.greetingFor(s.id, nonce)
	if err := s.reply(0, g.encode()); err != nil {
		return err
	}
	s.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, seq, err := readPacket(s.cr, nil)
	if err != nil { // gone before a word (a port check, a balancer's probe): not worth a log line
		return io.EOF
	}
	hr, err := parseHandshakeResponse(p)
	if err != nil {
		s.reply(seq+1, errPacket(1043, "08S01", "Bad handshake"))
		return err
	}
	s.hr = *hr
	if hr.plugin != "" && hr.plugin != nativePlugin { // ask for mysql_native_password
		sw := append([]byte{0xfe}, nativePlugin...)
		sw = append(append(append(sw, 0), nonce...), 0)
		if err := s.reply(seq+1, sw); err != nil {
			return err
		}
		if p, seq, err = readPacket(s.cr, nil); err != nil {
			return err
		}
		hr.token = append([]byte{}, p...)
	}
	s.client.SetReadDeadline(time.Time{})
	h2, known := s.r.hash(hr.user)
	h1, ok := recoverH1(hr.token, nonce, h2)
	if !known || !ok {
		used := "NO"
		if len(hr.token) > 0 {
			used = "YES"
		}
		host, _, _ := net.SplitHostPort(s.remote)
		s.reply(seq+1, errPacket(erAccessDenied, "28000", fmt.Sprintf("Access denied for user '%s'@'%s' (using password: %s)", hr.user, host, used)))
		return fmt.Errorf("access denied (user known to the relay: %v)", known)
	}
	s.h1, s.h2 = h1, h2
	s.hr.caps = hr.caps & g.caps
	s.deprecateEOF = s.hr.caps&clientDeprecateEOF != 0
	s.db = hr.db

	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.r.target.Load()
	b, okp, err := login(t.addr, s.loginAs(), s.h1, s.h2, s.r.dialTimeout)
	if err != nil {
		var refused *refusedError
		if errors.As(err, &refused) {
			s.reply(seq+1, refused.payload)
		} else {
			s.reply(seq+1, errPacket(erConnectionKilled, "08S01", fmt.Sprintf("relay: cannot log in to backend %s: %v", t.addr, err)))
		}
		return err
	}
	s.setBackend(b, t.gen)
	if st, ok := okStatus(okp); ok {
		s.status.Store(uint32(st))
	}
	return s.reply(seq+1, okp)
}

// loginAs: the handshake response for a backend, with the session's current database.
func (s *session) loginAs() handshakeResponse {
	hr := s.hr
	hr.db = s.db
	if s.db != "" {
		hr.caps |= clientConnectWithDB
	}
	return hr
}

func (s *session) setBackend(b *backendConn, gen uint64) {
	s.be = b
	s.beConn.Store(b)
	s.gen.Store(gen)
}

// waitGate waits while the relay holds, unless the session is pinned (it keeps going until its
// transaction ends).
func (s *session) waitGate() {
	for {
		g := s.r.gate.Load()
		if g == nil || s.pinned() {
			return
		}
		s.phase.Store(phaseHeld)
		<-g.ch
	}
}

// admit is the statement boundary: the gate, then a new backend connection if the relay moved
// and the session can move.
func (s *session) admit() error {
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg := s.ended.Load(); msg != nil {
		return errors.New(*msg)
	}
	if t := s.r.target.Load(); s.gen.Load() != t.gen && !s.pinned() {
		if err := s.moveTo(t.addr, t.gen); err != nil {
			return fmt.Errorf("relay: could not move the session to %s: %v", t.addr, err)
		}
	}
	s.phase.Store(phaseBusy)
	return nil
}

// reply sends the relay's own packet to the client.
func (s *session) reply(seq byte, payload []byte) error {
	if _, err := writeLogical(s.cw, seq, payload); err != nil {
		return err
	}
	return s.cw.Flush()
}

// command relays one command and its response. An error ends the session.
func (s *session) command(cmd []byte, packets int) error {
	clientSeq := byte(packets) // the sequence number the client expects next
	var st *stmt
	switch cmd[0] {
	case comChangeUser, comSetOption:
		return s.reply(clientSeq, errPacket(erNotSupportedYet, "42000", fmt.Sprintf("relay: command 0x%02x is not supported", cmd[0])))
	case comStmtExecute, comStmtSendLong, comStmtClose, comStmtReset, comStmtFetch:
		if len(cmd) < 5 {
			return s.reply(clientSeq, errPacket(1835, "08S01", "Malformed communication packet"))
		}
		id := binary.LittleEndian.Uint32(cmd[1:])
		if id == 0xffffffff {
			id = s.lastID
		}
		if st = s.stmts[id]; st == nil {
			if cmd[0] == comStmtClose || cmd[0] == comStmtSendLong {
				return nil // no response expected
			}
			return s.reply(clientSeq, errPacket(erUnknownStmt, "HY000", fmt.Sprintf("Unknown prepared statement handler (%d) given to mysqld_stmt_execute", id)))
		}
		binary.LittleEndian.PutUint32(cmd[1:], st.backendID)
		switch cmd[0] {
		case comStmtExecute:
			cmd = executeWithTypes(cmd, st)
		case comStmtSendLong:
			s.longData = true
		case comStmtClose:
			delete(s.stmts, id)
			if st.cursor {
				s.cursors--
			}
		}
	}
	kind, known := responseKind(cmd[0])
	if !known {
		return s.reply(clientSeq, errPacket(erUnknownCom, "08S01", fmt.Sprintf("relay: command 0x%02x is not supported", cmd[0])))
	}
	b := s.be
	sent, err := writeLogical(b.w, 0, cmd)
	if err == nil {
		err = b.w.Flush()
	}
	if err != nil {
		return s.lost(clientSeq, err)
	}
	if kind == respNone {
		return nil
	}
	// The backend numbers its response after the packets it got; the client after the ones it
	// sent. They differ only when a rewritten command was split differently.
	shift := clientSeq - byte(sent)
	next := clientSeq
	w := newWalker(kind, s.deprecateEOF)
	for first := true; ; first = false {
		// The response goes to the client in one write when it came whole (the usual case),
		// but what was forwarded is never kept back while the relay waits for the backend
		// (a result set streamed slowly reaches the client as it comes).
		if s.cw.Buffered() > 0 && !packetBuffered(b.r) {
			if err := s.cw.Flush(); err != nil {
				return err
			}
		}
		p, seq, err := nextPacket(b.r, &s.buf) // valid until the next read from b.r
		if err != nil {
			if w.cont { // in the middle of a long packet: nothing can be said, only closed
				return err
			}
			return s.lost(next, err)
		}
		done, ferr := w.feed(p)
		if ferr != nil {
			return fmt.Errorf("backend %s: %v", b.addr, ferr)
		}
		if first && kind == respPrepare && w.err == nil {
			// The client sees the relay's statement id, stable across backends (written into a
			// copy: p may be the backend reader's own buffer).
			p = append(s.buf[:0], p...)
			s.buf = p[:0]
			binary.LittleEndian.PutUint32(p[1:], s.prepared(cmd[1:], &w))
		}
		next = seq + shift + 1
		if err := writePacket(s.cw, seq+shift, p); err != nil {
			return err
		}
		if done {
			break
		}
	}
	if err := s.cw.Flush(); err != nil {
		return err
	}
	if w.hasStatus {
		s.status.Store(uint32(w.status))
	}
	s.after(cmd, st, &w) // w.err may point into b.r's buffer: only whether it is set counts here
	return nil
}

// lost: the backend connection failed while a command was on it. The client gets an ERR in
// place of the rest of the response (the reason, when the relay ended the session).
func (s *session) lost(seq byte, err error) error {
	msg := fmt.Sprintf("relay: lost the connection to backend %s: %v", s.be.addr, err)
	if m := s.ended.Load(); m != nil {
		msg = *m
	}
	s.reply(seq, errPacket(erConnectionKilled, "70100", msg))
	return errors.New(msg)
}

// prepared records a statement the backend prepared, and gives the client its id for it.
func (s *session) prepared(query []byte, w *walker) uint32 {
	s.nextID++
	s.stmts[s.nextID] = &stmt{backendID: w.stmtID, query: append([]byte{}, query...), numParams: w.numParams}
	s.lastID = s.nextID
	return s.nextID
}

// executeWithTypes keeps the parameter types a COM_STMT_EXECUTE binds, and puts them back into
// an execute that does not send them (new-params-bound flag 0: the client sent them before)
// when the statement was prepared again on a new backend, which has none bound.
func executeWithTypes(cmd []byte, st *stmt) []byte {
	n := int(st.numParams)
	pos := 10 + (n+7)/8 // command, id, flags, iteration count, NULL bitmap
	if n == 0 || len(cmd) <= pos {
		return cmd
	}
	if cmd[pos] == 1 {
		if len(cmd) >= pos+1+2*n {
			st.types = append(st.types[:0], cmd[pos+1:pos+1+2*n]...)
			st.needTypes = false
		}
		return cmd
	}
	if !st.needTypes || st.types == nil {
		return cmd
	}
	out := make([]byte, 0, len(cmd)+2*n)
	out = append(out, cmd[:pos]...)
	out = append(out, 1)
	out = append(out, st.types...)
	out = append(out, cmd[pos+1:]...)
	st.needTypes = false
	return out
}

// after applies what a completed command changed in the replayable state.
func (s *session) after(cmd []byte, st *stmt, w *walker) {
	switch cmd[0] {
	case comStmtExecute:
		s.longData = false
		if w.cursor && !st.cursor {
			st.cursor = true
			s.cursors++
		}
	case comStmtReset:
		s.longData = false
		fallthrough
	case comStmtFetch:
		if st.cursor && (cmd[0] == comStmtReset || w.status&statusLastRowSent != 0 || w.status&statusCursorExists == 0) {
			st.cursor = false
			s.cursors--
		}
	}
	if w.err != nil {
		return
	}
	switch cmd[0] {
	case comQuery:
		switch what, arg := classify(cmd[1:]); what {
		case effectUse:
			s.db = arg
		case effectSet:
			if len(s.sets) >= maxSets {
				s.logf("more than %d SET statements kept: the oldest is forgotten", maxSets)
			}
			s.sets = rememberSet(s.sets, arg)
		}
	case comInitDB:
		s.db = string(cmd[1:])
	case comResetConnection: // the server forgot the session's variables and statements
		s.sets, s.stmts, s.longData, s.cursors = nil, map[uint32]*stmt{}, false, 0
	}
}

// moveTo logs the session in to addr and replays its state there (SETs in order, then every
// prepared statement), then drops the old backend connection. Called with s.mu held, the
// session not busy. On error the session keeps its old connection.
func (s *session) moveTo(addr string, gen uint64) error {
	b, okp, err := login(addr, s.loginAs(), s.h1, s.h2, s.r.dialTimeout)
	if err != nil {
		return err
	}
	status, _ := okStatus(okp)
	fail := func(err error) error { b.conn.Close(); return err }
	b.conn.SetDeadline(time.Now().Add(s.r.dialTimeout))
	for _, q := range s.sets {
		w, err := s.exec(b, append([]byte{comQuery}, q...), respResults)
		if err != nil {
			return fail(err)
		}
		if w.err != nil {
			code, msg := errInfo(w.err)
			return fail(fmt.Errorf("replaying a SET statement: error %d: %s", code, msg))
		}
		status = w.status
	}
	ids := make([]uint32, 0, len(s.stmts))
	for id := range s.stmts {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	newIDs := make(map[uint32]uint32, len(ids))
	for _, id := range ids {
		st := s.stmts[id]
		w, err := s.exec(b, append([]byte{comStmtPrepare}, st.query...), respPrepare)
		if err != nil {
			return fail(err)
		}
		if w.err != nil {
			code, msg := errInfo(w.err)
			return fail(fmt.Errorf("preparing statement %d again: error %d: %s", id, code, msg))
		}
		if w.numParams != st.numParams {
			return fail(fmt.Errorf("statement %d has %d parameters on %s, %d before", id, w.numParams, addr, st.numParams))
		}
		newIDs[id] = w.stmtID
	}
	// Only now, every step having worked, does the session take the new ids.
	for _, id := range ids {
		st := s.stmts[id]
		st.backendID, st.needTypes, st.cursor = newIDs[id], st.numParams > 0, false
	}
	b.conn.SetDeadline(time.Time{})
	old := s.be
	s.setBackend(b, gen)
	s.status.Store(uint32(status))
	s.cursors = 0
	old.close()
	return nil
}

// exec runs one command of the relay's own on a backend and reads its whole response.
func (s *session) exec(b *backendConn, cmd []byte, kind respKind) (*walker, error) {
	if _, err := writeLogical(b.w, 0, cmd); err != nil {
		return nil, err
	}
	if err := b.w.Flush(); err != nil {
		return nil, err
	}
	w := newWalker(kind, s.deprecateEOF)
	var buf []byte
	for {
		p, _, err := readPacket(b.r, buf)
		if err != nil {
			return nil, err
		}
		done, err := w.feed(p)
		if err != nil {
			return nil, err
		}
		if w.err != nil {
			w.err = append([]byte{}, w.err...)
		}
		buf = p[:0]
		if done {
			return &w, nil
		}
	}
}
