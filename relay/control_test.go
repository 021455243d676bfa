package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func controlLine(t *testing.T, r *Relay, line string) map[string]any {
	t.Helper()
	a, b := net.Pipe()
	go r.control(b)
	defer a.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(a, line); err != nil {
		t.Fatal(err)
	}
	answer, err := bufio.NewReader(a).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := json.Unmarshal([]byte(answer), &out); err != nil {
		t.Fatalf("%q: %v", answer, err)
	}
	return out
}

// relayBeforeTwoBackends: a relay in front of backend a, with b to move to (one account, "pw").
func relayBeforeTwoBackends(t *testing.T) (*Relay, *fakeBackend, *fakeBackend) {
	t.Helper()
	h2 := sha1sum(sha1sum([]byte("pw")))
	a, b := newFakeBackend(t, h2, 1), newFakeBackend(t, h2, 1)
	users := filepath.Join(t.TempDir(), "users")
	os.WriteFile(users, []byte(fmt.Sprintf("app *%X\n", h2)), 0o600)
	r, err := newRelay(a.addr(), users, 5*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r, a, b
}

func TestControlLineOfSeveralCommandsAndTheSeqMarker(t *testing.T) {
	r, _, b := relayBeforeTwoBackends(t)
	st := controlLine(t, r, "status")["status"].(map[string]any)
	if st["seq"].(float64) != 0 || st["started_ms"].(float64) < float64(time.Now().Add(-time.Minute).UnixMilli()) {
		t.Fatalf("%v", st)
	}
	out := controlLine(t, r, "hold; move "+b.addr()+"; release; seq 42")
	st = out["status"].(map[string]any)
	if out["ok"] != true || st["backend"] != b.addr() || st["generation"].(float64) != 2 || st["holding"] != false || st["seq"].(float64) != 42 {
		t.Fatalf("%v", out)
	}
	// A smaller marker leaves the largest; a failed command stops the line before its marker.
	controlLine(t, r, "seq 7")
	out = controlLine(t, r, "move nowhere; seq 50")
	st = out["status"].(map[string]any)
	if out["ok"] != false || st["seq"].(float64) != 42 || st["backend"] != b.addr() {
		t.Fatalf("%v", out)
	}
}

func TestStateFileSavedOnEveryMoveAndReadAtStart(t *testing.T) {
	h2 := sha1sum(sha1sum([]byte("pw")))
	a, b := newFakeBackend(t, h2, 1), newFakeBackend(t, h2, 1)
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	os.WriteFile(users, []byte(fmt.Sprintf("app *%X\n", h2)), 0o600)
	state := filepath.Join(dir, "relay.state")
	if saved, err := loadState(state); saved != "" || err != nil {
		t.Fatalf("no file yet: %q %v", saved, err)
	}
	r, _ := newRelay(a.addr(), users, 5*time.Second, time.Second)
	r.statePath = state
	if _, err := r.move(b.addr(), time.Second); err != nil {
		t.Fatal(err)
	}
	if saved, err := loadState(state); saved != b.addr() || err != nil {
		t.Fatalf("%q %v", saved, err)
	}
	if fi, _ := os.Stat(state); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
	// A state file that cannot be written refuses the move: a restart would go back.
	r.statePath = filepath.Join(dir, "missing", "relay.state")
	if _, err := r.move(a.addr(), time.Second); err == nil || r.status().Backend != b.addr() {
		t.Fatalf("moved without its state saved: %v %v", err, r.status().Backend)
	}
	os.WriteFile(state, []byte("garbage\n"), 0o600)
	if _, err := loadState(state); err == nil {
		t.Fatal("a garbled state file must be refused")
	}
}

func TestALineNumberedBeforeAChangeThatRanIsRefusedWhole(t *testing.T) {
	r, a, b := relayBeforeTwoBackends(t)
	if out := controlLine(t, r, "move "+b.addr()+"; release; seq 100"); out["ok"] != true {
		t.Fatalf("%v", out)
	}
	// The move back of an older decision, landing late: nothing of it runs.
	out := controlLine(t, r, "hold; move "+a.addr()+"; release; seq 99")
	st := out["status"].(map[string]any)
	if out["ok"] != false || st["backend"] != b.addr() || st["holding"] != false || st["seq"].(float64) != 100 {
		t.Fatalf("a stale line ran: %v", out)
	}
	// The same change sent again, and a newer one, still run; a line with no marker (by hand) too.
	if out := controlLine(t, r, "move "+b.addr()+"; release; seq 100"); out["ok"] != true {
		t.Fatalf("%v", out)
	}
	if out := controlLine(t, r, "move "+a.addr()+"; release; seq 101"); out["ok"] != true {
		t.Fatalf("%v", out)
	}
	if out := controlLine(t, r, "status"); out["ok"] != true {
		t.Fatalf("%v", out)
	}
}

// A change in doubt (numbered 60, its sender dead before the answer) fenced off by a lone `seq 61`:
// the fence's seq_before says whether it ran; once fenced, it is refused if it lands later.
func TestALoneSeqFencesOffAChangeInDoubt(t *testing.T) {
	r, a, b := relayBeforeTwoBackends(t)
	controlLine(t, r, "seq 42")
	// Not run before the fence: seq_before 42 < 60, and the late line is refused whole.
	if out := controlLine(t, r, "seq 61"); out["ok"] != true || out["seq_before"].(float64) != 42 {
		t.Fatalf("%v", out)
	}
	out := controlLine(t, r, "hold; move "+b.addr()+"; release; seq 60")
	st := out["status"].(map[string]any)
	if out["ok"] != false || st["backend"] != a.addr() || st["holding"] != false || st["seq"].(float64) != 61 {
		t.Fatalf("the fenced-off change ran: %v", out)
	}
	// Run before the fence: seq_before reaches its number.
	if out := controlLine(t, r, "move "+b.addr()+"; release; seq 70"); out["ok"] != true {
		t.Fatalf("%v", out)
	}
	if out := controlLine(t, r, "seq 71"); out["seq_before"].(float64) != 70 {
		t.Fatalf("%v", out)
	}
	// Only a line that changes something waits for the change line before it.
	if !changes("hold; seq 3") || changes("status") || changes(" status ; status") {
		t.Fatal("changes() misreads a line")
	}
}
