package main

import (
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary act as a worker process when run asks it to.
func TestMain(m *testing.M) {
	for _, a := range os.Args[1:] {
		if a == "-worker" {
			main()
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

func TestCheckout(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	if err := run(f); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	t.Log("\n" + out)
	for _, want := range []string{
		"order-1001: worker 2 got the recorded charge ch_order-1001_1 without charging",
		"order-1002: worker 2 ran the charge step again with the same Idempotency-Key: the provider answered ch_order-1002_1",
		"charged once, e-mailed once",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
