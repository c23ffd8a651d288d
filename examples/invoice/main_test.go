package main

import "testing"

func TestRun(t *testing.T) {
	if err := run(t.TempDir(), 16); err != nil {
		t.Fatal(err)
	}
}
