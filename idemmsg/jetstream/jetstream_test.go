package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/idemmsg/jetstream"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/memstore"
)

// TestAnswers: a redelivery with another body under the same key is
// terminated and never runs; a handler error is redelivered and runs
// again; a done message is acked.
func TestAnswers(t *testing.T) {
	nc, err := nats.Connect(testenv.NATSURL(t))
	require.NoError(t, err)
	defer nc.Close()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("answers_%d", time.Now().UnixNano())
	_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{name}, Storage: natsjs.MemoryStorage})
	require.NoError(t, err)
	defer func() { _ = js.DeleteStream(context.Background(), name) }()
	cons, err := js.CreateOrUpdateConsumer(ctx, name, natsjs.ConsumerConfig{Durable: "w", AckPolicy: natsjs.AckExplicitPolicy, AckWait: 5 * time.Second})
	require.NoError(t, err)

	ms, err := memstore.New()
	require.NoError(t, err)
	d, err := idemmsg.New(ms)
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		runs    []string
		results = map[string][]idemmsg.Action{}
		failed  bool
	)
	h := jetstream.Handler(d, func(_ context.Context, msg natsjs.Msg) error {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, string(msg.Data()))
		if string(msg.Data()) == "fails once" && !failed {
			failed = true
			return errors.New("transient")
		}
		return nil
	},
		// Orders are keyed by their Order-Id header (JetStream would drop a
		// second publish with the same Nats-Msg-Id).
		jetstream.WithKey(func(msg natsjs.Msg) (string, error) { return msg.Headers().Get("Order-Id"), nil }),
		jetstream.WithReport(func(msg natsjs.Msg, r idemmsg.Result) {
			mu.Lock()
			results[string(msg.Data())] = append(results[string(msg.Data())], r.Action)
			mu.Unlock()
		}))
	cc, err := cons.Consume(h)
	require.NoError(t, err)
	defer cc.Stop()
	pub := func(order, body string) {
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: name, Data: []byte(body), Header: nats.Header{"Order-Id": []string{order}}})
		require.NoError(t, err)
	}
	pub("o1", "charge 10")
	pub("o1", "charge 99") // same key, another body
	pub("o2", "fails once")
	pub("o1", "charge 10") // a duplicate
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results["charge 10"]) == 2 && len(results["charge 99"]) == 1 && len(results["fails once"]) == 2
	}, 30*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []idemmsg.Action{idemmsg.Ack, idemmsg.Ack}, results["charge 10"])
	assert.Equal(t, []idemmsg.Action{idemmsg.Reject}, results["charge 99"])
	assert.Equal(t, []idemmsg.Action{idemmsg.Retry, idemmsg.Ack}, results["fails once"])
	assert.ElementsMatch(t, []string{"charge 10", "fails once", "fails once"}, runs)
	mu.Unlock()
	assert.Eventually(t, func() bool { // acks travel asynchronously
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending+int(info.NumPending) == 0
	}, 10*time.Second, 20*time.Millisecond, "every message answered for good")
	mu.Lock()
}
