package main

// What a session's text statements change that the relay must replay on a new backend: the
// current database (USE) and session variables (SET ... in session scope, in order).

import (
	"bytes"
	"strings"
)

type effect int

const (
	effectNone effect = iota
	effectUse
	effectSet
)

// skipSpaceAndComments drops leading whitespace and comments. An executable comment (/*! or
// /*M!) is a statement's text, not a comment: it stops the scan (and the statement is then
// not recognised: such a SET is not replayed).
func skipSpaceAndComments(q []byte) []byte {
	for {
		q = bytes.TrimLeft(q, " \t\r\n\f")
		switch {
		case bytes.HasPrefix(q, []byte("/*!")) || bytes.HasPrefix(q, []byte("/*M!")):
			return q
		case bytes.HasPrefix(q, []byte("/*")):
			end := bytes.Index(q[2:], []byte("*/"))
			if end < 0 {
				return nil
			}
			q = q[end+4:]
		case bytes.HasPrefix(q, []byte("#")) || bytes.HasPrefix(q, []byte("-- ")):
			end := bytes.IndexByte(q, '\n')
			if end < 0 {
				return nil
			}
			q = q[end+1:]
		default:
			return q
		}
	}
}

func hasKeyword(q []byte, kw string) bool {
	if len(q) <= len(kw) || !strings.EqualFold(string(q[:len(kw)]), kw) {
		return false
	}
	c := q[len(kw)]
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '`' || c == '@' || c == '/'
}

// classify says what a COM_QUERY's text changes in the replayable state if it succeeds.
func classify(q []byte) (effect, string) {
	q = skipSpaceAndComments(q)
	if len(q) < 4 {
		return effectNone, ""
	}
	switch q[0] | 0x20 {
	case 'u':
		if hasKeyword(q, "use") {
			if db, ok := useTarget(string(q[3:])); ok {
				return effectUse, db
			}
		}
	case 's':
		if hasKeyword(q, "set") && sessionScopedSet(string(q[3:])) {
			return effectSet, strings.TrimRight(strings.TrimSpace(string(q)), "; \t\r\n")
		}
	}
	return effectNone, ""
}

// useTarget reads USE's database name, quoted with backticks or not.
func useTarget(rest string) (string, bool) {
	s := strings.TrimRight(strings.TrimSpace(rest), "; \t\r\n")
	if strings.HasPrefix(s, "`") {
		if len(s) < 2 || !strings.HasSuffix(s, "`") {
			return "", false
		}
		return strings.ReplaceAll(s[1:len(s)-1], "``", "`"), true
	}
	if s == "" || strings.ContainsAny(s, " \t\r\n;") {
		return "", false
	}
	return s, true
}

// sessionScopedSet: a SET whose every effect lasts the session and is safe to run again on
// another server. Not: SET GLOBAL / PERSIST (server-wide: never replayed), SET STATEMENT ...
// FOR (one statement), SET TRANSACTION without SESSION (the next transaction only),
// SET PASSWORD and SET DEFAULT ROLE (stored in the server's tables).
func sessionScopedSet(rest string) bool {
	words := strings.FieldsFunc(strings.ToLower(rest), func(r rune) bool {
		return !(r == '_' || r == '@' || r == '.' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
	if len(words) == 0 {
		return false
	}
	switch words[0] {
	case "statement", "transaction", "password", "default":
		return false
	}
	for _, w := range words {
		if w == "global" || w == "persist" || w == "persist_only" ||
			strings.HasPrefix(w, "@@global.") || strings.HasPrefix(w, "@@persist") {
			return false
		}
	}
	return true
}

// maxSets bounds the replay list: a pool that sets the same variable on every checkout
// replaces the earlier identical statement rather than growing the list.
const maxSets = 1000

func rememberSet(sets []string, q string) []string {
	for i, s := range sets {
		if s == q {
			sets = append(sets[:i], sets[i+1:]...)
			break
		}
	}
	if len(sets) >= maxSets {
		sets = sets[1:]
	}
	return append(sets, q)
}
