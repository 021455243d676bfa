package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

func ok(status uint16, header byte) []byte {
	p := []byte{header}
	p = appendLenenc(p, 300)   // affected rows: a 3-byte length-encoded integer
	p = appendLenenc(p, 70000) // last insert id: 4 bytes
	p = binary.LittleEndian.AppendUint16(p, status)
	return append(p, 0, 0)
}

func eof(status uint16) []byte {
	return binary.LittleEndian.AppendUint16([]byte{0xfe, 0, 0}, status)
}

var (
	colDef = append([]byte{3}, "def\x00\x00\x00\x01c\x00\x0c\x21\x00\x0b\x00\x00\x00\x03\x00\x00\x00\x00\x00"...)
	row    = []byte{1, '1', 1, '2'}
	errPkt = errPacket(1213, "40001", "Deadlock found")
)

// walk feeds packets and returns the index of the one that completed the response (-1: none).
func walk(t *testing.T, w *walker, packets ...[]byte) int {
	t.Helper()
	for i, p := range packets {
		done, err := w.feed(p)
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if done {
			return i
		}
	}
	return -1
}

func TestTextResultSetWithEOF(t *testing.T) {
	w := newWalker(respResults, false)
	at := walk(t, &w, []byte{2}, colDef, colDef, eof(statusAutocommit), row, row, eof(statusInTrans), ok(0, 0))
	if at != 6 || w.status != statusInTrans || w.err != nil {
		t.Fatalf("done at %d, status %x", at, w.status)
	}
}

func TestResultSetWithDeprecateEOF(t *testing.T) {
	w := newWalker(respResults, true)
	at := walk(t, &w, []byte{1}, colDef, row, row, ok(statusInTrans|statusAutocommit, 0xfe))
	if at != 4 || w.status != statusInTrans|statusAutocommit {
		t.Fatalf("done at %d, status %x", at, w.status)
	}
}

func TestARowThatStartsWithFEIsNotEOF(t *testing.T) {
	// A text row whose first column is 0xfe-prefixed is at least 9 bytes long: a row.
	long := append([]byte{0xfe}, make([]byte, 12)...)
	w := newWalker(respResults, false)
	if at := walk(t, &w, []byte{1}, colDef, eof(0), long, eof(0)); at != 4 {
		t.Fatalf("done at %d", at)
	}
}

func TestMultipleResultsFollowMoreResultsExists(t *testing.T) {
	for _, dep := range []bool{false, true} {
		w := newWalker(respResults, dep)
		packets := [][]byte{ok(statusMoreResults, 0), []byte{1}, colDef}
		if !dep {
			packets = append(packets, eof(statusMoreResults))
		}
		end := eof(statusMoreResults)
		if dep {
			end = ok(statusMoreResults, 0xfe)
		}
		packets = append(packets, row, end, ok(statusAutocommit, 0))
		if at := walk(t, &w, packets...); at != len(packets)-1 || w.status != statusAutocommit {
			t.Fatalf("deprecateEOF=%v: done at %d of %d, status %x", dep, at, len(packets), w.status)
		}
	}
}

func TestErrorEndsAResponseAnywhere(t *testing.T) {
	w := newWalker(respResults, false)
	if at := walk(t, &w, []byte{1}, colDef, eof(0), row, errPkt); at != 4 || w.err == nil {
		t.Fatalf("done at %d", at)
	}
	w = newWalker(respResults, true)
	if at := walk(t, &w, errPkt); at != 0 || w.hasStatus {
		t.Fatal("an ERR first")
	}
	if code, msg := errInfo(w.err); code != 1213 || msg != "Deadlock found" {
		t.Fatalf("errInfo = %d %q", code, msg)
	}
}

func TestOKStatusFlags(t *testing.T) {
	s, good := okStatus(ok(statusInTrans|statusMoreResults, 0))
	if !good || s != statusInTrans|statusMoreResults {
		t.Fatalf("okStatus = %x %v", s, good)
	}
	w := newWalker(respSimple, false)
	walk(t, &w, ok(statusInTrans, 0))
	if !w.hasStatus || w.status != statusInTrans {
		t.Fatal("simple OK status")
	}
}

func prepareOK(id uint32, cols, params uint16) []byte {
	p := []byte{0}
	p = binary.LittleEndian.AppendUint32(p, id)
	p = binary.LittleEndian.AppendUint16(p, cols)
	p = binary.LittleEndian.AppendUint16(p, params)
	return append(p, 0, 0, 0)
}

func TestPrepareResponse(t *testing.T) {
	cases := []struct {
		dep          bool
		cols, params uint16
		packets      int
	}{
		{false, 2, 3, 1 + 3 + 1 + 2 + 1},
		{true, 2, 3, 1 + 3 + 2},
		{false, 0, 2, 1 + 2 + 1},
		{false, 1, 0, 1 + 1 + 1},
		{true, 0, 0, 1},
	}
	for _, c := range cases {
		w := newWalker(respPrepare, c.dep)
		var packets [][]byte
		packets = append(packets, prepareOK(7, c.cols, c.params))
		for i := 0; i < int(c.params); i++ {
			packets = append(packets, colDef)
		}
		if c.params > 0 && !c.dep {
			packets = append(packets, eof(0))
		}
		for i := 0; i < int(c.cols); i++ {
			packets = append(packets, colDef)
		}
		if c.cols > 0 && !c.dep {
			packets = append(packets, eof(0))
		}
		if at := walk(t, &w, packets...); at != c.packets-1 || len(packets) != c.packets {
			t.Fatalf("%+v: done at %d of %d", c, at, len(packets))
		}
		if w.stmtID != 7 || w.numParams != c.params || w.numCols != c.cols {
			t.Fatalf("%+v: id %d params %d cols %d", c, w.stmtID, w.numParams, w.numCols)
		}
	}
}

func TestCursorLeavesRowsForFetch(t *testing.T) {
	w := newWalker(respResults, false)
	if at := walk(t, &w, []byte{1}, colDef, eof(statusCursorExists)); at != 2 || !w.cursor {
		t.Fatal("a cursor's execute ends after its definitions")
	}
	f := newWalker(respRows, false)
	if at := walk(t, &f, row, row, eof(statusCursorExists|statusLastRowSent)); at != 2 {
		t.Fatal("fetch")
	}
}

func TestLongRowIsContinued(t *testing.T) {
	big := make([]byte, maxPayload)
	big[0] = 0xfe
	w := newWalker(respResults, true)
	// The continuation starts with 0xfe and is short: it is still the long row, not its end.
	if at := walk(t, &w, []byte{1}, colDef, big, eof(0), ok(0, 0xfe)); at != 4 {
		t.Fatalf("done at %d", at)
	}
}

func TestLogicalPacketsRoundTrip(t *testing.T) {
	payload := bytes.Repeat([]byte{7}, maxPayload+10)
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	n, err := writeLogical(w, 3, payload)
	w.Flush()
	if err != nil || n != 2 {
		t.Fatalf("writeLogical = %d, %v", n, err)
	}
	got, packets, err := readLogical(bufio.NewReader(&buf), nil)
	if err != nil || packets != 2 || !bytes.Equal(got, payload) {
		t.Fatalf("readLogical: %d packets, %v", packets, err)
	}
}

// nextPacket: a packet that fits the reader's buffer is returned in place, a longer one in the
// caller's buffer; a stream cut inside a packet is io.ErrUnexpectedEOF, at a packet's start io.EOF.
func TestNextPacket(t *testing.T) {
	short, long := bytes.Repeat([]byte{1}, 10), bytes.Repeat([]byte{2}, 40)
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	writePacket(w, 5, short)
	writePacket(w, 6, long)
	writePacket(w, 7, nil)
	writePacket(w, 8, short)
	w.Flush()
	stream := buf.Bytes()
	r := bufio.NewReaderSize(bytes.NewReader(stream[:len(stream)-3]), 16) // the last packet cut short
	var scratch []byte
	for i, want := range [][]byte{short, long, {}} {
		p, seq, err := nextPacket(r, &scratch)
		if err != nil || seq != byte(5+i) || !bytes.Equal(p, want) {
			t.Fatalf("packet %d: seq %d, %d bytes, %v", i, seq, len(p), err)
		}
		if i == 1 && cap(scratch) < len(long) {
			t.Fatalf("a packet longer than the reader's buffer is read into the caller's buffer")
		}
	}
	if _, _, err := nextPacket(r, &scratch); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut packet: %v", err)
	}
	if _, _, err := nextPacket(bufio.NewReader(bytes.NewReader(nil)), &scratch); err != io.EOF {
		t.Fatalf("empty stream: %v", err)
	}
	if _, _, err := nextPacket(bufio.NewReader(bytes.NewReader(stream[:2])), &scratch); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut header: %v", err)
	}
}

func TestHandshakeResponseRoundTrip(t *testing.T) {
	hr := handshakeResponse{caps: relayCaps, maxPacket: 1 << 24, charset: 45, user: "app",
		token: seqBytes(1, 20), db: "shop", plugin: nativePlugin, attrs: []byte{3, 'k', 'e', 'y', 1, 'v'}}
	got, err := parseHandshakeResponse(hr.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.user != "app" || got.db != "shop" || got.plugin != nativePlugin || got.charset != 45 ||
		!bytes.Equal(got.token, hr.token) || !bytes.Equal(got.attrs, hr.attrs) || got.caps != hr.caps {
		t.Fatalf("%+v", got)
	}
}

func TestGreetingRoundTrip(t *testing.T) {
	g := greeting{version: "5.5.5-10.11.19-MariaDB", connID: 9, nonce: seqBytes(1, 20), caps: relayCaps,
		charset: 45, status: statusAutocommit, plugin: nativePlugin}
	got, err := parseGreeting(g.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.version != g.version || got.connID != 9 || !bytes.Equal(got.nonce, g.nonce) || got.caps != g.caps ||
		got.plugin != nativePlugin || got.charset != 45 {
		t.Fatalf("%+v", got)
	}
}

func TestExecuteGetsItsTypesBackAfterARePrepare(t *testing.T) {
	st := &stmt{backendID: 5, numParams: 2}
	// cmd, id, flags, iteration count, NULL bitmap (1 byte), bound flag, 2 types, 2 values
	withTypes := []byte{comStmtExecute, 5, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 0, 254, 0, 9, 0, 0, 0, 1, 'x'}
	if out := executeWithTypes(append([]byte{}, withTypes...), st); !bytes.Equal(out, withTypes) {
		t.Fatal("an execute with its types must go as it is")
	}
	noTypes := []byte{comStmtExecute, 5, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1, 'y'}
	if out := executeWithTypes(append([]byte{}, noTypes...), st); !bytes.Equal(out, noTypes) {
		t.Fatal("types are put back only after a re-prepare")
	}
	st.needTypes = true // prepared again on a new backend
	want := []byte{comStmtExecute, 5, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 0, 254, 0, 9, 0, 0, 0, 1, 'y'}
	if out := executeWithTypes(append([]byte{}, noTypes...), st); !bytes.Equal(out, want) {
		t.Fatalf("got %v\nwant %v", out, want)
	}
	if st.needTypes {
		t.Fatal("types are sent once")
	}
}
