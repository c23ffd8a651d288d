package natsstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

// msgs is how many messages the bucket's stream holds: records, delete
// markers and the clean-up lease.
func msgs(t testing.TB, kv natsstore.KeyValue) int {
	t.Helper()
	st, err := kv.Status(context.Background())
	require.NoError(t, err)
	return int(st.Values())
}

// plainKV hides what CreateBucket's bucket carries (its stream, its max
// age), as a bucket opened with js.KeyValue would.
type plainKV struct{ natsstore.KeyValue }

// claim claims key on s with a fresh nonce and returns the nonce.
func claim(t testing.TB, s *natsstore.Store, key string) string {
	t.Helper()
	nonce := storetest.NewNonce()
	res, err := s.Claim(context.Background(), storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: time.Minute, TakeoverAfter: time.Minute})
	require.NoError(t, err)
	require.Contains(t, []storekit.ClaimOutcome{storekit.Claimed, storekit.TookOver}, res.Outcome, "claim of %s", key)
	return nonce
}

// released makes n released records on s (expired at once) and returns
// their keys.
func released(t testing.TB, s *natsstore.Store, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = storetest.NewKey()
		require.NoError(t, s.Release(context.Background(), keys[i], claim(t, s, keys[i])))
	}
	return keys
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCleanupRemovesExpired: a Store left open removes expired records by
// itself and keeps live ones.
func TestCleanupRemovesExpired(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	s, err := natsstore.New(kv, natsstore.WithRetention(0), natsstore.WithCleanup(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	gone := released(t, s, 30)
	live := make([]string, 5)
	for i := range live {
		live[i] = storetest.NewKey()
		claim(t, s, live[i])
	}
	// The live records and the clean-up lease stay.
	waitFor(t, "expired records removed", func() bool { return msgs(t, kv) == len(live)+1 })
	for _, k := range gone {
		_, err := kv.Get(ctxT(t), natsstore.KVKey(k))
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	}
	requireKept(t, s, live)
}

// TestWithoutCleanup: no pass runs however short the interval given
// before; Purge still removes.
func TestWithoutCleanup(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	s, err := natsstore.New(kv, natsstore.WithRetention(0), natsstore.WithCleanup(10*time.Millisecond), natsstore.WithoutCleanup())
	require.NoError(t, err)
	released(t, s, 10)
	time.Sleep(300 * time.Millisecond) // 30 intervals
	require.Equal(t, 10, msgs(t, kv))
	n, err := s.Purge(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Zero(t, msgs(t, kv))
	require.NoError(t, s.Close())
}

// TestClose: Close stops the clean-up (twice is fine) and the Store goes
// on serving calls.
func TestClose(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	s, err := natsstore.New(kv, natsstore.WithRetention(0), natsstore.WithCleanup(10*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	released(t, s, 10)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 10, msgs(t, kv), "no pass after Close")
	key := storetest.NewKey()
	require.NoError(t, s.Complete(ctxT(t), key, claim(t, s, key), storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
}

// TestPurgeKeepsRacingClaim: a claim that rewrites an expired record after
// a pass decided to remove it and before the removal always wins: the
// removal is conditioned on the revision read, whether it deletes the
// message or is a KV purge, and whether the pass decided on the record or
// on its expiry header. Against a removal of the key whatever its
// revision, every claim here is lost.
func TestPurgeKeepsRacingClaim(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	for _, tc := range []struct {
		name string
		wrap func(natsstore.KeyValue) natsstore.KeyValue
	}{
		{"stream", func(kv natsstore.KeyValue) natsstore.KeyValue { return kv }},
		{"kv-purge", func(kv natsstore.KeyValue) natsstore.KeyValue { return plainKV{kv} }},
		{"headers-kv-purge", nil}, // a bucket of CreateKeyValue, WithJetStream
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			opts := []natsstore.Option{natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup()}
			var kv natsstore.KeyValue
			if tc.wrap != nil {
				kv = tc.wrap(newBucket(t, js))
			} else {
				name := randName("idemtest_")
				own, err := js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: name, History: 1})
				require.NoError(t, err)
				t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), name) })
				kv = own
				opts = append(opts, natsstore.WithJetStream(js))
			}
			a, err := natsstore.New(kv, opts...)
			require.NoError(t, err)
			b, err := natsstore.New(kv, opts...)
			require.NoError(t, err)
			keys := released(t, a, 5)
			if tc.name == "stream" {
				// Delete markers are removed too, by their sequence: a
				// claim that recreated the key after the read wins.
				for _, k := range released(t, a, 3) {
					require.NoError(t, a.Delete(ctxT(t), k))
					keys = append(keys, k)
				}
			}
			clock.Advance(time.Second)
			nonces := map[string]string{}
			natsstore.SetBeforeRemove(func(kvKeys []string) {
				for _, k := range kvKeys {
					sk, ok := natsstore.StorageKey(k)
					require.True(t, ok)
					nonces[sk] = claim(t, b, sk)
				}
			})
			defer natsstore.SetBeforeRemove(nil)
			n, err := a.Purge(ctxT(t))
			require.NoError(t, err)
			require.Len(t, nonces, len(keys), "the pass chose every expired record and marker")
			assert.Zero(t, n, "a claimed record is not removed")
			for _, k := range keys {
				require.NoError(t, b.Complete(ctxT(t), k, nonces[k], storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Minute}), "claim lost")
				rec, err := a.Get(ctxT(t), k)
				require.NoError(t, err)
				require.Equal(t, nonces[k], rec.Nonce)
			}
		})
	}
}

// TestPurgeRacingClaimLoop races a pass and a claim of the same expired key
// without a hook, many times: the claim is never lost.
func TestPurgeRacingClaimLoop(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	clock := storetest.NewClock()
	a, err := natsstore.New(kv, natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup())
	require.NoError(t, err)
	b, err := natsstore.New(kv, natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup())
	require.NoError(t, err)
	ctx := ctxT(t)
	removed := 0
	for i := range 150 {
		key := released(t, a, 1)[0]
		clock.Advance(time.Second)
		var wg sync.WaitGroup
		var n int
		var perr error
		wg.Go(func() { n, perr = a.Purge(ctx) })
		if i%2 == 1 {
			time.Sleep(time.Duration(i%7) * 100 * time.Microsecond)
		}
		nonce := claim(t, b, key)
		cerr := b.Complete(ctx, key, nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour})
		wg.Wait()
		require.NoError(t, perr)
		require.NoError(t, cerr, "iteration %d: the claim was lost", i)
		rec, err := a.Get(ctx, key)
		require.NoError(t, err, "iteration %d", i)
		require.Equal(t, nonce, rec.Nonce)
		removed += n
	}
	t.Logf("the pass removed the record first in %d of 150 races", removed)
}

// TestMarkersBounded: records removed by the clean-up and records deleted
// with Delete (Guard.Forget) leave nothing in the stream once a pass has
// run, round after round; without the stream, KV purges leave one marker
// per removed key.
func TestMarkersBounded(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	for _, tc := range []struct {
		name    string
		wrap    func(natsstore.KeyValue) natsstore.KeyValue
		bounded bool
	}{
		{"stream", func(kv natsstore.KeyValue) natsstore.KeyValue { return kv }, true},
		{"kv-purge", func(kv natsstore.KeyValue) natsstore.KeyValue { return plainKV{kv} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := tc.wrap(newBucket(t, js))
			clock := storetest.NewClock()
			s, err := natsstore.New(kv, natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup())
			require.NoError(t, err)
			const live = 10
			var prev []string
			var counts []int
			for range 5 {
				// Last round's live records are released, this round's
				// are claimed; half of the new expired ones are deleted.
				for _, k := range prev {
					require.NoError(t, s.Delete(ctxT(t), k))
				}
				released(t, s, 40)
				prev = prev[:0]
				for range live {
					k := storetest.NewKey()
					claim(t, s, k)
					prev = append(prev, k)
				}
				clock.Advance(time.Second)
				_, err := s.Purge(ctxT(t))
				require.NoError(t, err)
				counts = append(counts, msgs(t, kv))
			}
			t.Logf("stream messages after each pass: %v", counts)
			if tc.bounded {
				for _, c := range counts {
					require.Equal(t, live, c)
				}
			} else {
				require.Greater(t, counts[len(counts)-1], counts[0], "markers pile up without the stream")
			}
		})
	}
}

// TestCleanupLease: processes sharing a bucket take turns: while one holds
// the lease (during its pass and half an interval after), another's pass
// does nothing.
func TestCleanupLease(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	clock := storetest.NewClock()
	opts := []natsstore.Option{natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup(), natsstore.WithCleanup(time.Minute)}
	a, err := natsstore.New(kv, opts...)
	require.NoError(t, err)
	b, err := natsstore.New(kv, opts...)
	require.NoError(t, err)
	released(t, a, 3)
	clock.Advance(time.Second)

	// b's pass, run while a's is between its decision and its removals.
	var bn int
	natsstore.SetBeforeRemove(func([]string) {
		natsstore.SetBeforeRemove(nil) // once: b's own pass must not run it
		var err error
		bn, err = natsstore.BackgroundPass(ctxT(t), b)
		require.NoError(t, err)
	})
	n, err := natsstore.BackgroundPass(ctxT(t), a)
	natsstore.SetBeforeRemove(nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Zero(t, bn, "b cleaned while a held the lease")

	released(t, a, 2)
	clock.Advance(time.Second)
	n, err = natsstore.BackgroundPass(ctxT(t), b)
	require.NoError(t, err)
	require.Zero(t, n, "a holds the lease for half an interval after its pass")
	clock.Advance(31 * time.Second)
	n, err = natsstore.BackgroundPass(ctxT(t), b)
	require.NoError(t, err)
	require.Equal(t, 2, n, "b's turn once a's lease lapsed")
}

// TestMaxAge: on a bucket with a max age the store refuses, before fn
// runs, a call whose record would outlive it, whether CreateBucket made
// the bucket or the user did; and the background clean-up leaves such a
// bucket to the server.
func TestMaxAge(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	created, err := natsstore.CreateBucket(ctxT(t), js, randName("idemtest_"), natsstore.WithMaxAge(2*time.Hour))
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), created.Bucket()) })
	own, err := js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: randName("idemtest_"), History: 1, TTL: 2 * time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), own.Bucket()) })

	for name, kv := range map[string]jetstream.KeyValue{"CreateBucket": created, "own bucket": own} {
		t.Run(name, func(t *testing.T) {
			s, err := natsstore.New(kv, natsstore.WithoutCleanup()) // retention: one minute
			require.NoError(t, err)
			ctx := ctxT(t)
			fits, err := idem.New[int](s, idem.WithTTL(time.Hour+59*time.Minute))
			require.NoError(t, err)
			v, err := fits.Do(ctx, "k", func(context.Context) (int, error) { return 1, nil })
			require.NoError(t, err)
			require.Equal(t, 1, v)

			long, err := idem.New[int](s, idem.WithTTL(2*time.Hour))
			require.NoError(t, err)
			ran := false
			_, err = long.Do(ctx, "k2", func(context.Context) (int, error) { ran = true; return 1, nil })
			require.ErrorIs(t, err, storekit.ErrInvalidOption)
			var mae *natsstore.MaxAgeError
			require.ErrorAs(t, err, &mae)
			assert.Equal(t, 2*time.Hour, mae.MaxAge)
			assert.Equal(t, 2*time.Hour+time.Minute, mae.Lifetime)
			require.False(t, ran, "fn ran")

			// A completion that would outlive the bucket is refused too.
			key := storetest.NewKey()
			nonce := claim(t, s, key)
			err = s.Complete(ctx, key, nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: 3 * time.Hour})
			require.ErrorAs(t, err, &mae)

			// The server expires entries here: the background pass leaves
			// them; Purge still removes on demand.
			clock := storetest.NewClock()
			c, err := natsstore.New(kv, natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup())
			require.NoError(t, err)
			released(t, c, 2)
			clock.Advance(time.Second)
			n, err := natsstore.BackgroundPass(ctx, c)
			require.NoError(t, err)
			require.Zero(t, n)
			_, err = kv.Get(ctx, natsstore.LeaseKey)
			require.True(t, errors.Is(err, jetstream.ErrKeyNotFound), "no lease taken: %v", err)
			n, err = c.Purge(ctx)
			require.NoError(t, err)
			require.Equal(t, 2, n)
		})
	}
}

// TestCreateBucketExisting: CreateBucket returns a bucket it made before
// as it is, and refuses one of the same name that CreateKeyValue made.
func TestCreateBucketExisting(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	again, err := natsstore.CreateBucket(ctxT(t), js, kv.Bucket())
	require.NoError(t, err)
	require.Equal(t, kv.Bucket(), again.Bucket())
	name := randName("idemtest_")
	_, err = js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: name, History: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), name) })
	_, err = natsstore.CreateBucket(ctxT(t), js, name)
	require.Error(t, err)
}

// TestWithJetStream: a bucket CreateBucket made, opened again with
// js.KeyValue, is cleaned without markers when the Store has the
// JetStream context.
func TestWithJetStream(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	name := newBucket(t, js).Bucket()
	kv, err := js.KeyValue(ctxT(t), name)
	require.NoError(t, err)
	clock := storetest.NewClock()
	s, err := natsstore.New(kv, natsstore.WithJetStream(js), natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup())
	require.NoError(t, err)
	keys := released(t, s, 10)
	require.NoError(t, s.Delete(ctxT(t), keys[0])) // a marker
	clock.Advance(time.Second)
	n, err := s.Purge(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 9, n)
	require.Zero(t, msgs(t, kv), "no markers left")
}
