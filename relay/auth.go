package main

// mysql_native_password, terminated at the relay so that a session can log in again to another
// backend without the client and without its password.
//
// The server stores h2 = SHA1(SHA1(password)) (mysql.user.authentication_string, "*" + 40 hex).
// The client sends token = h1 XOR SHA1(nonce + h2) with h1 = SHA1(password). Whoever knows h2
// and the nonce recovers h1 = token XOR SHA1(nonce + h2), checks SHA1(h1) == h2, and with h1
// can answer any other server's nonce: token' = h1 XOR SHA1(nonce' + h2). The password itself
// is never known to the relay; h1 lives in the session's memory only.

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

const nativePlugin = "mysql_native_password"

// parseHash reads "*" + 40 hex digits; "" is an account without a password.
func parseHash(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) != 41 || s[0] != '*' {
		return nil, fmt.Errorf("not a mysql_native_password hash (want * and 40 hex digits)")
	}
	h, err := hex.DecodeString(s[1:])
	if err != nil {
		return nil, fmt.Errorf("not a mysql_native_password hash: %v", err)
	}
	return h, nil
}

// loadHashes reads the users file: one "user *HEX" per line, '#' comments, blank lines.
func loadHashes(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]byte{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || t[0] == '#' {
			continue
		}
		fields := strings.Fields(t)
		if len(fields) > 2 {
			return nil, fmt.Errorf("%s:%d: want \"user *HEX\"", path, line)
		}
		hash := ""
		if len(fields) == 2 {
			hash = fields[1]
		}
		h, err := parseHash(hash)
		if err != nil { // the line itself is not repeated: it holds a secret
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		out[fields[0]] = h
	}
	return out, sc.Err()
}

func sha1sum(parts ...[]byte) []byte {
	h := sha1.New()
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func xor(a, b []byte) []byte {
	out := make([]byte, len(a))
	for i := range a {
		out[i] = a[i] ^ b[i]
	}
	return out
}

// recoverH1 checks a client's token against the stored h2 and returns h1 (nil for an account
// without a password, whose token is empty).
func recoverH1(token, nonce, h2 []byte) ([]byte, bool) {
	if len(h2) == 0 {
		return nil, len(token) == 0
	}
	if len(token) != sha1.Size {
		return nil, false
	}
	h1 := xor(token, sha1sum(nonce, h2))
	return h1, subtle.ConstantTimeCompare(sha1sum(h1), h2) == 1
}

// nativeToken is what a client with h1 sends for nonce.
func nativeToken(h1, nonce, h2 []byte) []byte {
	if len(h1) == 0 {
		return nil
	}
	return xor(h1, sha1sum(nonce, h2))
}

// newNonce: 20 bytes from 1..127 without '$', as servers make them (some clients read the
// nonce as a NUL-terminated string).
func newNonce() []byte {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = b[i]%127 + 1
		if b[i] == '$' {
			b[i]++
		}
	}
	return b
}
