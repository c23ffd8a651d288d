package dynamoisr_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/dynamoisr"
	"github.com/idem-go/idem/isr/isrtest"
	"github.com/idem-go/idem/stores/storetest"
)

// Every exported method of a Table or S3Body its constructor did not make
// returns an error matching idem.ErrInvalidOption (or a zero result),
// never panics.
func TestUnmadeValues(t *testing.T) {
	for name, tb := range map[string]*dynamoisr.Table{"nil": nil, "zero": {}} {
		t.Run("Table/"+name, func(t *testing.T) {
			storetest.CheckUnmade(t, reflect.TypeFor[*dynamoisr.Table](), isrtest.UnmadeCalls(t, tb),
				map[string]func() any{"Name": func() any { return tb.Name() }})
		})
	}
}

func TestNewTableOptions(t *testing.T) {
	t.Setenv(isr.EnvTableName, "")
	_, err := dynamoisr.NewTable(nil, "")
	storetest.CheckOptionErrors(t, err, "dynamoisr.NewTable", "dynamoisr.NewTable")
	if _, err := (&dynamoisr.Table{}).GetMeta(context.Background(), "CACHE#x"); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("use of a zero table: %v", err)
	}
	t.Setenv(isr.EnvTableName, "facetheory-cache")
	if n := mustDynamoTable(t, fakeDynamo{}, "").Name(); n != "facetheory-cache" {
		t.Fatalf("default table name = %q", n)
	}
}

func TestUnmadeS3Body(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]*dynamoisr.S3Body{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			storetest.CheckUnmade(t, reflect.TypeFor[*dynamoisr.S3Body](), map[string]func() error{
				"Put":      func() error { _, err := s.Put(ctx, "k", []byte("x"), "text/plain"); return err },
				"Get":      func() error { _, err := s.Get(ctx, "k"); return err },
				"Delete":   func() error { return s.Delete(ctx, "k") },
				"Validate": s.Validate,
			}, map[string]func() any{
				"Bucket":    func() any { return s.Bucket() },
				"ObjectKey": func() any { return s.ObjectKey("k") },
			})
		})
	}
}
