package integration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/memstore"
)

// nonceBlindStore is a memstore whose Complete ignores the nonce: it
// completes whatever live record holds the key, as a store that forgot the
// ownership check would.
type nonceBlindStore struct{ *memstore.Store }

func (s nonceBlindStore) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	if rec, err := s.Get(ctx, key); err == nil {
		nonce = rec.Nonce
	}
	return s.Store.Complete(ctx, key, nonce, c)
}

// checkThenSetStore is a map store whose Claim reads the record, decides,
// and writes in a second step: a claim by another caller can run in
// between. Its other operations hold the lock throughout, as memstore's do.
type checkThenSetStore struct {
	mu   sync.Mutex
	recs map[string]*storekit.Record
}

func nowMs() int64 { return time.Now().UnixMilli() }

func (s *checkThenSetStore) Claim(_ context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	s.mu.Lock()
	cur := s.recs[req.Key].Clone()
	s.mu.Unlock()
	time.Sleep(50 * time.Microsecond) // the gap between the check and the set
	d := storekit.DecideClaim(cur, req, nowMs())
	if d.Write {
		s.mu.Lock()
		s.recs[req.Key] = d.Record.Clone()
		s.mu.Unlock()
	}
	return d.Result(), nil
}

// update applies f to key's record under the lock.
func (s *checkThenSetStore) update(key string, f func(cur *storekit.Record, now int64) (*storekit.Record, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, err := f(s.recs[key], nowMs())
	if err == nil {
		s.recs[key] = next
	}
	return err
}

func (s *checkThenSetStore) Heartbeat(_ context.Context, key, nonce string, leaseTTL time.Duration) error {
	return s.update(key, func(cur *storekit.Record, now int64) (*storekit.Record, error) {
		return storekit.ApplyHeartbeat(cur, nonce, leaseTTL, now)
	})
}

func (s *checkThenSetStore) Complete(_ context.Context, key, nonce string, c storekit.Completion) error {
	return s.update(key, func(cur *storekit.Record, now int64) (*storekit.Record, error) {
		return storekit.ApplyComplete(cur, nonce, c, now)
	})
}

func (s *checkThenSetStore) Release(_ context.Context, key, nonce string) error {
	return s.update(key, func(cur *storekit.Record, now int64) (*storekit.Record, error) {
		return storekit.ApplyRelease(cur, nonce, now)
	})
}

func (s *checkThenSetStore) Get(_ context.Context, key string) (*storekit.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return storekit.Found(s.recs[key].Clone(), nowMs())
}

func (s *checkThenSetStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, key)
	return nil
}

// stalePurgeStore is a memstore (retention 0, no background clean-up)
// whose Purge deletes by a stale reading: it reads which records are not
// live (Get answers ErrNotFound), lets other callers run, then deletes
// those keys unconditionally, as a clean-up that lists expired records
// and deletes them by key would. A claim or a completion that revives a
// released record in between loses it.
type stalePurgeStore struct {
	*memstore.Store
	mu   sync.Mutex
	keys map[string]bool
}

func openStalePurge(t *testing.T) storekit.Store {
	s, err := memstore.New(memstore.WithRetention(0), memstore.WithoutCleanup())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &stalePurgeStore{Store: s, keys: map[string]bool{}}
}

func (s *stalePurgeStore) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	s.mu.Lock()
	s.keys[r.Key] = true
	s.mu.Unlock()
	return s.Store.Claim(ctx, r)
}

func (s *stalePurgeStore) Purge(ctx context.Context) (int, error) {
	s.mu.Lock()
	var expired []string
	for k := range s.keys {
		if _, err := s.Get(ctx, k); errors.Is(err, storekit.ErrNotFound) {
			expired = append(expired, k)
		}
	}
	s.mu.Unlock()
	for _, k := range expired {
		time.Sleep(50 * time.Microsecond) // the gap between the reading and the delete
		if err := s.Delete(ctx, k); err != nil {
			return 0, err
		}
		s.mu.Lock()
		delete(s.keys, k) // a later claim adds it again
		s.mu.Unlock()
	}
	return len(expired), nil
}

// TestBrokenStoresRejected: the check is able to fail. Three stores that break
// the contract under concurrency must each produce a history porcupine
// finds illegal, within a bounded number of random histories (in practice
// the first few).
func TestBrokenStoresRejected(t *testing.T) {
	const maxHistories = 300
	cleans := defaultHistory
	cleans.Cleans = true
	for _, tc := range []struct {
		name string
		open func(t *testing.T) storekit.Store
		cfg  historyConfig
	}{
		{"complete_ignores_nonce", func(t *testing.T) storekit.Store { return nonceBlindStore{openMem(t).(*memstore.Store)} }, defaultHistory},
		{"claim_check_then_set", func(*testing.T) storekit.Store { return &checkThenSetStore{recs: map[string]*storekit.Record{}} }, defaultHistory},
		{"purge_by_stale_reading", openStalePurge, cleans},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.open(t)
			seed := firstSeed()
			for i := range maxHistories {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				ops, err := runHistory(ctx, s, tc.cfg, seed+uint64(i))
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if v := check(ops); v.result == porcupine.Illegal {
					t.Logf("rejected after %d histories (seed %d); on the illegal key:\n%s",
						i+1, seed+uint64(i), formatKeyHistory(ops, illegalKeys(ops)[0]))
					return
				}
			}
			t.Fatalf("porcupine accepted %d histories of a broken store (seeds from %d)", maxHistories, seed)
		})
	}
}
