package natsstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/lease"
)

// scanned is one bucket entry as a clean-up pass reads it.
type scanned struct {
	key   string // KV key
	rev   uint64 // revision: the message's stream sequence
	op    jetstream.KeyValueOp
	value []byte
}

// scanner reads a bucket's entries (the last message of every key) once,
// in stream order, a chunk at a time; done is true with the last chunk.
type scanner interface {
	next(ctx context.Context) (chunk []scanned, done bool, err error)
	stop()
}

// scanChunk is how many entries a pass reads at a time: a pull of this
// many messages is all the pass has in flight on the connection it shares
// with the store's calls, so their replies never queue behind a flood.
var scanChunk = 100

// consumerScan reads the bucket through one pull consumer on its stream
// (every message, no filter, no acknowledgements: with history 1 each
// message is a key's last), scanChunk messages per request, up to the
// stream's last sequence when the pass began. It is made once per pass
// and deleted after (the server drops it after a minute idle if the
// deletion is lost). Neither a filter nor deliver-last-per-subject: on
// nats-server 2.9 either makes the server scan the stream's subjects when
// the consumer is made, holding the stream while claims wait.
type consumerScan struct {
	stream  jetstream.Stream
	cons    jetstream.Consumer
	prefix  string // "$KV.<bucket>."
	lastSeq uint64
	done    bool
}

func newConsumerScan(ctx context.Context, stream jetstream.Stream, info *jetstream.StreamInfo) (scanner, error) {
	bucket := strings.TrimPrefix(info.Config.Name, "KV_")
	if info.State.Msgs == 0 {
		return &consumerScan{done: true}, nil
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       "idem clean-up pass",
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return nil, &idem.StoreError{Op: "purge", Err: err}
	}
	return &consumerScan{stream: stream, cons: cons, prefix: "$KV." + bucket + ".", lastSeq: info.State.LastSeq}, nil
}

func (c *consumerScan) next(ctx context.Context) ([]scanned, bool, error) {
	if c.done {
		return nil, true, nil
	}
	// A consumer just made on a replicated stream may not answer its first
	// pulls yet ("no responders"): try again for a few seconds.
	wait := 20 * time.Millisecond
	for try := 1; ; try++ {
		out, err := c.fetch()
		if !errors.Is(err, nats.ErrNoResponders) || len(out) > 0 || try == 10 {
			return out, c.done, err
		}
		wait = min(2*wait, 500*time.Millisecond)
		if err := lease.Sleep(ctx, lease.Jitter(wait)); err != nil {
			return nil, false, err
		}
	}
}

// fetch pulls the next chunk.
func (c *consumerScan) fetch() ([]scanned, error) {
	batch, err := c.cons.FetchNoWait(scanChunk)
	if err != nil {
		return nil, &idem.StoreError{Op: "purge", Err: err}
	}
	var out []scanned
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		op := jetstream.KeyValuePut
		switch m.Headers().Get("KV-Operation") {
		case "DEL":
			op = jetstream.KeyValueDelete
		case "PURGE":
			op = jetstream.KeyValuePurge
		}
		if key, ok := strings.CutPrefix(m.Subject(), c.prefix); ok {
			out = append(out, scanned{key: key, rev: md.Sequence.Stream, op: op, value: m.Data()})
		}
		if md.NumPending == 0 || md.Sequence.Stream >= c.lastSeq {
			c.done = true
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
		return out, &idem.StoreError{Op: "purge", Err: err} // not done: the caller may try again
	}
	if len(out) == 0 {
		c.done = true // nothing left
	}
	return out, nil
}

func (c *consumerScan) stop() {
	if c.cons == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.stream.DeleteConsumer(ctx, c.cons.CachedInfo().Name)
}

// watchScan reads the bucket through a KV watch, for a Store without the
// bucket's stream.
type watchScan struct {
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
}

func newWatchScan(ctx context.Context, kv KeyValue) (scanner, error) {
	wctx, cancel := context.WithCancel(ctx)
	w, err := kv.Watch(wctx, ">")
	if err != nil {
		cancel()
		return nil, &idem.StoreError{Op: "purge", Err: err}
	}
	return &watchScan{w: w, cancel: cancel}, nil
}

func (s *watchScan) next(ctx context.Context) ([]scanned, bool, error) {
	var out []scanned
	for len(out) < scanChunk {
		select {
		case <-ctx.Done():
			return out, false, ctx.Err()
		case e, ok := <-s.w.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return out, false, err
				}
				return out, false, &idem.StoreError{Op: "purge", Err: errors.New("watch of the bucket ended")}
			}
			if e == nil { // the last entry that was in the bucket when the pass began
				return out, true, nil
			}
			out = append(out, scanned{key: e.Key(), rev: e.Revision(), op: e.Operation(), value: e.Value()})
		}
	}
	return out, false, nil
}

func (s *watchScan) stop() {
	_ = s.w.Stop()
	s.cancel()
}
