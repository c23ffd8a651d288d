package natsstore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/lease"
)

// scanned is one bucket entry as a scan reads it.
type scanned struct {
	key      string // KV key
	rev      uint64 // revision: the message's stream sequence
	op       jetstream.KeyValueOp
	value    []byte // the record, when the scan reads values
	hasValue bool   // false from a headers-only scan

	expires    int64 // the record's ExpiresAt, from its expiresHeader
	hasExpires bool
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
// the consumer is made, holding the stream while claims wait. A clean-up
// pass's consumer is headers-only: the server sends each message's headers
// (the key's operation, the record's expiry) without its body.
type consumerScan struct {
	stream      jetstream.Stream
	cons        jetstream.Consumer
	prefix      string // "$KV.<bucket>."
	lastSeq     uint64
	headersOnly bool
	bodies      *atomic.Int64 // counts the message bodies received
	done        bool
}

// newConsumerScan starts a scan of the bucket whose stream is stream;
// headersOnly leaves the records out (a clean-up pass), else each entry
// carries its value (a listing).
func newConsumerScan(ctx context.Context, stream jetstream.Stream, info *jetstream.StreamInfo, headersOnly bool, bodies *atomic.Int64) (scanner, error) {
	bucket := strings.TrimPrefix(info.Config.Name, "KV_")
	if info.State.Msgs == 0 {
		return &consumerScan{done: true}, nil
	}
	desc := "idem clean-up pass"
	if !headersOnly {
		desc = "idem listing"
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       desc,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Replicas:          1,
		HeadersOnly:       headersOnly,
	})
	if err != nil {
		return nil, &storekit.StoreError{Op: "purge", Err: err}
	}
	return &consumerScan{stream: stream, cons: cons, prefix: "$KV." + bucket + ".", lastSeq: info.State.LastSeq, headersOnly: headersOnly, bodies: bodies}, nil
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
		return nil, &storekit.StoreError{Op: "purge", Err: err}
	}
	var out []scanned
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		if len(m.Data()) > 0 {
			c.bodies.Add(1)
		}
		if key, ok := strings.CutPrefix(m.Subject(), c.prefix); ok {
			h := m.Headers()
			e := scanned{key: key, rev: md.Sequence.Stream, op: entryOp(h)}
			if !c.headersOnly {
				e.value, e.hasValue = m.Data(), true
			}
			e.expires, e.hasExpires = headerExpiry(h)
			out = append(out, e)
		}
		if md.NumPending == 0 || md.Sequence.Stream >= c.lastSeq {
			c.done = true
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
		return out, &storekit.StoreError{Op: "purge", Err: err} // not done: the caller may try again
	}
	if len(out) == 0 {
		c.done = true // nothing left
	}
	return out, nil
}

// withValues goes on from the stream sequence seq with the entries'
// values: the headers-only consumer is replaced by one that starts at seq
// and delivers the records too.
func (c *consumerScan) withValues(ctx context.Context, seq uint64) error {
	old := c.cons.CachedInfo().Name
	cons, err := c.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       "idem clean-up pass",
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       seq,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return &storekit.StoreError{Op: "purge", Err: err}
	}
	_ = c.stream.DeleteConsumer(ctx, old) // else the server drops it after a minute idle
	c.cons, c.headersOnly, c.done = cons, false, seq > c.lastSeq
	return nil
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
// bucket's stream: a KV watch delivers every entry with its value.
type watchScan struct {
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
	bodies *atomic.Int64 // counts the values received
}

func newWatchScan(ctx context.Context, kv KeyValue, bodies *atomic.Int64) (scanner, error) {
	wctx, cancel := context.WithCancel(ctx)
	w, err := kv.Watch(wctx, ">")
	if err != nil {
		cancel()
		return nil, &storekit.StoreError{Op: "purge", Err: err}
	}
	return &watchScan{w: w, cancel: cancel, bodies: bodies}, nil
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
				return out, false, &storekit.StoreError{Op: "purge", Err: errors.New("watch of the bucket ended")}
			}
			if e == nil { // the last entry that was in the bucket when the pass began
				return out, true, nil
			}
			if len(e.Value()) > 0 {
				s.bodies.Add(1)
			}
			out = append(out, scanned{key: e.Key(), rev: e.Revision(), op: e.Operation(), value: e.Value(), hasValue: true})
		}
	}
	return out, false, nil
}

func (s *watchScan) stop() {
	_ = s.w.Stop()
	s.cancel()
}
