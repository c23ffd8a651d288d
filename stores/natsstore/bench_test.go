package natsstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/benchkit"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/natsstore"
)

// benchStore is a Store on a fresh bucket of the test server, with the
// connection it uses.
func benchStore(b *testing.B) (*natsstore.Store, *nats.Conn) {
	nc, js := connect(b, testenv.NATSURL(b))
	s, err := natsstore.New(newBucket(b, js), natsstore.WithoutCleanup())
	if err != nil {
		b.Fatal(err)
	}
	return s, nc
}

// BenchmarkCost measures guarded fresh calls and replays on the NATS
// store next to the same store operations made directly (raw-*),
// reporting store operations and heartbeats per call; guard-fresh and
// guard-replay make the same calls on the Store itself (so the Guard sees
// its Presence and sends its owner with every claim) and report the
// messages the store's connection sent per call: each is a round trip.
func BenchmarkCost(b *testing.B) {
	b.Run("fresh", func(b *testing.B) { s, _ := benchStore(b); benchkit.Fresh(b, s) })
	b.Run("replay", func(b *testing.B) { s, _ := benchStore(b); benchkit.Replay(b, s) })
	b.Run("raw-fresh", func(b *testing.B) { s, _ := benchStore(b); benchkit.RawFresh(b, s) })
	b.Run("raw-replay", func(b *testing.B) { s, _ := benchStore(b); benchkit.RawReplay(b, s) })
	b.Run("guard-fresh", func(b *testing.B) { guardBench(b, true) })
	b.Run("guard-replay", func(b *testing.B) { guardBench(b, false) })
}

// guardBench runs Do on fresh keys (fresh) or on one completed key, on a
// Guard made on the Store itself, reporting messages sent per call.
func guardBench(b *testing.B, fresh bool) {
	s, nc := benchStore(b)
	g, err := idem.New[int](storekit.Store(s))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 42, nil }
	key := randName("k")
	if _, err := g.Do(ctx, key, fn); err != nil {
		b.Fatal(err)
	}
	before := nc.Stats().OutMsgs
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := key
		if fresh {
			k = key + "-" + strconv.Itoa(i)
		}
		if _, err := g.Do(ctx, k, fn); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(nc.Stats().OutMsgs-before)/float64(b.N), "msgs/op")
}
