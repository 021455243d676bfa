package main

import "testing"

func TestClassify(t *testing.T) {
	cases := []struct {
		q    string
		what effect
		arg  string
	}{
		{"USE shop", effectUse, "shop"},
		{"  use `my db`;", effectUse, "my db"},
		{"/* pool */ USE app", effectUse, "app"},
		{"SET SESSION lock_wait_timeout = 17", effectSet, "SET SESSION lock_wait_timeout = 17"},
		{"set @tag='x';", effectSet, "set @tag='x'"},
		{"SET NAMES utf8mb4", effectSet, "SET NAMES utf8mb4"},
		{"SET @@session.sql_mode='ANSI'", effectSet, "SET @@session.sql_mode='ANSI'"},
		{"SET autocommit=0", effectSet, "SET autocommit=0"},
		{"-- c\nSET time_zone='+00:00'", effectSet, "SET time_zone='+00:00'"},
		{"SET GLOBAL read_only=1", effectNone, ""},
		{"SET @@global.read_only=1", effectNone, ""},
		{"SET a=1, GLOBAL b=2", effectNone, ""},
		{"SET STATEMENT max_statement_time=1 FOR SELECT 1", effectNone, ""},
		{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", effectNone, ""},
		{"SET PASSWORD = PASSWORD('x')", effectNone, ""},
		{"SET DEFAULT ROLE r FOR u", effectNone, ""},
		{"/*!40101 SET NAMES utf8 */", effectNone, ""},
		{"SELECT 1", effectNone, ""},
		{"USER()", effectNone, ""},
		{"SETTINGS", effectNone, ""},
	}
	for _, c := range cases {
		what, arg := classify([]byte(c.q))
		if what != c.what || arg != c.arg {
			t.Errorf("classify(%q) = %v %q, want %v %q", c.q, what, arg, c.what, c.arg)
		}
	}
}

func TestRememberSetKeepsOrderWithoutRepeats(t *testing.T) {
	var s []string
	for _, q := range []string{"SET a=1", "SET b=2", "SET a=1"} {
		s = rememberSet(s, q)
	}
	if len(s) != 2 || s[0] != "SET b=2" || s[1] != "SET a=1" {
		t.Fatalf("%v", s)
	}
}
