package idem_test

import (
	"context"
	"testing"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
)

// memGuard returns a Guard over a fresh memory store, and the store.
func memGuard[T any](t *testing.T, opts ...idem.Option) (*idem.Guard[T], *memstore.Store) {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.New[T](s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g, s
}

// storageKey returns g's storage key of key.
func storageKey[T any](t *testing.T, g *idem.Guard[T], key string) string {
	t.Helper()
	sk, err := guardinfo.StorageKey(g, key)
	if err != nil {
		t.Fatal(err)
	}
	return sk
}

// record returns the live record of key, or nil.
func record[T any](t *testing.T, g *idem.Guard[T], key string) *storekit.Record {
	t.Helper()
	info, _ := guardinfo.Of(g)
	rec, err := info.Store.Get(context.Background(), storageKey(t, g, key))
	if err != nil {
		return nil
	}
	return rec
}
