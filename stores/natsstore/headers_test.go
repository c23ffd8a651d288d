package natsstore_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

// completeAll claims and completes n fresh keys on s, 8 at a time, each
// with result as its result and a TTL of an hour, and returns the keys.
func completeAll(t *testing.T, s *natsstore.Store, n int, result []byte) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = storetest.NewKey()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				nonce := storetest.NewNonce()
				_, err := s.Claim(context.Background(), storekit.ClaimRequest{Key: keys[i], Nonce: nonce, LeaseTTL: time.Minute, TakeoverAfter: time.Minute})
				if err == nil {
					err = s.Complete(context.Background(), keys[i], nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: result, TTL: time.Hour})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	return keys
}

// TestPurgeReadsNoLiveRecord: a pass over a bucket of live records with
// large results receives none of them, neither in its scan nor one by
// one (the store's counter, and the bytes its connection received, which
// are less than the live records' results alone), and still removes the
// expired records and keeps the live records, whether the Store's bucket
// came from CreateBucket or from js.KeyValue with WithJetStream, and on a
// bucket of jetstream.CreateKeyValue (whose stream denies deletes: the
// pass removes with KV purges, which leave markers). A scan that reads
// values receives every record.
func TestPurgeReadsNoLiveRecord(t *testing.T) {
	url := testenv.NATSURL(t)
	const live, expired = 2000, 50
	result := bytes.Repeat([]byte("r"), 2048)
	for _, how := range []string{"CreateBucket", "WithJetStream", "CreateKeyValue"} {
		t.Run(how, func(t *testing.T) {
			// The Store has a connection of its own, so what the
			// connection received is what the Store received.
			nc, js := connect(t, url)
			var kv natsstore.KeyValue
			clock := storetest.NewClock()
			opts := []natsstore.Option{natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup()}
			left := live + 1 // the live records and the other key
			switch how {
			case "CreateBucket":
				kv = newBucket(t, js)
			case "WithJetStream":
				plain, err := js.KeyValue(ctxT(t), newBucket(t, js).Bucket())
				require.NoError(t, err)
				kv = plain
				opts = append(opts, natsstore.WithJetStream(js))
			case "CreateKeyValue":
				name := randName("idemtest_")
				own, err := js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: name, History: 1})
				require.NoError(t, err)
				t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), name) })
				kv = own
				opts = append(opts, natsstore.WithJetStream(js))
				left += expired // a marker per removed record, and Delete's
			}
			s, err := natsstore.New(kv, opts...)
			require.NoError(t, err)
			liveKeys := completeAll(t, s, live, result)
			gone := released(t, s, expired)
			require.NoError(t, s.Delete(ctxT(t), gone[0])) // a delete marker
			// Another application's key is not read either.
			_, err = kv.(jetstream.KeyValue).Put(ctxT(t), "other.app.key", result)
			require.NoError(t, err)
			clock.Advance(time.Second)

			bodies, reads, in := natsstore.Bodies(s), natsstore.Reads(s), nc.Stats().InBytes
			n, err := s.Purge(ctxT(t))
			require.NoError(t, err)
			received := nc.Stats().InBytes - in
			t.Logf("pass over %d live records (%d-byte results): %d records received, %d read, %d bytes on the connection",
				live, len(result), natsstore.Bodies(s)-bodies, natsstore.Reads(s)-reads, received)
			assert.Zero(t, natsstore.Bodies(s)-bodies, "records the pass received")
			assert.Zero(t, natsstore.Reads(s)-reads, "records the pass read")
			assert.Less(t, received, uint64(live*len(result)), "bytes the pass received")
			require.Equal(t, expired-1, n)
			require.Equal(t, left, msgs(t, kv), "left in the stream")
			for _, k := range gone {
				_, err := kv.Get(ctxT(t), natsstore.KVKey(k))
				require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
			}
			for _, k := range liveKeys {
				rec, err := s.Get(ctxT(t), k)
				require.NoError(t, err)
				require.Equal(t, result, rec.Result)
			}

			// A listing reads values: it receives every record.
			bodies = natsstore.Bodies(s)
			listed := 0
			for _, err := range s.Records(ctxT(t)) {
				require.NoError(t, err)
				listed++
			}
			require.Equal(t, live, listed)
			require.EqualValues(t, live+1, natsstore.Bodies(s)-bodies, "the listing received the records and the other key")
		})
	}
}

// TestPurgeReadsRecordsWithoutExpiry: a record without the expiry header
// (written through the KV API, by a Store that does not know the stream)
// is read by its sequence and decided on, one read per such record of the
// store's, when such records are fewer than half of the scan's chunk: the
// expired ones are removed, the live ones kept, and other keys are not
// read.
func TestPurgeReadsRecordsWithoutExpiry(t *testing.T) {
	kv, clock, old, s := twoWriters(t)
	oldLive := completeAll(t, old, 20, []byte("1"))
	oldGone := released(t, old, 10)
	newLive := completeAll(t, s, 40, []byte("1"))
	newGone := released(t, s, 10)
	_, err := kv.Put(ctxT(t), "other.app.key", []byte("x"))
	require.NoError(t, err)
	clock.Advance(time.Second)

	bodies, reads := natsstore.Bodies(s), natsstore.Reads(s)
	n, err := s.Purge(ctxT(t))
	require.NoError(t, err)
	assert.Zero(t, natsstore.Bodies(s)-bodies, "records received")
	assert.EqualValues(t, len(oldLive)+len(oldGone), natsstore.Reads(s)-reads, "records read: those without the header")
	require.Equal(t, len(oldGone)+len(newGone), n)
	require.Equal(t, len(oldLive)+len(newLive)+1, msgs(t, kv))
	requireKept(t, s, append(oldLive, newLive...))
}

// TestPurgeSwitchesToValues: when most of a chunk of the headers-only scan
// are records without the expiry header, the pass reads the rest of the
// bucket with values instead of reading each by its sequence, and decides
// on every entry once: the expired ones, with or without the header, are
// removed and the live ones kept.
func TestPurgeSwitchesToValues(t *testing.T) {
	kv, clock, old, s := twoWriters(t)
	// 60 records with the header, then 250 without, then 60 with it
	// again. The scan's first chunk of 100 holds 40 without the header:
	// those are read one by one; the second holds only records without
	// it: the pass goes on with values from its first entry.
	newLive := completeAll(t, s, 40, []byte("1"))
	newGone := released(t, s, 20)
	oldLive := completeAll(t, old, 150, []byte("1"))
	oldGone := released(t, old, 100)
	newLive = append(newLive, completeAll(t, s, 40, []byte("1"))...)
	newGone = append(newGone, released(t, s, 20)...)
	clock.Advance(time.Second)

	var chosen []string
	natsstore.SetBeforeRemove(func(keys []string) { chosen = append(chosen, keys...) })
	defer natsstore.SetBeforeRemove(nil)
	bodies, reads := natsstore.Bodies(s), natsstore.Reads(s)
	n, err := s.Purge(ctxT(t))
	require.NoError(t, err)
	t.Logf("records received with the scan: %d; read one by one: %d", natsstore.Bodies(s)-bodies, natsstore.Reads(s)-reads)
	slices.Sort(chosen)
	require.Len(t, slices.Compact(chosen), len(oldGone)+len(newGone), "each expired record chosen once")
	assert.EqualValues(t, 40, natsstore.Reads(s)-reads, "records read one by one: the first chunk's")
	assert.EqualValues(t, 270, natsstore.Bodies(s)-bodies, "records received: all from the second chunk on")
	require.Equal(t, len(oldGone)+len(newGone), n)
	require.Equal(t, len(oldLive)+len(newLive), msgs(t, kv))
	requireKept(t, s, append(oldLive, newLive...))
}

// TestPurgeWithoutPublishing: a Store that writes through the KV API (its
// records carry no expiry header) scans the bucket with values, a chunk
// at a time, rather than reading each record by its sequence, and
// decides on the records.
func TestPurgeWithoutPublishing(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	clock := storetest.NewClock()
	s, err := natsstore.New(kv, natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup())
	require.NoError(t, err)
	natsstore.NoPublish(s)
	liveKeys := completeAll(t, s, 30, []byte("1"))
	released(t, s, 20)
	clock.Advance(time.Second)
	bodies, reads := natsstore.Bodies(s), natsstore.Reads(s)
	n, err := s.Purge(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 20, n)
	assert.EqualValues(t, 50, natsstore.Bodies(s)-bodies, "records received with the scan")
	assert.Zero(t, natsstore.Reads(s)-reads, "records read one by one")
	require.Equal(t, len(liveKeys), msgs(t, kv))
	requireKept(t, s, liveKeys)
}

// TestWriteHeader: every record a Store on CreateBucket's bucket writes
// carries its ExpiresAt in a header, a claim of a key whose record was
// deleted included (written over the delete marker); the KV API reads the
// record as it was written; a fresh claim is one request, as a KV Update
// is.
func TestWriteHeader(t *testing.T) {
	nc, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	s, err := natsstore.New(kv, natsstore.WithoutCleanup())
	require.NoError(t, err)
	stream, err := js.Stream(ctxT(t), "KV_"+kv.Bucket())
	require.NoError(t, err)
	ctx := ctxT(t)
	check := func(key string) {
		t.Helper()
		rec, err := s.Get(ctx, key)
		require.NoError(t, err)
		m, err := stream.GetLastMsgForSubject(ctx, "$KV."+kv.Bucket()+"."+natsstore.KVKey(key))
		require.NoError(t, err)
		require.Equal(t, strconv.FormatInt(rec.ExpiresAt, 10), m.Header.Get(natsstore.ExpiresHeader))
		e, err := kv.Get(ctx, natsstore.KVKey(key))
		require.NoError(t, err)
		assert.Equal(t, jetstream.KeyValuePut, e.Operation())
		assert.Equal(t, m.Data, e.Value())
	}
	key := storetest.NewKey()
	out := nc.Stats().OutMsgs
	nonce := claim(t, s, key)
	assert.EqualValues(t, 1, nc.Stats().OutMsgs-out, "requests of a fresh claim")
	check(key)
	require.NoError(t, s.Heartbeat(ctx, key, nonce, time.Minute))
	check(key)
	require.NoError(t, s.Complete(ctx, key, nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Hour}))
	check(key)

	require.NoError(t, s.Delete(ctx, key))
	out = nc.Stats().OutMsgs
	res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: storetest.NewNonce(), LeaseTTL: time.Minute, TakeoverAfter: time.Minute})
	require.NoError(t, err)
	require.Equal(t, storekit.Claimed, res.Outcome)
	assert.EqualValues(t, 5, nc.Stats().OutMsgs-out, "requests of a claim over a delete marker (the package doc counts them)")
	check(key)

	// A claim that finds a live record is refused as before.
	res, err = s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: storetest.NewNonce(), LeaseTTL: time.Minute, TakeoverAfter: time.Minute})
	require.NoError(t, err)
	require.Equal(t, storekit.Existing, res.Outcome)
}

// TestPublishes: a Store writes records itself only on a plain bucket
// stream reached through the default JetStream API; with a domain, an API
// prefix or a mirror it writes through the KV API.
func TestPublishes(t *testing.T) {
	nc, js := connect(t, testenv.NATSURL(t))
	info := func(mod func(*jetstream.StreamConfig)) *jetstream.StreamInfo {
		c := jetstream.StreamConfig{Name: "KV_b", Subjects: []string{"$KV.b.>"}}
		if mod != nil {
			mod(&c)
		}
		return &jetstream.StreamInfo{Config: c}
	}
	require.True(t, natsstore.Publishes(js, info(nil)))
	same, err := jetstream.NewWithAPIPrefix(nc, "$JS.API")
	require.NoError(t, err)
	require.True(t, natsstore.Publishes(same, info(nil)))
	domain, err := jetstream.NewWithDomain(nc, "hub")
	require.NoError(t, err)
	require.False(t, natsstore.Publishes(domain, info(nil)), "domain")
	prefix, err := jetstream.NewWithAPIPrefix(nc, "$JS.other.API")
	require.NoError(t, err)
	require.False(t, natsstore.Publishes(prefix, info(nil)), "API prefix")
	require.False(t, natsstore.Publishes(js, info(func(c *jetstream.StreamConfig) { c.Mirror = &jetstream.StreamSource{Name: "KV_a"} })), "mirror")
	require.False(t, natsstore.Publishes(js, info(func(c *jetstream.StreamConfig) { c.Subjects = []string{"$KV.b.>", "x.>"} })), "subjects")
	require.False(t, natsstore.Publishes(js, info(func(c *jetstream.StreamConfig) { c.Name = "b" })), "not a bucket")
	require.False(t, natsstore.Publishes(nil, info(nil)))
	require.False(t, natsstore.Publishes(js, nil))
}

func TestEntryOp(t *testing.T) {
	for _, tc := range []struct {
		h  nats.Header
		op jetstream.KeyValueOp
	}{
		{nil, jetstream.KeyValuePut},
		{nats.Header{"Idem-Expires-At": {"1"}}, jetstream.KeyValuePut},
		{nats.Header{"KV-Operation": {"DEL"}}, jetstream.KeyValueDelete},
		{nats.Header{"KV-Operation": {"PURGE"}}, jetstream.KeyValuePurge},
		{nats.Header{"Nats-Marker-Reason": {"MaxAge"}}, jetstream.KeyValuePurge},
		{nats.Header{"Nats-Marker-Reason": {"Remove"}}, jetstream.KeyValueDelete},
	} {
		assert.Equal(t, tc.op, natsstore.EntryOp(tc.h), "%v", tc.h)
	}
}

// twoWriters returns a bucket and two Stores on it, on one clock, with
// retention 0 and no clean-up of their own: old writes through the KV API
// (its records carry no expiry header), s publishes.
func twoWriters(t *testing.T) (jetstream.KeyValue, *storetest.Clock, *natsstore.Store, *natsstore.Store) {
	t.Helper()
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	clock := storetest.NewClock()
	opts := []natsstore.Option{natsstore.WithClock(clock.Now), natsstore.WithRetention(0), natsstore.WithoutCleanup()}
	old, err := natsstore.New(plainKV{kv}, opts...)
	require.NoError(t, err)
	s, err := natsstore.New(kv, opts...)
	require.NoError(t, err)
	return kv, clock, old, s
}
