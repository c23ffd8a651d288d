package filestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/benchkit"
	"github.com/idem-go/idem/stores/filestore"
)

func benchStore(b *testing.B, opts ...filestore.Option) *filestore.Store {
	s, err := filestore.New(filepath.Join(b.TempDir(), "store"), opts...)
	require.NoError(b, err)
	return s
}

var syncModes = []struct {
	name string
	opts []filestore.Option
}{
	{"fsync", nil},
	{"nosync", []filestore.Option{filestore.WithoutSync()}},
}

// BenchmarkClaimComplete is a fresh call at the store level: claim a new key
// and complete it (two store operations, two locked writes).
func BenchmarkClaimComplete(b *testing.B) {
	for _, m := range syncModes {
		b.Run(m.name, func(b *testing.B) {
			s := benchStore(b, m.opts...)
			ctx := context.Background()
			c := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"id":42}`), TTL: time.Hour}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := key(i)
				res, err := s.Claim(ctx, req(k, "n"))
				if err != nil || res.Outcome != storekit.Claimed {
					b.Fatal(res.Outcome, err)
				}
				if err := s.Complete(ctx, k, "n", c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2, "store-ops/op")
		})
	}
}

// BenchmarkReplay is a duplicate of a completed key at the store level: one
// Claim that finds the completed record (an unlocked read, no write).
func BenchmarkReplay(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	k := key(1)
	_, err := s.Claim(ctx, req(k, "n"))
	require.NoError(b, err)
	require.NoError(b, s.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"id":42}`), TTL: time.Hour}))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := s.Claim(ctx, req(k, "other"))
		if err != nil || res.Outcome != storekit.Existing {
			b.Fatal(res.Outcome, err)
		}
	}
	b.ReportMetric(1, "store-ops/op")
}

// BenchmarkReplayParallel is BenchmarkReplay from all Ps at once: replays
// take no lock, so they do not serialise.
func BenchmarkReplayParallel(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	k := key(1)
	_, err := s.Claim(ctx, req(k, "n"))
	require.NoError(b, err)
	require.NoError(b, s.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Hour}))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Claim(ctx, req(k, "other")); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// countingStore counts the store operations a Guard makes.
type countingStore struct {
	storekit.Store
	ops atomic.Int64
}

func (c *countingStore) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	c.ops.Add(1)
	return c.Store.Claim(ctx, r)
}

func (c *countingStore) Heartbeat(ctx context.Context, key, nonce string, ttl time.Duration) error {
	c.ops.Add(1)
	return c.Store.Heartbeat(ctx, key, nonce, ttl)
}

func (c *countingStore) Complete(ctx context.Context, key, nonce string, comp storekit.Completion) error {
	c.ops.Add(1)
	return c.Store.Complete(ctx, key, nonce, comp)
}

func (c *countingStore) Release(ctx context.Context, key, nonce string) error {
	c.ops.Add(1)
	return c.Store.Release(ctx, key, nonce)
}

func (c *countingStore) Get(ctx context.Context, key string) (*storekit.Record, error) {
	c.ops.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *countingStore) Delete(ctx context.Context, key string) error {
	c.ops.Add(1)
	return c.Store.Delete(ctx, key)
}

// BenchmarkGuardDo measures g.Do over the file store and reports the store
// operations per call: 2 for a fresh key (claim, complete), 1 for a replay.
func BenchmarkGuardDo(b *testing.B) {
	fn := func(context.Context) (string, error) { return "result", nil }
	b.Run("fresh", func(b *testing.B) {
		cs := &countingStore{Store: benchStore(b)}
		g, err := idem.New[string](cs)
		require.NoError(b, err)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := g.Do(ctx, "fresh-"+strconv.Itoa(i), fn); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cs.ops.Load())/float64(b.N), "store-ops/op")
	})
	b.Run("replay", func(b *testing.B) {
		cs := &countingStore{Store: benchStore(b)}
		g, err := idem.New[string](cs)
		require.NoError(b, err)
		ctx := context.Background()
		_, err = g.Do(ctx, "replayed", fn)
		require.NoError(b, err)
		cs.ops.Store(0)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			v, err := g.Do(ctx, "replayed", fn)
			if err != nil || v != "result" {
				b.Fatal(v, err)
			}
		}
		b.ReportMetric(float64(cs.ops.Load())/float64(b.N), "store-ops/op")
	})
}

// TestGuardRoundTrips checks the store operation counts BenchmarkGuardDo
// reports: a fresh call is a claim and a complete, a replay one claim.
func TestGuardRoundTrips(t *testing.T) {
	s, err := filestore.New(filepath.Join(t.TempDir(), "store"))
	require.NoError(t, err)
	cs := &countingStore{Store: s}
	g, err := idem.New[string](cs)
	require.NoError(t, err)
	ctx := context.Background()
	runs := 0
	fn := func(context.Context) (string, error) { runs++; return fmt.Sprint("v", runs), nil }
	v, err := g.Do(ctx, "k", fn)
	require.NoError(t, err)
	require.Equal(t, "v1", v)
	require.EqualValues(t, 2, cs.ops.Load(), "fresh call")
	cs.ops.Store(0)
	v, err = g.Do(ctx, "k", fn)
	require.NoError(t, err)
	require.Equal(t, "v1", v)
	require.EqualValues(t, 1, cs.ops.Load(), "replay")
	require.Equal(t, 1, runs)
}

// BenchmarkCost measures guarded fresh calls and replays on the file
// store next to the same store operations made directly (raw-*), reporting
// store operations and heartbeats per call.
func BenchmarkCost(b *testing.B) {
	b.Run("fresh", func(b *testing.B) { benchkit.Fresh(b, benchStore(b)) })
	b.Run("replay", func(b *testing.B) { benchkit.Replay(b, benchStore(b)) })
	b.Run("raw-fresh", func(b *testing.B) { benchkit.RawFresh(b, benchStore(b)) })
	b.Run("raw-replay", func(b *testing.B) { benchkit.RawReplay(b, benchStore(b)) })
}
