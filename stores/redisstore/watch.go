package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"
	"github.com/redis/go-redis/v9"
)

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("redisstore: store closed")

// shardRouter is implemented by *redis.Ring: a Ring publishes on the shard
// that owns the key, so the store needs one subscription per shard.
type shardRouter interface {
	GetShardClientForKey(key string) (*redis.Client, error)
}

// Watch implements storekit.Watcher. The returned channel is closed when the
// record for key may have changed after Watch returned: a complete, release,
// takeover or delete published on its channel, the subscription connection
// broke (changes may have been missed), or the store was closed. stop ends
// the watch; it is safe to call more than once.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := checked("watch", key, storekit.ValidateKey(key)); err != nil {
		return nil, nil, err
	}
	ch := s.Channel(key)
	h, err := s.hubFor(ch)
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: watch %s: %w", key, err)
	}
	w := &waiter{c: make(chan struct{})}
	ready, err := h.add(ch, w)
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: watch %s: %w", key, err)
	}
	stop := func() { h.remove(ch, w) }
	timer := time.NewTimer(s.watchTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		// The subscription exists: mark the record watched, so its
		// completion publishes (completions of unwatched records do not).
		// A change that landed before the mark is found by the caller's
		// next look, one after it is published to this subscription.
		owner, err := s.mark(ctx, key)
		if err != nil {
			stop()
			return nil, nil, err
		}
		if owner != "" {
			stop = s.watchOwner(owner, w, stop)
		}
		return w.c, stop, nil
	case <-w.c:
		// Woken before the subscription was confirmed: the connection
		// failed or the store was closed.
		return nil, nil, fmt.Errorf("redisstore: watch %s: subscription connection lost", key)
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("redisstore: watch %s: %w", key, context.Cause(ctx))
	case <-timer.C:
		stop()
		return nil, nil, fmt.Errorf("redisstore: watch %s: subscription not confirmed within %v", key, s.watchTimeout)
	}
}

// mark runs the watch script: a live in-progress record of key is marked
// watched. It returns the record's owner, if it names one.
func (s *Store) mark(ctx context.Context, key string) (owner string, err error) {
	v, _, err := s.run(ctx, "watch", scriptWatch, key, false, key)
	if err != nil {
		return "", err
	}
	if str, ok := v.(string); ok && str != "" {
		switch str[0] {
		case 'X':
			return "", corruptReply(key, str)
		case 'O':
			return str[1:], nil
		}
	}
	return "", nil
}

// hubFor returns the shared subscription that hears channel ch, creating
// it (subscribed to ch) when needed.
func (s *Store) hubFor(ch string) (*hub, error) {
	id := ""
	var subscriber subscriber = s.client
	if r, ok := s.client.(shardRouter); ok {
		shard, err := r.GetShardClientForKey(ch)
		if err != nil {
			return nil, err
		}
		id, subscriber = shard.Options().Addr, shard
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if h := s.hubs[id]; h != nil {
		return h, nil
	}
	// An empty subscription does no I/O; add subscribes, and the receive
	// loop connects and reads the confirmations.
	h := &hub{s: s, subscriber: subscriber, subs: make(map[string]*sub), ps: subscriber.Subscribe(s.ctx)}
	s.hubs[id] = h
	s.wg.Add(1)
	go h.loop()
	return h, nil
}

// subscriber opens subscriptions on the server (or servers) a hub listens to.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

type waiter struct {
	c    chan struct{}
	once sync.Once
}

func (w *waiter) fire() { w.once.Do(func() { close(w.c) }) }

// sub is one subscribed channel of a hub.
type sub struct {
	confirmed bool
	ready     chan struct{} // closed once the server confirmed the subscription
	waiters   map[*waiter]struct{}
}

func newSub() *sub {
	return &sub{ready: make(chan struct{}), waiters: make(map[*waiter]struct{})}
}

// hub is one subscription connection multiplexing every watched channel
// that lives on one server (or, for a Cluster, on all of them).
type hub struct {
	s          *Store
	subscriber subscriber
	// ps is replaced (by the receive loop, under opMu and mu) when its
	// connection stops answering; the loop reads it without a lock, add
	// and sweep under opMu, close under mu.
	ps *redis.PubSub

	// opMu orders changes of subs together with the SUBSCRIBE or
	// UNSUBSCRIBE they send, so the server's view follows subs.
	opMu   sync.Mutex
	mu     sync.Mutex
	subs   map[string]*sub
	closed bool
}

// add registers w for ch, subscribing when ch is new, and returns the
// channel that is closed once the subscription is confirmed.
func (h *hub) add(ch string, w *waiter) (<-chan struct{}, error) {
	h.opMu.Lock()
	defer h.opMu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	sb := h.subs[ch]
	isNew := sb == nil
	if isNew {
		sb = newSub()
		h.subs[ch] = sb
	}
	sb.waiters[w] = struct{}{}
	ready := sb.ready
	h.mu.Unlock()
	if isNew {
		// When the write fails, go-redis reconnects at once and
		// resubscribes the channels it knew before this call, which do not
		// include ch yet (it adds ch to its set only afterwards). So send
		// it once more: on the new connection, or, if that fails too, ch is
		// in the set by now and every later reconnect resubscribes it. A
		// failed dial needs no retry: the next connection, whoever makes
		// it, subscribes ch.
		if err := h.ps.Subscribe(h.s.ctx, ch); err != nil && !isDial(err) {
			_ = h.ps.Subscribe(h.s.ctx, ch)
		}
	}
	return ready, nil
}

func (h *hub) remove(ch string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sb := h.subs[ch]; sb != nil {
		delete(sb.waiters, w)
	}
}

// deliver wakes the waiters of ch after a message.
func (h *hub) deliver(ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sb := h.subs[ch]; sb != nil {
		for w := range sb.waiters {
			w.fire()
		}
		clear(sb.waiters)
	}
}

// confirm marks ch subscribed. A confirmation of a channel that was already
// confirmed is a resubscription after a reconnect the loop did not see:
// messages may have been missed, so its waiters are woken.
func (h *hub) confirm(ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sb := h.subs[ch]
	if sb == nil {
		return
	}
	if !sb.confirmed {
		sb.confirmed = true
		close(sb.ready)
		return
	}
	for w := range sb.waiters {
		w.fire()
	}
	clear(sb.waiters)
}

// lost wakes every waiter after the connection failed and marks every
// channel unconfirmed until go-redis has resubscribed it.
func (h *hub) lost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sb := range h.subs {
		for w := range sb.waiters {
			w.fire()
		}
		clear(sb.waiters)
		if sb.confirmed {
			sb.confirmed = false
			sb.ready = make(chan struct{})
		}
	}
}

// sweep unsubscribes confirmed channels nobody watches any more.
func (h *hub) sweep() {
	h.opMu.Lock()
	defer h.opMu.Unlock()
	h.mu.Lock()
	var idle []string
	for ch, sb := range h.subs {
		if sb.confirmed && len(sb.waiters) == 0 {
			idle = append(idle, ch)
			delete(h.subs, ch)
		}
	}
	h.mu.Unlock()
	if len(idle) > 0 {
		_ = h.ps.Unsubscribe(h.s.ctx, idle...)
	}
}

// renew replaces the subscription connection, which did not answer a ping
// within a health interval: go-redis reconnects only after an error, and a
// black-holed connection gives none (writes succeed, reads time out). The
// old connection's watchers are woken, as after any loss, and every channel
// is subscribed again on a new connection.
func (h *hub) renew() {
	h.opMu.Lock()
	defer h.opMu.Unlock()
	h.lost()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	chans := make([]string, 0, len(h.subs))
	for ch := range h.subs {
		chans = append(chans, ch)
	}
	old := h.ps
	h.ps = h.subscriber.Subscribe(h.s.ctx) // no I/O without channels
	h.mu.Unlock()
	_ = old.Close()
	if len(chans) > 0 {
		// A failure leaves chans in the new subscription's set: the
		// receive loop's reconnect subscribes them.
		_ = h.ps.Subscribe(h.s.ctx, chans...)
	}
}

func (h *hub) close() error {
	h.mu.Lock()
	h.closed = true
	ps := h.ps
	for _, sb := range h.subs {
		for w := range sb.waiters {
			w.fire()
		}
		clear(sb.waiters)
	}
	h.mu.Unlock()
	return ps.Close()
}

func isDial(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// loop reads the subscription until the store is closed.
func (h *hub) loop() {
	defer h.s.wg.Done()
	ctx := h.s.ctx
	backoff := 10 * time.Millisecond
	lastSweep := time.Now()
	pinged := false // a ping is unanswered: nothing was read since it was sent
	for {
		msg, err := h.ps.ReceiveTimeout(ctx, h.s.health)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if isTimeout(err) {
				if pinged {
					// No reply to the ping within a health interval: the
					// connection is silently dead.
					pinged = false
					h.renew()
					continue
				}
				// Idle: prove the connection is alive (the pong, or the
				// failure, comes back through ReceiveTimeout).
				if perr := h.ps.Ping(ctx); perr != nil {
					h.lost()
				} else {
					pinged = true
				}
				h.sweep()
				lastSweep = time.Now()
				continue
			}
			pinged = false
			h.lost()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			h.deliver(m.Channel)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.confirm(m.Channel)
			}
		}
		if time.Since(lastSweep) > h.s.health {
			h.sweep()
			lastSweep = time.Now()
		}
	}
}
