package natsstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

// buckets remembers the bucket under each store, for the corrupter.
var buckets sync.Map // storekit.Store -> jetstream.KeyValue

// corrupt overwrites key's entry with bytes that do not decode.
func corrupt(t *testing.T, s storekit.Store, key string) {
	kv, ok := buckets.Load(s)
	require.True(t, ok, "store %p has no bucket", s)
	_, err := kv.(jetstream.KeyValue).Put(context.Background(), natsstore.KVKey(key), []byte(`{"v":1,"status":`))
	require.NoError(t, err)
}

// TestConformance runs storetest's suites on stores each on a fresh bucket
// of the test server: the store's operations on real time and on a clock;
// its listing, read from the bucket's stream (and, in KVWatchList, through
// a KV watch, as a store given no JetStream lists); its clean-up with
// retention 0 (without and with the store's own clean-up running beside
// Purge) and with its default retention on a clock; secret rotation;
// processes sharing a bucket; and owners killed or stopped in the middle
// of a call's steps.
func TestConformance(t *testing.T) {
	url := testenv.NATSURL(t)
	_, js := connect(t, url)
	newProcessStore := func(bucket string) (storekit.Store, error) {
		_, js := connect(t, url)
		kv, err := natsstore.CreateBucket(context.Background(), js, bucket)
		if err != nil {
			return nil, err
		}
		return natsstore.New(kv)
	}
	storetest.Run(t, storetest.Harness{
		NewStore: func(t *testing.T) storekit.Store {
			kv := newBucket(t, js)
			s, err := natsstore.New(kv)
			require.NoError(t, err)
			buckets.Store(storekit.Store(s), kv)
			return s
		},
		NewStoreWithClock: func(t *testing.T, c *storetest.Clock) storekit.Store {
			kv := newBucket(t, js)
			s, err := natsstore.New(kv, natsstore.WithClock(c.Now))
			require.NoError(t, err)
			buckets.Store(storekit.Store(s), kv)
			return s
		},
		Corrupt: corrupt,
		List: func(t *testing.T) storekit.Store {
			s, err := natsstore.New(newBucket(t, js), natsstore.WithoutCleanup(), natsstore.WithJetStream(js))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Purge:    purgeRuns(js),
		Rotation: true,
		Processes: &storetest.ProcessConfig{
			NewStore:  newProcessStore,
			Namespace: randName("idemproc_"),
			// No process dies here: a long threshold keeps a loaded
			// machine's late heartbeats from letting a live call be taken
			// over.
			Options: []idem.Option{idem.WithTakeoverAfter(30 * time.Second)},
		},
		StepCrash: &storetest.StepCrashConfig{
			Namespace: randName("idemsteps_"),
			NewStore:  newProcessStore,
		},
		DeadOwner: &storetest.DeadOwnerConfig{
			Namespace: randName("idemdead_"),
			NewStore:  newProcessStore,
			Presence:  true,
		},
	})
	t.Run("KVWatchList", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{List: func(t *testing.T) storekit.Store {
			s, err := natsstore.New(newBucket(t, js), natsstore.WithoutCleanup())
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}})
	})
}

// purgeRuns are the clean-up runs of the conformance suite: Purge alone,
// with the store's clean-up, and on a clock with the default retention.
func purgeRuns(js jetstream.JetStream) []storetest.Purge {
	return []storetest.Purge{{
		// Purge alone races claims, heartbeats and completions of
		// records expired past retention.
		Name: "Retention0s",
		NewStore: func(t *testing.T) storekit.Store {
			s, err := natsstore.New(newBucket(t, js), natsstore.WithRetention(0), natsstore.WithoutCleanup())
			require.NoError(t, err)
			return s
		},
	}, {
		// The same with the store's clean-up running too, which reads
		// headers only and deletes by stream sequence.
		Name: "Retention0sCleanup",
		NewStore: func(t *testing.T) storekit.Store {
			s, err := natsstore.New(newBucket(t, js), natsstore.WithRetention(0))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		ClockSkew: 100 * time.Millisecond,
	}, {
		NewStoreWithClock: func(t *testing.T, c *storetest.Clock) storekit.Store {
			kv := newBucket(t, js)
			s, err := natsstore.New(kv, natsstore.WithClock(c.Now))
			require.NoError(t, err)
			return s
		},
		Retention: natsstore.DefaultRetention,
	}}
}
