package storekit_test

import (
	"context"
	"sync"
	"testing"

	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/storetest"
)

// blobBackend keeps each record encoded, as a file or key-value backend
// would, so the conformance suite also exercises the codec and the rule
// that a corrupt record is reported, never replaced.
type blobBackend struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (b *blobBackend) decode(key string) (*storekit.Record, error) {
	raw, ok := b.m[key]
	if !ok {
		return nil, nil
	}
	return storekit.DecodeRecord(raw)
}

func (b *blobBackend) Load(_ context.Context, key string) (*storekit.Record, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.decode(key)
}

func (b *blobBackend) Update(_ context.Context, key string, fn func(*storekit.Record) (*storekit.Record, error)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, err := b.decode(key)
	if err != nil {
		return err
	}
	next, err := fn(cur)
	if err != nil || next == nil {
		return err
	}
	raw, err := storekit.EncodeRecord(next)
	if err != nil {
		return err
	}
	b.m[key] = raw
	return nil
}

func (b *blobBackend) Delete(_ context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
	return nil
}

// TestLockedConformance: a Backend of three methods under storekit.Locked
// passes the whole conformance suite, on the suite's clock.
func TestLockedConformance(t *testing.T) {
	backends := map[storekit.Store]*blobBackend{}
	var mu sync.Mutex
	storetest.Run(t, storetest.Harness{
		NewStoreWithClock: func(t *testing.T, c *storetest.Clock) storekit.Store {
			b := &blobBackend{m: map[string][]byte{}}
			s := storekit.NewLocked(b, storekit.LockedConfig{Name: "blobstore", Now: c.Now})
			mu.Lock()
			backends[s] = b
			mu.Unlock()
			return s
		},
		Corrupt: func(t *testing.T, s storekit.Store, key string) {
			mu.Lock()
			b := backends[s]
			mu.Unlock()
			b.mu.Lock()
			b.m[key] = []byte(`{"v":1,"key":`)
			b.mu.Unlock()
		},
	})
}
