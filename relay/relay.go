package main

// The relay: accepts sessions, keeps the backend they go to, and the hold / move / release
// controls a switchover drives.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// target is the backend new sessions and moved sessions go to; gen counts the moves.
type target struct {
	addr string
	gen  uint64
}

// gate is one hold: sessions at a boundary wait until ch is closed.
type gate struct {
	ch    chan struct{}
	since time.Time
}

type Relay struct {
	usersPath   string
	maxHold     time.Duration
	drain       time.Duration
	dialTimeout time.Duration
	verbose     bool

	target atomic.Pointer[target]
	gate   atomic.Pointer[gate]

	statePath string        // -state: the backend saved on every move, read at start ("" = none)
	started   time.Time     // this process's start (status: started_ms)
	seq       atomic.Uint64 // the largest `seq N` marker run so far (status: seq)
	// One changing control line at a time: its stale check, its commands and its marker are one
	// step, so that a line fenced off by a later `seq N` is either wholly run before it or refused.
	ctl sync.Mutex

	mu        sync.Mutex // guards the fields below, and the hold's timer
	holdTimer *time.Timer
	hashes    map[string][]byte
	greet     greeting
	sessions  map[uint32]*session
	nextID    uint32
}

func newRelay(backend, usersPath string, maxHold, drain time.Duration) (*Relay, error) {
	r := &Relay{usersPath: usersPath, maxHold: maxHold, drain: drain, dialTimeout: 3 * time.Second,
		sessions: map[uint32]*session{}}
	if _, _, err := net.SplitHostPort(backend); err != nil {
		return nil, fmt.Errorf("backend %q: %v", backend, err)
	}
	r.target.Store(&target{addr: backend, gen: 1})
	r.started = time.Now()
	if err := r.reload(); err != nil {
		return nil, err
	}
	// The relay greets clients itself (a held client has no backend yet): with the version and
	// character set of the backend, when it answers, so that clients see the server they expect.
	r.greet = greeting{version: "5.5.5-10.11.0-MariaDB-relay", caps: relayCaps, charset: 45, plugin: nativePlugin}
	if g, err := probe(backend, r.dialTimeout); err != nil {
		log.Printf("backend %s did not greet (%v): clients see version %s", backend, err, r.greet.version)
	} else {
		r.greet.version, r.greet.charset = g.version, g.charset
		r.greet.caps = relayCaps & (g.caps | clientLongPassword)
	}
	r.greet.status = statusAutocommit
	return r, nil
}

func (r *Relay) reload() error {
	h, err := loadHashes(r.usersPath)
	if err != nil {
		return fmt.Errorf("users file: %v", err)
	}
	r.mu.Lock()
	r.hashes = h
	r.mu.Unlock()
	log.Printf("users file %s: %d accounts", r.usersPath, len(h))
	// A stored hash and a token seen on the wire give h1, which logs in anywhere as that account.
	if fi, err := os.Stat(r.usersPath); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Printf("users file %s is readable by others (mode %v): its hashes are as good as passwords here; chmod 600 it", r.usersPath, fi.Mode().Perm())
	}
	return nil
}

func (r *Relay) hash(user string) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.hashes[user]
	return h, ok
}

func (r *Relay) greetingFor(id uint32, nonce []byte) greeting {
	g := r.greet
	g.connID, g.nonce = id, nonce
	return g
}

func (r *Relay) serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.nextID++
		rw := newRawIO(c)
		s := &session{id: r.nextID, r: r, client: c, cr: bufio.NewReaderSize(rw, 16<<10),
			cw: bufio.NewWriterSize(rw, 16<<10), remote: c.RemoteAddr().String(), stmts: map[uint32]*stmt{}}
		r.sessions[s.id] = s
		r.mu.Unlock()
		if r.verbose {
			log.Printf("session %d: connection from %s", s.id, s.remote)
		}
		go s.serve()
	}
}

func (r *Relay) forget(s *session) {
	r.mu.Lock()
	delete(r.sessions, s.id)
	r.mu.Unlock()
}

func (r *Relay) snapshot() []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*session, 0, len(r.sessions))
	for _, s := range r.sessions {
		out = append(out, s)
	}
	return out
}

// hold: from now on each session's next command waits at its boundary (a session in a
// transaction goes on until the transaction ends), and new sessions wait after their login to
// the relay. Released by release, or by itself after maxHold: the relay is never a dead end.
func (r *Relay) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gate.Load() != nil {
		return
	}
	r.gate.Store(&gate{ch: make(chan struct{}), since: time.Now()})
	r.holdTimer = time.AfterFunc(r.maxHold, func() { r.release(fmt.Sprintf("held %s (max hold): released by itself", r.maxHold)) })
	log.Printf("hold: sessions wait at their next statement boundary (released by itself after %s)", r.maxHold)
}

func (r *Relay) release(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.gate.Load()
	if g == nil {
		return
	}
	r.gate.Store(nil)
	r.holdTimer.Stop()
	close(g.ch)
	log.Printf("release: %s, after %.0f ms, to %s", why, float64(time.Since(g.since).Microseconds())/1000, r.target.Load().addr)
}

type moveResult struct {
	Moved            int      `json:"moved"`
	Failed           int      `json:"failed"`
	Errors           []string `json:"errors,omitempty"`
	WaitingForCommit int      `json:"waiting_in_transaction"`
	MovingLater      int      `json:"moving_at_next_command"`
}

// move points the relay at addr: every session not busy and not pinned logs in there now and
// replays its state (a held one is then released onto it); a busy one moves at its next
// boundary; a pinned one when its transaction ends, or is ended drain after the move.
func (r *Relay) move(addr string, drain time.Duration) (moveResult, error) {
	var res moveResult
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return res, fmt.Errorf("move: %q is not host:port", addr)
	}
	r.mu.Lock()
	t := r.target.Load()
	if t.addr != addr {
		if err := r.saveState(addr); err != nil {
			r.mu.Unlock()
			return res, err // not moved: a restart would read the old backend back
		}
		t = &target{addr: addr, gen: t.gen + 1}
		r.target.Store(t)
		log.Printf("move: backend is now %s (generation %d)", addr, t.gen)
	}
	r.mu.Unlock()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, 8) // logins in parallel, not all at once
	for _, s := range r.snapshot() {
		wg.Add(1)
		go func(s *session) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			s.mu.Lock()
			defer s.mu.Unlock()
			ph := s.phase.Load()
			var err error
			switch {
			case s.be == nil || s.gen.Load() == t.gen || s.ended.Load() != nil:
				return
			case ph == phaseBusy:
				mu.Lock()
				res.MovingLater++
				mu.Unlock()
				return
			case s.pinned():
				mu.Lock()
				res.WaitingForCommit++
				mu.Unlock()
				return
			default:
				err = s.moveTo(t.addr, t.gen)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Failed++
				res.Errors = append(res.Errors, fmt.Sprintf("session %d: %v", s.id, err))
				s.logf("move to %s failed (tried again at its next command): %v", t.addr, err)
			} else {
				res.Moved++
			}
		}(s)
	}
	wg.Wait()
	log.Printf("move to %s: %d sessions moved in %.0f ms, %d failed, %d in a transaction, %d busy", t.addr, res.Moved,
		float64(time.Since(start).Microseconds())/1000, res.Failed, res.WaitingForCommit, res.MovingLater)
	if res.WaitingForCommit > 0 || res.MovingLater > 0 {
		time.AfterFunc(drain, func() { r.endPinned(t, drain) })
	}
	return res, nil
}

// endPinned ends the sessions still in a transaction on an old backend drain after a move.
func (r *Relay) endPinned(t *target, drain time.Duration) {
	for _, s := range r.snapshot() {
		if s.gen.Load() < t.gen && s.inTrans() && s.ended.Load() == nil {
			s.end(fmt.Sprintf("relay: session ended: still in a transaction %s after the move to %s (the transaction is rolled back)", drain, t.addr))
		}
	}
}

type status struct {
	Backend       string  `json:"backend"`
	Generation    uint64  `json:"generation"`
	Holding       bool    `json:"holding"`
	HeldForS      float64 `json:"held_for_s"`
	MaxHoldS      float64 `json:"max_hold_s"`
	Sessions      int     `json:"sessions"`
	Idle          int     `json:"idle"`
	Held          int     `json:"held"`
	Busy          int     `json:"busy"`
	LoggingIn     int     `json:"logging_in"`
	InTransaction int     `json:"in_transaction"`
	OnOldBackend  int     `json:"on_old_backend"`
	Ended         int     `json:"ended"`
	Seq           uint64  `json:"seq"`
	StartedMs     int64   `json:"started_ms"`
}

func (r *Relay) status() status {
	t := r.target.Load()
	st := status{Backend: t.addr, Generation: t.gen, MaxHoldS: r.maxHold.Seconds(), Seq: r.seq.Load(),
		StartedMs: r.started.UnixMilli()}
	if g := r.gate.Load(); g != nil {
		st.Holding, st.HeldForS = true, time.Since(g.since).Seconds()
	}
	for _, s := range r.snapshot() {
		st.Sessions++
		switch s.phase.Load() {
		case phaseIdle:
			st.Idle++
		case phaseHeld:
			st.Held++
		case phaseBusy:
			st.Busy++
		case phaseLogin:
			st.LoggingIn++
		}
		if s.inTrans() {
			st.InTransaction++
		}
		if g := s.gen.Load(); g != 0 && g != t.gen {
			st.OnOldBackend++
		}
		if s.ended.Load() != nil {
			st.Ended++
		}
	}
	return st
}

// control answers each line with one JSON line. A line holds one command or several separated by
// ";", run in order until one fails: hold, release, move HOST:PORT [DRAIN_S], status, reload, and
// seq N, a marker that records N (the largest so far shows in status as seq): put last on a line,
// a seq seen in status says that every command before it on its line has run. A line whose marker
// is smaller than the largest already run is refused whole. Each command is idempotent.
//
// Changing lines run one at a time, and each answer carries seq_before: the largest marker run
// before the line. A lone `seq N` is then a fence for a change in doubt numbered N-1 (sent by a
// process that died before its answer): seq_before >= N-1 says it ran; otherwise it never will.
func (r *Relay) control(c net.Conn) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		out, ran := r.controlLine(sc.Text())
		if ran == 0 {
			continue
		}
		if enc.Encode(out) != nil {
			return
		}
	}
}

// controlLine runs one control line and returns its answer and how many commands it held.
func (r *Relay) controlLine(line string) (map[string]any, int) {
	out := map[string]any{"ok": true}
	if changes(line) {
		r.ctl.Lock()
		defer r.ctl.Unlock()
	}
	out["seq_before"] = r.seq.Load()
	if n, ok := lineSeq(line); ok && n < r.seq.Load() {
		// A change numbered before one that already ran (sent by a process that died or was
		// given up on, landing late): refused whole, so it can never undo the newer decision.
		out["ok"], out["error"] = false, fmt.Sprintf("stale: seq %d is older than %d, a later change already ran; nothing run", n, r.seq.Load())
		out["status"] = r.status()
		return out, 1
	}
	ran := 0
	for _, cmd := range strings.Split(line, ";") {
		args := strings.Fields(cmd)
		if len(args) == 0 {
			continue
		}
		ran++
		if err := r.command(args, out); err != nil {
			out["ok"], out["error"] = false, err.Error()
			break
		}
	}
	out["status"] = r.status()
	return out, ran
}

// changes: the line holds a command other than status (a read never waits for a change).
func changes(line string) bool {
	for _, cmd := range strings.Split(line, ";") {
		if args := strings.Fields(cmd); len(args) > 0 && args[0] != "status" {
			return true
		}
	}
	return false
}

// lineSeq is the `seq N` marker of a control line, if it has one.
func lineSeq(line string) (uint64, bool) {
	for _, cmd := range strings.Split(line, ";") {
		if args := strings.Fields(cmd); len(args) == 2 && args[0] == "seq" {
			if n, err := strconv.ParseUint(args[1], 10, 64); err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

func (r *Relay) command(args []string, out map[string]any) error {
	var err error
	switch args[0] {
	case "hold":
		r.hold()
	case "release":
		r.release("released")
	case "move":
		drain := r.drain
		if len(args) == 3 {
			var sec float64
			if sec, err = strconv.ParseFloat(args[2], 64); err == nil {
				drain = time.Duration(sec * float64(time.Second))
			}
		} else if len(args) != 2 {
			err = fmt.Errorf("usage: move HOST:PORT [DRAIN_S]")
		}
		if err == nil {
			var res moveResult
			res, err = r.move(args[1], drain)
			out["move"] = res
		}
	case "seq":
		var n uint64
		if len(args) != 2 {
			return fmt.Errorf("usage: seq N")
		}
		if n, err = strconv.ParseUint(args[1], 10, 64); err != nil {
			return fmt.Errorf("seq: %q is not a number", args[1])
		}
		for {
			old := r.seq.Load()
			if n <= old || r.seq.CompareAndSwap(old, n) {
				break
			}
		}
	case "status":
	case "reload":
		err = r.reload()
	default:
		err = fmt.Errorf("unknown command %q (hold, release, move HOST:PORT [DRAIN_S], status, reload, seq N)", args[0])
	}
	return err
}

// saveState writes the backend to the -state file (a temporary file synced, then renamed over
// it), so that a restarted relay starts on the backend of its last move, not its -backend flag.
func (r *Relay) saveState(addr string) error {
	if r.statePath == "" {
		return nil
	}
	tmp := r.statePath + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("state file: %v", err)
	}
	_, err = fmt.Fprintf(f, "backend %s\n", addr)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, r.statePath)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("state file %s not written (not moved): %v", r.statePath, err)
	}
	return nil
}

// loadState reads the backend the -state file saved; "" when there is no file yet.
func loadState(path string) (string, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] != "backend" {
		return "", fmt.Errorf("state file %s: not a \"backend HOST:PORT\" line", path)
	}
	if _, _, err := net.SplitHostPort(f[1]); err != nil {
		return "", fmt.Errorf("state file %s: %v", path, err)
	}
	return f[1], nil
}
