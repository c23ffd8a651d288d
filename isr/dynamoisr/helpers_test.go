package dynamoisr_test

import (
	"testing"

	"github.com/idem-go/idem/isr/dynamoisr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
)

// The constructors of the tests' fixtures, failing the test on an error.

func mustDynamoTable(t testing.TB, client dynamoisr.Client, table string) *dynamoisr.Table {
	t.Helper()
	tb, err := dynamoisr.NewTable(client, table)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	return tb
}

// fakeDynamo is a Client for tests that send no request.
type fakeDynamo struct{ dynamoisr.Client }

func mustS3(t testing.TB, client dynamoisr.S3Client, bucket string, opts ...dynamoisr.S3BodyOption) *dynamoisr.S3Body {
	t.Helper()
	s, err := dynamoisr.NewS3Body(client, bucket, opts...)
	if err != nil {
		t.Fatalf("NewS3Body: %v", err)
	}
	return s
}

var (
	mustCoordinator = isrtesting.MustCoordinator
	mustHandler     = isrtesting.MustHandler
	mustPK          = isrtesting.MustPK
	get             = isrtesting.Get
)
