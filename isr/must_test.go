package isr_test

import (
	"testing"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/body"
)

// The constructors of the tests' fixtures, failing the test on an error.

func mustCoordinator(t testing.TB, tb isr.Table, opts ...isr.Option) *isr.Coordinator {
	t.Helper()
	c, err := isr.NewCoordinator(tb, opts...)
	if err != nil {
		t.Fatalf("NewCoordinator: %v", err)
	}
	return c
}

func mustDynamoTable(t testing.TB, client isr.DynamoAPI, table string) *isr.DynamoTable {
	t.Helper()
	tb, err := isr.NewDynamoTable(client, table)
	if err != nil {
		t.Fatalf("NewDynamoTable: %v", err)
	}
	return tb
}

func mustHandler(t testing.TB, c *isr.Coordinator, bodies body.Store, render isr.PageFunc, opts ...isr.HandlerOption) *isr.Handler {
	t.Helper()
	h, err := isr.NewHandler(c, bodies, render, opts...)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	return h
}

func mustS3(t testing.TB, client body.S3API, bucket string, opts ...body.S3Option) *body.S3 {
	t.Helper()
	s, err := body.NewS3(client, bucket, opts...)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	return s
}

// fakeDynamo is a DynamoAPI for tests that send no request.
type fakeDynamo struct{ isr.DynamoAPI }

// newMemoryTable is a MemoryTable closed when the test ends.
func newMemoryTable(t testing.TB, opts ...isr.TableOption) *isr.MemoryTable {
	t.Helper()
	tb, err := isr.NewMemoryTable(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	return tb
}
