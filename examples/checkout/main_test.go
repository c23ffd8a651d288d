package main

import (
	"os"
	"regexp"
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

// TestCheckout plays the stories on SQLite and, when IDEM_POSTGRES_DSN is
// set, on PostgreSQL: after each, the provider made one charge and sent
// one e-mail, and the orders table holds one row for the order.
func TestCheckout(t *testing.T) {
	dsns := map[string]string{"sqlite": ""}
	if pg := os.Getenv("IDEM_POSTGRES_DSN"); pg != "" {
		dsns["postgres"] = pg
	}
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) { testCheckout(t, dsn) })
	}
}

func testCheckout(t *testing.T, dsn string) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	if err := run(f, dsn); err != nil {
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
		"order-1001: the provider made 1 charge(s) and sent 1 e-mail(s); the orders table holds 1 row(s)",
		"order-1002: the provider made 1 charge(s) and sent 1 e-mail(s); the orders table holds 1 row(s)",
		"order-1003: worker 2 got the recorded charge ch_order-1003_1 without charging",
		"order-1003: the provider made 1 charge(s) and sent 1 e-mail(s); the orders table holds 1 row(s)",
		"charged once, e-mailed once, one order row",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Each story's second worker says how long after the first one died
	// it took the checkout over.
	for _, order := range []string{"order-1001", "order-1002", "order-1003"} {
		if !regexp.MustCompile(order + `: worker 2 took the checkout over \(fencing token \d+\) \S+ after worker 1 died \(`).MatchString(out) {
			t.Errorf("output lacks how long %s's worker 2 waited after worker 1 died", order)
		}
	}
}
