package main

// The MySQL client/server protocol, only as far as the relay must read it: packet framing,
// length-encoded integers, OK/EOF/ERR status flags, and the framing of each command's response
// (where it ends). Rows and column definitions are never decoded: they are forwarded as read.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const maxPayload = 1<<24 - 1 // a physical packet this long is continued by the next one

// Capability flags (protocol docs: "Capabilities Flags").
const (
	clientLongPassword     = 1 << 0 // on a MariaDB server's greeting "off" means extended capabilities: we keep it on
	clientFoundRows        = 1 << 1
	clientLongFlag         = 1 << 2
	clientConnectWithDB    = 1 << 3
	clientCompress         = 1 << 5
	clientLocalFiles       = 1 << 7
	clientIgnoreSpace      = 1 << 8
	clientProtocol41       = 1 << 9
	clientInteractive      = 1 << 10
	clientSSL              = 1 << 11
	clientTransactions     = 1 << 13
	clientSecureConnection = 1 << 15
	clientMultiStatements  = 1 << 16
	clientMultiResults     = 1 << 17
	clientPSMultiResults   = 1 << 18
	clientPluginAuth       = 1 << 19
	clientConnectAttrs     = 1 << 20
	clientPluginAuthLenenc = 1 << 21
	clientSessionTrack     = 1 << 23
	clientDeprecateEOF     = 1 << 24
)

// What the relay offers a client: what it can frame and replay. Left out on purpose: SSL and
// COMPRESS (the relay reads the stream), LOCAL_FILES (a file request in the middle of a
// response), MULTI_STATEMENTS (one COM_QUERY could then hold a SET and a USE the relay would
// have to split), SESSION_TRACK (not parsed), MariaDB's extended capabilities (cached metadata
// changes the execute response; progress packets), expired passwords.
const relayCaps = clientLongPassword | clientFoundRows | clientLongFlag | clientConnectWithDB |
	clientIgnoreSpace | clientProtocol41 | clientInteractive | clientTransactions |
	clientSecureConnection | clientMultiResults | clientPSMultiResults | clientPluginAuth |
	clientConnectAttrs | clientPluginAuthLenenc | clientDeprecateEOF

// Server status flags carried by OK and EOF packets.
const (
	statusInTrans         = 0x0001
	statusAutocommit      = 0x0002
	statusMoreResults     = 0x0008
	statusCursorExists    = 0x0040
	statusLastRowSent     = 0x0080
	statusInTransReadOnly = 0x2000
)

// Commands.
const (
	comQuit            = 0x01
	comInitDB          = 0x02
	comQuery           = 0x03
	comFieldList       = 0x04
	comRefresh         = 0x07
	comStatistics      = 0x09
	comProcessInfo     = 0x0a
	comProcessKill     = 0x0c
	comDebug           = 0x0d
	comPing            = 0x0e
	comChangeUser      = 0x11
	comStmtPrepare     = 0x16
	comStmtExecute     = 0x17
	comStmtSendLong    = 0x18
	comStmtClose       = 0x19
	comStmtReset       = 0x1a
	comSetOption       = 0x1b
	comStmtFetch       = 0x1c
	comResetConnection = 0x1f
)

// Error numbers the relay sends itself.
const (
	erAccessDenied     = 1045
	erUnknownCom       = 1047
	erUnknownStmt      = 1243
	erNotSupportedYet  = 1235
	erConnectionKilled = 1927
)

// readHeader reads a packet header (payload length, sequence number) from the reader's buffer,
// without allocating: it is read for every packet relayed. Errors as io.ReadFull's: io.EOF when
// the stream ended before the header, io.ErrUnexpectedEOF inside it.
func readHeader(r *bufio.Reader) (int, byte, error) {
	h, err := r.Peek(4)
	if err != nil {
		if len(h) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, err
	}
	n, seq := int(h[0])|int(h[1])<<8|int(h[2])<<16, h[3]
	r.Discard(4)
	return n, seq, nil
}

// readPacket reads one physical packet into buf (grown as needed) and returns its payload.
func readPacket(r *bufio.Reader, buf []byte) ([]byte, byte, error) {
	n, seq, err := readHeader(r)
	if err != nil {
		return buf[:0], 0, err
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, 0, err
	}
	return buf, seq, nil
}

// nextPacket reads one physical packet and returns its payload, in place in the reader's buffer
// when it fits there (no copy: a response is forwarded from the backend reader's buffer to the
// client writer's), else read into *buf (grown as needed). The payload is valid until the next
// read from r, and must not be written to.
func nextPacket(r *bufio.Reader, buf *[]byte) ([]byte, byte, error) {
	n, seq, err := readHeader(r)
	if err != nil {
		return nil, 0, err
	}
	if n <= r.Size() {
		p, err := r.Peek(n)
		if err != nil {
			if len(p) > 0 && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, 0, err
		}
		r.Discard(n) // the bytes consumed stay where they are until the next read
		return p, seq, nil
	}
	p := *buf
	if cap(p) < n {
		p = make([]byte, n)
	}
	p = p[:n]
	*buf = p[:0]
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, 0, err
	}
	return p, seq, nil
}

// packetBuffered: the next packet is whole in the reader's buffer (reading it will not wait).
func packetBuffered(r *bufio.Reader) bool {
	if r.Buffered() < 4 {
		return false
	}
	h, _ := r.Peek(4)
	return r.Buffered() >= 4+(int(h[0])|int(h[1])<<8|int(h[2])<<16)
}

// writeHeader writes a packet header without allocating (into the writer's free space).
func writeHeader(w *bufio.Writer, n int, seq byte) error {
	if w.Available() >= 4 {
		_, err := w.Write(append(w.AvailableBuffer(), byte(n), byte(n>>8), byte(n>>16), seq))
		return err
	}
	for _, c := range [4]byte{byte(n), byte(n >> 8), byte(n >> 16), seq} {
		if err := w.WriteByte(c); err != nil {
			return err
		}
	}
	return nil
}

// writePacket writes one physical packet (payload shorter than maxPayload+1).
func writePacket(w *bufio.Writer, seq byte, payload []byte) error {
	if err := writeHeader(w, len(payload), seq); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// readLogical reads a whole logical packet (physical packets of maxPayload joined) into buf
// (reused when large enough), and how many physical packets carried it: a command is rewritten
// whole, and the response's sequence numbers follow the count of packets sent.
func readLogical(r *bufio.Reader, buf []byte) (payload []byte, packets int, err error) {
	buf = buf[:0]
	for {
		var n int
		if n, _, err = readHeader(r); err != nil {
			return buf, packets, err
		}
		start := len(buf)
		buf = append(buf, make([]byte, n)...)
		if _, err = io.ReadFull(r, buf[start:]); err != nil {
			return buf, packets, err
		}
		packets++
		if n < maxPayload {
			return buf, packets, nil
		}
	}
}

// writeLogical splits payload into physical packets from sequence number seq; returns how many.
func writeLogical(w *bufio.Writer, seq byte, payload []byte) (int, error) {
	n := 0
	for {
		chunk := payload
		if len(chunk) > maxPayload {
			chunk = chunk[:maxPayload]
		}
		if err := writePacket(w, seq, chunk); err != nil {
			return n, err
		}
		n++
		seq++
		payload = payload[len(chunk):]
		if len(chunk) < maxPayload {
			return n, nil
		}
	}
}

// lenenc reads a length-encoded integer; ok is false on a short buffer or a NULL/undefined tag.
func lenenc(b []byte) (v uint64, size int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch b[0] {
	case 0xfc:
		if len(b) < 3 {
			return 0, 0, false
		}
		return uint64(binary.LittleEndian.Uint16(b[1:])), 3, true
	case 0xfd:
		if len(b) < 4 {
			return 0, 0, false
		}
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4, true
	case 0xfe:
		if len(b) < 9 {
			return 0, 0, false
		}
		return binary.LittleEndian.Uint64(b[1:]), 9, true
	case 0xfb, 0xff:
		return 0, 0, false
	}
	return uint64(b[0]), 1, true
}

func appendLenenc(b []byte, v uint64) []byte {
	switch {
	case v < 0xfb:
		return append(b, byte(v))
	case v < 1<<16:
		return append(b, 0xfc, byte(v), byte(v>>8))
	case v < 1<<24:
		return append(b, 0xfd, byte(v), byte(v>>8), byte(v>>16))
	}
	b = append(b, 0xfe)
	return binary.LittleEndian.AppendUint64(b, v)
}

// okStatus is the status flags of an OK packet (header 0x00, or 0xfe when it ends a result set
// under CLIENT_DEPRECATE_EOF): header, affected rows and last insert id (length-encoded), status.
func okStatus(p []byte) (uint16, bool) {
	i := 1
	for k := 0; k < 2; k++ {
		_, n, ok := lenenc(p[i:])
		if !ok {
			return 0, false
		}
		i += n
	}
	if len(p) < i+2 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[i:]), true
}

// eofStatus is the status flags of an EOF packet: 0xfe, warnings (2), status (2).
func eofStatus(p []byte) (uint16, bool) {
	if len(p) < 5 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[3:]), true
}

func isEOF(p []byte) bool { return len(p) > 0 && p[0] == 0xfe && len(p) < 9 }

// errPacket builds an ERR payload.
func errPacket(code uint16, state, msg string) []byte {
	p := []byte{0xff, byte(code), byte(code >> 8), '#'}
	p = append(p, (state + "HY000")[:5]...)
	return append(p, msg...)
}

// errInfo reads an ERR payload's number and message.
func errInfo(p []byte) (uint16, string) {
	if len(p) < 3 || p[0] != 0xff {
		return 0, ""
	}
	code := binary.LittleEndian.Uint16(p[1:])
	msg := p[3:]
	if len(msg) >= 6 && msg[0] == '#' {
		msg = msg[6:]
	}
	return code, string(msg)
}

// What a command's response looks like.
type respKind int

const (
	respNone      respKind = iota // no response (COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA, COM_QUIT)
	respSimple                    // one packet: OK, ERR or EOF (COM_PING, COM_INIT_DB, COM_SET_OPTION...)
	respStatistic                 // one packet, a plain string
	respResults                   // OK / ERR / result sets, chained by SERVER_MORE_RESULTS_EXISTS
	respPrepare                   // COM_STMT_PREPARE_OK and its parameter and column definitions
	respRows                      // rows then EOF (COM_STMT_FETCH), column definitions then EOF (COM_FIELD_LIST)
)

// walker states
const (
	wFirst = iota
	wColDefs
	wColEOF
	wRows
	wParamDefs
	wParamEOF
	wPrepCols
	wPrepColEOF
	wDone
)

// walker follows one response, packet by packet, and says when it is complete. It keeps the
// last status flags seen, and for COM_STMT_PREPARE the statement id and counts.
type walker struct {
	deprecateEOF bool
	kind         respKind
	state        int
	remaining    uint64
	cont         bool // the next physical packet continues this one: not a packet of its own
	status       uint16
	hasStatus    bool
	err          []byte // the ERR payload that ended the response, if one did
	cursor       bool   // a binary result left open for COM_STMT_FETCH

	stmtID             uint32
	numCols, numParams uint16
}

func newWalker(kind respKind, deprecateEOF bool) walker {
	w := walker{kind: kind, deprecateEOF: deprecateEOF}
	if kind == respRows {
		w.state = wRows
	}
	return w
}

func (w *walker) setStatus(s uint16) { w.status, w.hasStatus = s, true }

// terminator: the packet that ends rows (or a COM_FIELD_LIST's definitions).
func (w *walker) terminator(p []byte) bool {
	if w.deprecateEOF {
		return len(p) > 0 && p[0] == 0xfe && len(p) < maxPayload
	}
	return isEOF(p)
}

func (w *walker) terminatorStatus(p []byte) (uint16, bool) {
	if w.deprecateEOF && len(p) >= 7 {
		if s, ok := okStatus(p); ok {
			return s, true
		}
	}
	return eofStatus(p)
}

// feed takes the next physical packet's payload; done is true once the response is complete.
func (w *walker) feed(p []byte) (done bool, err error) {
	if w.cont {
		w.cont = len(p) == maxPayload
		return false, nil
	}
	w.cont = len(p) == maxPayload
	if w.cont {
		// The start of a packet of 16 MB or more: a row or a definition, never a terminator.
		if w.state == wFirst || w.state == wDone {
			return false, fmt.Errorf("protocol: a %d-byte packet where a response starts", len(p))
		}
	}
	if len(p) == 0 {
		return false, errors.New("protocol: empty packet in a response")
	}
	switch w.kind {
	case respSimple, respStatistic:
		if w.kind == respSimple {
			switch p[0] {
			case 0x00:
				if s, ok := okStatus(p); ok {
					w.setStatus(s)
				}
			case 0xfe:
				if s, ok := eofStatus(p); ok {
					w.setStatus(s)
				}
			case 0xff:
				w.err = p
			}
		}
		w.state = wDone
		return true, nil
	case respPrepare:
		return w.feedPrepare(p)
	}
	switch w.state {
	case wFirst:
		switch {
		case p[0] == 0x00:
			s, ok := okStatus(p)
			if !ok {
				return false, errors.New("protocol: short OK packet")
			}
			w.setStatus(s)
			if s&statusMoreResults != 0 {
				return false, nil
			}
			w.state = wDone
			return true, nil
		case p[0] == 0xff:
			w.err, w.state = p, wDone
			return true, nil
		case p[0] == 0xfb:
			return false, errors.New("protocol: LOAD DATA LOCAL requested (not supported by the relay)")
		}
		n, _, ok := lenenc(p)
		if !ok || n == 0 {
			return false, errors.New("protocol: bad column count")
		}
		w.remaining, w.state = n, wColDefs
	case wColDefs:
		w.remaining--
		if w.remaining == 0 {
			w.state = wColEOF
			if w.deprecateEOF {
				w.state = wRows
			}
		}
	case wColEOF:
		if !isEOF(p) {
			return false, errors.New("protocol: expected EOF after column definitions")
		}
		s, _ := eofStatus(p)
		w.setStatus(s)
		if s&statusCursorExists != 0 { // rows come later, through COM_STMT_FETCH
			w.cursor, w.state = true, wDone
			return true, nil
		}
		w.state = wRows
	case wRows:
		if p[0] == 0xff {
			w.err, w.state = p, wDone
			return true, nil
		}
		if !w.terminator(p) {
			return false, nil
		}
		s, ok := w.terminatorStatus(p)
		if !ok {
			return false, errors.New("protocol: short EOF packet")
		}
		w.setStatus(s)
		if w.kind == respResults && s&statusMoreResults != 0 {
			w.state = wFirst
			return false, nil
		}
		w.state = wDone
		return true, nil
	default:
		return false, fmt.Errorf("protocol: packet after the end of a response")
	}
	return false, nil
}

func (w *walker) feedPrepare(p []byte) (bool, error) {
	switch w.state {
	case wFirst:
		if p[0] == 0xff {
			w.err, w.state = p, wDone
			return true, nil
		}
		if p[0] != 0x00 || len(p) < 12 {
			return false, errors.New("protocol: bad COM_STMT_PREPARE_OK")
		}
		w.stmtID = binary.LittleEndian.Uint32(p[1:])
		w.numCols = binary.LittleEndian.Uint16(p[5:])
		w.numParams = binary.LittleEndian.Uint16(p[7:])
		return w.nextPrepSection(wFirst), nil
	case wParamDefs:
		w.remaining--
		if w.remaining == 0 {
			if w.deprecateEOF {
				return w.nextPrepSection(wParamEOF), nil
			}
			w.state = wParamEOF
		}
	case wParamEOF, wPrepColEOF:
		if !isEOF(p) {
			return false, errors.New("protocol: expected EOF after definitions")
		}
		return w.nextPrepSection(w.state), nil
	case wPrepCols:
		w.remaining--
		if w.remaining == 0 {
			if w.deprecateEOF {
				w.state = wDone
				return true, nil
			}
			w.state = wPrepColEOF
		}
	default:
		return false, fmt.Errorf("protocol: packet after the end of a response")
	}
	return false, nil
}

// nextPrepSection moves past a finished section of a prepare response: parameters, then columns.
func (w *walker) nextPrepSection(finished int) bool {
	if finished == wFirst && w.numParams > 0 {
		w.state, w.remaining = wParamDefs, uint64(w.numParams)
		return false
	}
	if (finished == wFirst || finished == wParamEOF) && w.numCols > 0 {
		w.state, w.remaining = wPrepCols, uint64(w.numCols)
		return false
	}
	w.state = wDone
	return true
}

// responseKind says how the response to a command is framed; known is false for a command
// the relay does not relay.
func responseKind(cmd byte) (respKind, bool) {
	switch cmd {
	case comQuery, comStmtExecute, comProcessInfo:
		return respResults, true
	case comStmtPrepare:
		return respPrepare, true
	case comStmtFetch, comFieldList:
		return respRows, true
	case comStmtClose, comStmtSendLong, comQuit:
		return respNone, true
	case comStatistics:
		return respStatistic, true
	case comInitDB, comPing, comStmtReset, comResetConnection, comRefresh, comProcessKill, comDebug:
		return respSimple, true
	}
	return respNone, false
}
