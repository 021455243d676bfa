package main

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// The vector: password "password", whose stored hash every MySQL/MariaDB shows as below; the
// tokens were computed apart from this code (Python's hashlib: SHA1(pw) XOR SHA1(nonce + h2)).
const (
	knownHash = "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"
	token1Hex = "c17d6009a5cb47e59f7483fcf05553bbbf7dd0d6" // nonce bytes 1..20
	token2Hex = "eeed8181375b712d447df76af4c4c3e68f4eaa67" // nonce bytes 21..40
)

func seqBytes(from, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from + i)
	}
	return b
}

func TestNativePasswordKnownVector(t *testing.T) {
	h2, err := parseHash(knownHash)
	if err != nil {
		t.Fatal(err)
	}
	token1, _ := hex.DecodeString(token1Hex)
	h1, ok := recoverH1(token1, seqBytes(1, 20), h2)
	if !ok {
		t.Fatal("the client's token did not verify")
	}
	if want := sha1sum([]byte("password")); !bytes.Equal(h1, want) {
		t.Fatalf("h1 = %x, want SHA1(password) %x", h1, want)
	}
	// Toward another server's nonce, without the password.
	if got := hex.EncodeToString(nativeToken(h1, seqBytes(21, 20), h2)); got != token2Hex {
		t.Fatalf("token for the second nonce = %s, want %s", got, token2Hex)
	}
}

func TestNativePasswordRefusals(t *testing.T) {
	h2, _ := parseHash(knownHash)
	token1, _ := hex.DecodeString(token1Hex)
	if _, ok := recoverH1(token1, seqBytes(2, 20), h2); ok {
		t.Fatal("a token for another nonce verified")
	}
	bad := append([]byte{}, token1...)
	bad[0] ^= 1
	if _, ok := recoverH1(bad, seqBytes(1, 20), h2); ok {
		t.Fatal("a changed token verified")
	}
	if _, ok := recoverH1(nil, seqBytes(1, 20), h2); ok {
		t.Fatal("an empty token verified against a password")
	}
	// An account without a password: empty token only, and an empty token onward.
	if h1, ok := recoverH1(nil, seqBytes(1, 20), nil); !ok || nativeToken(h1, seqBytes(1, 20), nil) != nil {
		t.Fatal("an account without a password")
	}
	if _, ok := recoverH1(token1, seqBytes(1, 20), nil); ok {
		t.Fatal("a token verified against an account without a password")
	}
}

func TestHashFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "users")
	os.WriteFile(p, []byte("# app accounts\napp "+knownHash+"\n\nnopass\n"), 0o600)
	h, err := loadHashes(p)
	if err != nil || len(h) != 2 || len(h["app"]) != 20 || h["nopass"] != nil {
		t.Fatalf("loadHashes = %v, %v", h, err)
	}
	os.WriteFile(p, []byte("app secret-password\n"), 0o600)
	if _, err := loadHashes(p); err == nil || bytes.Contains([]byte(err.Error()), []byte("secret")) {
		t.Fatalf("a password in place of a hash: %v (the error must not repeat it)", err)
	}
}

func TestNonceHasNoNulNorDollar(t *testing.T) {
	for i := 0; i < 200; i++ {
		for _, c := range newNonce() {
			if c == 0 || c == '$' || c > 127 {
				t.Fatalf("nonce byte %d", c)
			}
		}
	}
}
