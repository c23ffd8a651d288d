// The tests run commands with sh and signal process groups.

//go:build unix

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/idem-go/idem"
)

// FuzzKey: idem key never panics, and when it prints a key, it is the one
// idem.Key gives for the same JSON values. The arguments follow "--", as a
// script passing names it does not control must write them: without it a
// NAME of "--" or "-s" is read as a flag, as every Go command reads it.
func FuzzKey(f *testing.F) {
	f.Add("invoice", "42", `"EUR"`)
	f.Add("m", `{"b":1,"a":[true,null]}`, "1e400")
	f.Add("", "{", "")
	f.Add("--", "0", "1")
	f.Add("-s", `"x"`, "2")
	f.Fuzz(func(t *testing.T, name, a, b string) {
		iv := invoke(context.Background(), env{}, "key", "--", name, a, b)
		if iv.code != exitOK {
			if iv.code != exitUsage {
				t.Fatalf("exit %d", iv.code)
			}
			return
		}
		va, err1 := parseJSONArg(a)
		vb, err2 := parseJSONArg(b)
		if err1 != nil || err2 != nil {
			t.Fatalf("printed a key for arguments that do not parse: %q %q", a, b)
		}
		want, err := idem.Key(name, va, vb)
		if err != nil || iv.stdout != want+"\n" {
			t.Fatalf("printed %q, idem.Key gives %q, %v", iv.stdout, want, err)
		}
	})
}

// FuzzParseSize: sizes parse without panics and are never negative.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "64KiB", "1 MiB", "9223372036854775807", "-1", "1g"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err == nil && (n < 0 || n > 1<<40) {
			t.Fatalf("parseSize(%q) = %d", s, n)
		}
		if err != nil && !strings.Contains(err.Error(), "size") {
			t.Fatalf("parseSize(%q): %v", s, err)
		}
	})
}
