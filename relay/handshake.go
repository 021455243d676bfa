package main

// The connection phase on both sides: the relay's own greeting to a client, the client's
// handshake response, and the relay's login to a backend as that client.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

type greeting struct {
	version string
	connID  uint32
	nonce   []byte
	caps    uint32
	charset byte
	status  uint16
	plugin  string
}

func parseGreeting(p []byte) (*greeting, error) {
	if len(p) > 0 && p[0] == 0xff {
		_, msg := errInfo(p)
		return nil, fmt.Errorf("backend refused the connection: %s", msg)
	}
	if len(p) < 1 || p[0] != 10 {
		return nil, errors.New("protocol: not a v10 handshake")
	}
	g := &greeting{}
	i := bytes.IndexByte(p[1:], 0)
	if i < 0 {
		return nil, errors.New("protocol: bad handshake")
	}
	g.version = string(p[1 : 1+i])
	p = p[2+i:]
	if len(p) < 4+8+1+2 {
		return nil, errors.New("protocol: short handshake")
	}
	g.connID = binary.LittleEndian.Uint32(p)
	g.nonce = append([]byte{}, p[4:12]...)
	g.caps = uint32(binary.LittleEndian.Uint16(p[13:]))
	p = p[15:]
	if len(p) >= 5 {
		g.charset = p[0]
		g.status = binary.LittleEndian.Uint16(p[1:])
		g.caps |= uint32(binary.LittleEndian.Uint16(p[3:])) << 16
		authLen := 0
		if len(p) >= 6 {
			authLen = int(p[5])
		}
		p = p[min(len(p), 16):] // 1 (auth data length) + 10 reserved (MariaDB: 6 + extended caps)
		if g.caps&clientSecureConnection != 0 {
			n := max(13, authLen-8)
			if len(p) < n {
				return nil, errors.New("protocol: short handshake nonce")
			}
			part := p[:n]
			if k := bytes.IndexByte(part, 0); k >= 0 {
				part = part[:k]
			}
			g.nonce = append(g.nonce, part...)
			p = p[n:]
		}
		if g.caps&clientPluginAuth != 0 {
			if k := bytes.IndexByte(p, 0); k >= 0 {
				p = p[:k]
			}
			g.plugin = string(p)
		}
	}
	return g, nil
}

func (g *greeting) encode() []byte {
	p := []byte{10}
	p = append(p, g.version...)
	p = append(p, 0)
	p = binary.LittleEndian.AppendUint32(p, g.connID)
	p = append(p, g.nonce[:8]...)
	p = append(p, 0)
	p = binary.LittleEndian.AppendUint16(p, uint16(g.caps))
	p = append(p, g.charset)
	p = binary.LittleEndian.AppendUint16(p, g.status)
	p = binary.LittleEndian.AppendUint16(p, uint16(g.caps>>16))
	p = append(p, byte(len(g.nonce)+1))
	p = append(p, make([]byte, 10)...) // reserved; MariaDB's extended capabilities: none
	p = append(p, g.nonce[8:]...)
	p = append(p, 0)
	p = append(p, g.plugin...)
	return append(p, 0)
}

type handshakeResponse struct {
	caps      uint32
	maxPacket uint32
	charset   byte
	user      string
	token     []byte
	db        string
	plugin    string
	attrs     []byte // the connection attributes block, without its length
}

func cstring(p []byte) (string, []byte, error) {
	i := bytes.IndexByte(p, 0)
	if i < 0 {
		return "", nil, errors.New("protocol: unterminated string")
	}
	return string(p[:i]), p[i+1:], nil
}

func parseHandshakeResponse(p []byte) (*handshakeResponse, error) {
	if len(p) < 32 {
		return nil, errors.New("protocol: short handshake response (SSL is not offered)")
	}
	h := &handshakeResponse{caps: binary.LittleEndian.Uint32(p), maxPacket: binary.LittleEndian.Uint32(p[4:]), charset: p[8]}
	if h.caps&clientProtocol41 == 0 {
		return nil, errors.New("protocol: a pre-4.1 client")
	}
	var err error
	if h.user, p, err = cstring(p[32:]); err != nil {
		return nil, err
	}
	switch {
	case h.caps&clientPluginAuthLenenc != 0:
		n, k, ok := lenenc(p)
		if !ok || uint64(len(p)) < uint64(k)+n {
			return nil, errors.New("protocol: bad auth response")
		}
		h.token, p = append([]byte{}, p[k:k+int(n)]...), p[k+int(n):]
	case h.caps&clientSecureConnection != 0:
		if len(p) < 1 || len(p) < 1+int(p[0]) {
			return nil, errors.New("protocol: bad auth response")
		}
		h.token, p = append([]byte{}, p[1:1+int(p[0])]...), p[1+int(p[0]):]
	default:
		var s string
		if s, p, err = cstring(p); err != nil {
			return nil, err
		}
		h.token = []byte(s)
	}
	if h.caps&clientConnectWithDB != 0 && len(p) > 0 {
		if h.db, p, err = cstring(p); err != nil {
			return nil, err
		}
	}
	if h.caps&clientPluginAuth != 0 && len(p) > 0 {
		if h.plugin, p, err = cstring(p); err != nil {
			h.plugin, p = string(p), nil // some clients leave the last string unterminated
		}
	}
	if h.caps&clientConnectAttrs != 0 && len(p) > 0 {
		n, k, ok := lenenc(p)
		if ok && uint64(len(p)) >= uint64(k)+n {
			h.attrs = append([]byte{}, p[k:k+int(n)]...)
		}
	}
	return h, nil
}

func (h *handshakeResponse) encode() []byte {
	p := binary.LittleEndian.AppendUint32(nil, h.caps)
	p = binary.LittleEndian.AppendUint32(p, h.maxPacket)
	p = append(p, h.charset)
	p = append(p, make([]byte, 23)...)
	p = append(p, h.user...)
	p = append(p, 0)
	if h.caps&clientPluginAuthLenenc != 0 {
		p = appendLenenc(p, uint64(len(h.token)))
	} else {
		p = append(p, byte(len(h.token)))
	}
	p = append(p, h.token...)
	if h.caps&clientConnectWithDB != 0 {
		p = append(p, h.db...)
		p = append(p, 0)
	}
	if h.caps&clientPluginAuth != 0 {
		p = append(p, h.plugin...)
		p = append(p, 0)
	}
	if h.caps&clientConnectAttrs != 0 {
		p = appendLenenc(p, uint64(len(h.attrs)))
		p = append(p, h.attrs...)
	}
	return p
}

// backendConn is one connection to a backend, logged in.
type backendConn struct {
	conn   net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	addr   string
	connID uint32
}

func (b *backendConn) close() {
	if b == nil {
		return
	}
	b.conn.SetDeadline(time.Now().Add(100 * time.Millisecond))
	writePacket(b.w, 0, []byte{comQuit})
	b.w.Flush()
	b.conn.Close()
}

// refusedError is a backend's ERR packet during login, forwarded as is to a connecting client.
type refusedError struct{ payload []byte }

func (e *refusedError) Error() string {
	code, msg := errInfo(e.payload)
	return fmt.Sprintf("backend refused the login (%d): %s", code, msg)
}

// login is what the relay says to a backend for one session: its account, database, character
// set, capabilities and connection attributes, and a token computed from h1 for this backend's
// nonce. Returns the backend's OK payload.
func login(addr string, hr handshakeResponse, h1, h2 []byte, timeout time.Duration) (*backendConn, []byte, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(time.Now().Add(timeout))
	rw := newRawIO(conn)
	b := &backendConn{conn: conn, r: bufio.NewReaderSize(rw, 16<<10), w: bufio.NewWriterSize(rw, 16<<10), addr: addr}
	ok, err := b.authenticate(hr, h1, h2)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return b, ok, nil
}

func (b *backendConn) authenticate(hr handshakeResponse, h1, h2 []byte) ([]byte, error) {
	p, seq, err := readPacket(b.r, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the backend's greeting: %w", err)
	}
	g, err := parseGreeting(p)
	if err != nil {
		return nil, err
	}
	b.connID = g.connID
	if missing := hr.caps &^ g.caps &^ clientLongPassword; missing != 0 {
		return nil, fmt.Errorf("backend %s lacks capabilities 0x%x the session uses", b.addr, missing)
	}
	hr.plugin = nativePlugin
	hr.token = nativeToken(h1, g.nonce[:min(20, len(g.nonce))], h2)
	if err := b.send(seq+1, hr.encode()); err != nil {
		return nil, err
	}
	for round := 0; round < 2; round++ {
		p, seq, err = readPacket(b.r, nil)
		if err != nil {
			return nil, fmt.Errorf("reading the backend's login answer: %w", err)
		}
		switch {
		case len(p) > 0 && p[0] == 0x00:
			return p, nil
		case len(p) > 0 && p[0] == 0xff:
			return nil, &refusedError{p}
		case len(p) > 0 && p[0] == 0xfe: // auth switch: the account's plugin and a new nonce
			plugin, rest, err := cstring(p[1:])
			if err != nil || plugin != nativePlugin {
				return nil, fmt.Errorf("backend %s asks for auth plugin %q: only %s is relayed", b.addr, plugin, nativePlugin)
			}
			nonce := bytes.TrimRight(rest, "\x00")
			if err := b.send(seq+1, nativeToken(h1, nonce, h2)); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("backend %s: unexpected login packet 0x%02x", b.addr, p[0])
		}
	}
	return nil, fmt.Errorf("backend %s: login did not finish", b.addr)
}

func (b *backendConn) send(seq byte, payload []byte) error {
	if err := writePacket(b.w, seq, payload); err != nil {
		return err
	}
	return b.w.Flush()
}

// probe reads a backend's greeting (its version, character set and capabilities), for the
// relay's own greeting to clients, and closes.
func probe(addr string, timeout time.Duration) (*greeting, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	p, _, err := readPacket(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	return parseGreeting(p)
}
