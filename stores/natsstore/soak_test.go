package natsstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

// soakKeys is how many expired records TestSoakCleanup loads
// (IDEM_SOAK_KEYS, default 20000).
func soakKeys(t *testing.T) int {
	if v := os.Getenv("IDEM_SOAK_KEYS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	return 20000
}

// loadExpired writes n completed records that expired an hour ago straight
// into kv, 16 at a time: published with their expiry header as a Store
// that knows the stream writes them, or, with IDEM_SOAK_HEADERLESS=1,
// created through the KV API (as a Store without the stream writes them).
func loadExpired(t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue, n int) {
	headerless := os.Getenv("IDEM_SOAK_HEADERLESS") != ""
	past := time.Now().Add(-time.Hour).UnixMilli()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				key := storetest.NewKey()
				b, err := storekit.EncodeRecord(&storekit.Record{Key: key, Status: storekit.StatusCompleted, Result: []byte(`"ok"`),
					Nonce: storetest.NewNonce(), Attempt: 1, StartedAt: past - 10, HeartbeatAt: past, CompletedAt: past, ExpiresAt: past})
				switch {
				case err != nil:
				case headerless:
					_, err = kv.Create(context.Background(), natsstore.KVKey(key), b)
				default:
					m := &nats.Msg{Subject: "$KV." + kv.Bucket() + "." + natsstore.KVKey(key), Header: nats.Header{}, Data: b}
					m.Header.Set(natsstore.ExpiresHeader, strconv.FormatInt(past, 10))
					_, err = js.PublishMsg(context.Background(), m, jetstream.WithExpectLastSequencePerSubject(0))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// probe runs fresh and replayed calls on g, one after the other, until
// stop is closed, and returns each call's latency.
func probe(g *idem.Guard[int], stop <-chan struct{}) []time.Duration {
	var lat []time.Duration
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	var done []string
	for i := 0; ; i++ {
		select {
		case <-stop:
			return lat
		default:
		}
		key := fmt.Sprintf("probe-%d", i)
		if i%2 == 1 {
			key = done[len(done)/2] // a replay
		}
		t0 := time.Now()
		if _, err := g.Do(ctx, key, fn); err != nil {
			panic(err)
		}
		lat = append(lat, time.Since(t0))
		if i%2 == 0 {
			done = append(done, key)
		}
	}
}

type latStats struct {
	n             int
	p50, p99, max time.Duration
}

func stats(lat []time.Duration) latStats {
	s := slices.Clone(lat)
	slices.Sort(s)
	if len(s) == 0 {
		return latStats{}
	}
	return latStats{n: len(s), p50: s[len(s)/2], p99: s[len(s)*99/100], max: s[len(s)-1]}
}

func (s latStats) String() string {
	return fmt.Sprintf("%d calls, p50 %v, p99 %v, worst %v", s.n, s.p50.Round(10*time.Microsecond), s.p99.Round(10*time.Microsecond), s.max.Round(10*time.Microsecond))
}

// legacyPurge is the Purge of the previous version, for comparison: list
// every key, read each, purge each expired one with a KV purge on the
// revision read (which leaves a marker).
func legacyPurge(ctx context.Context, kv jetstream.KeyValue) (int, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = lister.Stop() }()
	cutoff := time.Now().UnixMilli()
	n := 0
	for k := range lister.Keys() {
		key, ok := natsstore.StorageKey(k)
		if !ok {
			continue
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return n, err
		}
		rec, err := storekit.DecodeRecord(e.Value())
		if err != nil || rec.ExpiresAt > cutoff {
			continue
		}
		_ = key
		if err := kv.Purge(ctx, k, jetstream.LastRevision(e.Revision())); err == nil {
			n++
		}
	}
	return n, nil
}

// setSoakPacing sets the pass's pause (IDEM_SOAK_PAUSE) and parallelism
// (IDEM_SOAK_PARALLEL) when the environment gives them.
func setSoakPacing(t *testing.T) {
	if v := os.Getenv("IDEM_SOAK_PAUSE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		require.NoError(t, err)
		natsstore.SetPurgePause(f)
	}
	if v := os.Getenv("IDEM_SOAK_PARALLEL"); v != "" {
		p, err := strconv.Atoi(v)
		require.NoError(t, err)
		natsstore.SetPurgeParallel(p)
	}
}

// soakPass runs the removal IDEM_SOAK_MODE names over the n expired
// records of kv: a pass of s (default), the previous Purge ("legacy"), or
// only the reading of a pass, by scanOnly, to which nothing has expired
// ("scan", reported as n removed).
func soakPass(ctx context.Context, kv jetstream.KeyValue, s, scanOnly *natsstore.Store, n int) (int, error) {
	switch os.Getenv("IDEM_SOAK_MODE") {
	case "legacy":
		return legacyPurge(ctx, kv)
	case "scan":
		_, err := natsstore.BackgroundPass(ctx, scanOnly)
		return n, err
	}
	return natsstore.BackgroundPass(ctx, s)
}

// TestSoakCleanup (IDEM_SOAK=1) removes 20k expired records with a pass of
// the background clean-up while a probe of fresh and replayed calls runs,
// then runs the probe alone for an equal window, and compares: the
// probe's p99 within 2× and its worst call within 100 ms of the window
// without clean-up. It reports the stream's message count before and
// after. IDEM_SOAK_LEGACY=1 also times the previous Purge on as many keys.
func TestSoakCleanup(t *testing.T) {
	if os.Getenv("IDEM_SOAK") == "" {
		t.Skip("IDEM_SOAK=1 runs the clean-up soak")
	}
	n := soakKeys(t)
	setSoakPacing(t)
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	s, err := natsstore.New(kv, natsstore.WithRetention(0), natsstore.WithoutCleanup())
	require.NoError(t, err)
	g, err := idem.New[int](s)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A store whose clock is two hours back: to its pass nothing has
	// expired yet.
	scanOnly, err := natsstore.New(kv, natsstore.WithRetention(0), natsstore.WithoutCleanup(),
		natsstore.WithClock(func() time.Time { return time.Now().Add(-2 * time.Hour) }))
	require.NoError(t, err)

	t0 := time.Now()
	loadExpired(t, js, kv, n)
	t.Logf("loaded %d expired records in %v", n, time.Since(t0).Round(time.Millisecond))
	before := msgs(t, kv)

	stop := make(chan struct{})
	var with []time.Duration
	var wg sync.WaitGroup
	wg.Go(func() { with = probe(g, stop) })
	time.Sleep(200 * time.Millisecond)
	t0 = time.Now()
	removed, err := soakPass(ctx, kv, s, scanOnly, n)
	took := time.Since(t0)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	require.Equal(t, n, removed)
	after := msgs(t, kv)
	if os.Getenv("IDEM_SOAK_MODE") == "scan" {
		after = 0
	}

	stop = make(chan struct{})
	var without []time.Duration
	wg.Go(func() { without = probe(g, stop) })
	time.Sleep(took + 200*time.Millisecond)
	close(stop)
	wg.Wait()

	w, wo := stats(with), stats(without)
	t.Logf("pass: removed %d expired records in %v (%.0f/s)", removed, took.Round(time.Millisecond), float64(removed)/took.Seconds())
	t.Logf("stream messages: %d before, %d after (the probe's records and the lease entry)", before, after)
	t.Logf("probe during the pass:    %v", w)
	t.Logf("probe without a pass:     %v", wo)
	t.Logf("p99 ratio %.2f, worst call %v longer", float64(w.p99)/float64(wo.p99), (w.max - wo.max).Round(10*time.Microsecond))
	require.LessOrEqual(t, after, 1+(len(with)+1)/2, "left: the lease entry and the probe's fresh records")
	require.LessOrEqual(t, float64(w.p99), 2*float64(wo.p99), "p99 during the pass over 2× the p99 without")
	require.LessOrEqual(t, w.max, wo.max+100*time.Millisecond, "a call waited over 100 ms longer than without a pass")

	// A pass that finds nothing expired.
	t0 = time.Now()
	removed, err = s.Purge(ctx)
	require.NoError(t, err)
	t.Logf("a pass over %d live records: removed %d in %v", msgs(t, kv), removed, time.Since(t0).Round(time.Millisecond))

	if os.Getenv("IDEM_SOAK_LEGACY") != "" {
		kv2 := newBucket(t, js)
		loadExpired(t, js, kv2, n)
		t0 = time.Now()
		removed, err := legacyPurge(ctx, kv2)
		require.NoError(t, err)
		t.Logf("previous Purge: removed %d in %v; stream messages after: %d (markers)", removed, time.Since(t0).Round(time.Millisecond), msgs(t, kv2))
	}
}
