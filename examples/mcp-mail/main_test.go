package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
)

// The program's story: the retry is answered with the first attempt's
// result, and one e-mail is sent.
func TestRun(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	err = run(context.Background())
	os.Stdout = stdout
	w.Close()
	var out bytes.Buffer
	_, _ = io.Copy(&out, r)
	if err != nil {
		t.Fatal(err)
	}
	want := "attempt 1: e-mail 1 sent to ann@example.com (replayed: false)\n" +
		"attempt 2: e-mail 1 sent to ann@example.com (replayed: true)\n" +
		"e-mails sent: 1\n"
	if got := out.String(); !strings.Contains(got, want) {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}
