package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/lease"
	"github.com/idem-go/idem/storekit"
)

var (
	_ storekit.Presence        = (*Store)(nil)
	_ storekit.LivenessChecker = (*Store)(nil)
)

// Presence. Each process holds one sharded Pub/Sub subscription (SSUBSCRIBE)
// per client and prefix, on its presence channel, prefix{token}:owner,
// where token is drawn when the subscription is made. Its claims name the
// token (Record.Owner). The subscription dies with its connection, so when
// the process dies the channel has no subscriber (PUBSUB SHARDNUMSUB says
// 0) and a claim that meets its in-progress record takes it over at once.
// The channel's hash tag is the token: on a Cluster it lives on one shard,
// and the subscription is one connection to that shard's master.

// presenceRetry is how long the presence waits before it subscribes again
// after a failure.
const presenceRetry = time.Second

// subscribe makes an empty subscription on the server that holds the
// channel ch; again is set when an earlier one failed or ended.
type subscribe func(ch string, again bool) (*redis.PubSub, error)

// shardNumSubber asks a server how many subscribers sharded channels have.
type shardNumSubber interface {
	PubSubShardNumSub(ctx context.Context, channels ...string) *redis.MapStringIntCmd
}

// presence is one subscription on a presence channel, shared by the stores
// of a process on one client and prefix.
type presence struct {
	key       presenceKey
	token     string
	channel   string
	refs      int // under presencesMu
	confirmed atomic.Bool
	refused   atomic.Bool
	first     chan struct{} // closed at the first confirmation or refusal
	firstOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
}

type presenceKey struct {
	client Client
	prefix string
	own    *Store // set for a store that does not share its presence
}

var (
	presencesMu sync.Mutex
	presences   = map[presenceKey]*presence{}
)

// Owner implements storekit.Presence: this process's token on the store's
// client and prefix, or "" when the deployment cannot hold a presence
// (see presenceSubscriber; the reason is logged once). The first call
// subscribes and waits up to the watch timeout for the server's
// confirmation; until it comes, claims carry no token (they are taken
// over only after the takeover threshold).
func (s *Store) Owner() string {
	s.presOnce.Do(func() {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return // a closed store holds no presence
		}
		sub, why := s.presenceSubscriber()
		if sub == nil {
			slog.Default().Warn("redisstore: no presence: the claims of this process are taken over only after the takeover threshold", "reason", why)
			return
		}
		p := s.joinPresence(sub)
		s.pres.Store(p)
		t := time.NewTimer(s.watchTimeout)
		defer t.Stop()
		select {
		case <-p.first:
		case <-t.C:
			slog.Default().Warn("redisstore: presence subscription not confirmed yet: until it is, the claims of this process are taken over only after the takeover threshold",
				"channel", p.channel, "waited", s.watchTimeout)
		}
		if !p.refused.Load() {
			s.ownerTok = p.token
		}
	})
	return s.ownerTok
}

// presenceSubscriber returns what subscribes to this store's presence
// channel, or nil and why the deployment cannot hold a presence: a client
// of a type the store does not know, a ClusterClient that reads from
// replicas (its subscriptions go to replicas, which PUBSUB SHARDNUMSUB on
// the master does not count).
func (s *Store) presenceSubscriber() (subscribe, string) {
	switch c := s.client.(type) {
	case *redis.Client:
		return func(string, bool) (*redis.PubSub, error) { return c.SSubscribe(context.Background()), nil }, ""
	case *redis.ClusterClient:
		if o := c.Options(); o.ReadOnly || o.RouteByLatency || o.RouteRandomly {
			return nil, "a ClusterClient that reads from replicas subscribes on replicas"
		}
		return func(_ string, again bool) (*redis.PubSub, error) {
			if again {
				c.ReloadState(context.Background()) // the channel's slot may have moved
			}
			return c.SSubscribe(context.Background()), nil
		}, ""
	case shardRouter:
		return func(ch string, _ bool) (*redis.PubSub, error) {
			shard, err := c.GetShardClientForKey(ch)
			if err != nil {
				return nil, err
			}
			return shard.SSubscribe(context.Background()), nil
		}, ""
	}
	return nil, fmt.Sprintf("client %T is not a *redis.Client, *redis.ClusterClient or *redis.Ring", s.client)
}

// joinPresence returns the presence of the store's client and prefix,
// subscribing when this store is the first to use it.
func (s *Store) joinPresence(sub subscribe) *presence {
	k := presenceKey{client: s.client, prefix: s.prefix}
	if s.ownPresence || !reflect.TypeOf(s.client).Comparable() {
		k = presenceKey{own: s}
	}
	presencesMu.Lock()
	defer presencesMu.Unlock()
	if p := presences[k]; p != nil {
		p.refs++
		return p
	}
	tok := lease.Token()
	ctx, cancel := context.WithCancel(context.Background())
	p := &presence{
		key: k, token: tok, channel: s.presenceChannel(tok), refs: 1,
		first: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
	}
	presences[k] = p
	go p.run(ctx, sub, s.health, s.watchTimeout)
	return p
}

// leavePresence drops the store's use of its presence; the last store to
// leave ends the subscription (the process's claims are then taken over at
// once by the next claim that meets them).
func (s *Store) leavePresence() {
	p := s.pres.Swap(nil)
	if p == nil {
		return
	}
	presencesMu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(presences, p.key)
	}
	presencesMu.Unlock()
	if last {
		p.cancel()
		<-p.done
	}
}

// presenceChannel is the presence channel of token: the prefix, the token
// as a hash tag, and ":owner".
func (s *Store) presenceChannel(token string) string {
	return s.prefix + "{" + token + "}:owner"
}

// settle records the first outcome of the subscription.
func (p *presence) settle(refused bool) {
	p.firstOnce.Do(func() {
		p.refused.Store(refused)
		if !refused {
			p.confirmed.Store(true)
		}
		close(p.first)
	})
}

// run holds the subscription until ctx ends: it subscribes, and subscribes
// again on a new connection when the server ends the subscription (the
// channel's slot moved to another shard). A server that refuses SSUBSCRIBE
// at the first try (a proxy, a server before Redis 7.0) ends it: the
// store falls back to the takeover threshold.
func (p *presence) run(ctx context.Context, sub subscribe, health, timeout time.Duration) {
	defer close(p.done)
	defer p.settle(false)
	for tries := 0; ctx.Err() == nil; tries++ {
		if tries > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(presenceRetry):
			}
		}
		ps, err := sub(p.channel, tries > 0)
		if err != nil {
			continue
		}
		err = p.hold(ctx, ps, health, timeout)
		_ = ps.Close()
		var rerr redis.Error
		if err != nil && errors.As(err, &rerr) && !p.confirmed.Load() {
			slog.Default().Warn("redisstore: the server refused the presence subscription (a proxy, or a server before Redis 7.0): the claims of this process are taken over only after the takeover threshold",
				"channel", p.channel, "error", err)
			p.settle(true)
			return
		}
	}
}

// hold subscribes ps to the channel, waits for the confirmation, then
// receives until ctx ends or the server ends the subscription; go-redis
// reconnects and subscribes again after a connection error by itself.
func (p *presence) hold(ctx context.Context, ps *redis.PubSub, health, timeout time.Duration) error {
	if err := ps.SSubscribe(ctx, p.channel); err != nil {
		return err
	}
	m, err := ps.ReceiveTimeout(ctx, timeout)
	if err != nil {
		return err
	}
	if sb, ok := m.(*redis.Subscription); !ok || sb.Kind != "ssubscribe" {
		return fmt.Errorf("unexpected reply %v", m)
	}
	p.settle(false)
	ch := ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(health))
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			if sb, isSub := m.(*redis.Subscription); isSub && sb.Kind == "sunsubscribe" {
				return nil // the slot moved: subscribe again, on its new shard
			}
		}
	}
}

// claimOwner is the owner a claim records: req.Owner, without this
// process's token while the server has not confirmed its subscription.
func (s *Store) claimOwner(owner string) string {
	p := s.pres.Load()
	if p == nil || p.confirmed.Load() || !strings.HasSuffix(owner, p.token) {
		return owner
	}
	return strings.TrimSuffix(owner, p.token)
}

// scriptChecks reports whether the claim script asks PUBSUB SHARDNUMSUB
// itself: on a standalone or Sentinel client, whose presence channels live
// on the server that runs the script. On a Cluster or a Ring a channel
// lives on its own shard, which the client asks (goneNonce).
func (s *Store) scriptChecks() bool {
	_, ok := s.client.(*redis.Client)
	return ok
}

// channelNode is the server that holds the presence channel ch, or nil when
// the store cannot tell.
func (s *Store) channelNode(ctx context.Context, ch string) (shardNumSubber, error) {
	switch c := s.client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, ch)
		if err != nil {
			return nil, err
		}
		return node, nil
	case shardRouter:
		node, err := c.GetShardClientForKey(ch)
		if err != nil {
			return nil, err
		}
		return node, nil
	}
	return nil, nil
}

// OwnerLiveness implements storekit.LivenessChecker: the owner's presence
// channel has a subscriber (Alive) or none (Gone); Unknown for an owner
// without a token, a client the store cannot route, or a server that
// refuses PUBSUB SHARDNUMSUB (a proxy).
func (s *Store) OwnerLiveness(ctx context.Context, owner string) (storekit.Liveness, error) {
	tok := storekit.OwnerToken(owner)
	if !isToken(tok) {
		return storekit.LivenessUnknown, nil
	}
	ch := s.presenceChannel(tok)
	node, err := s.channelNode(ctx, ch)
	if err != nil {
		return storekit.LivenessUnknown, connErr("owner liveness", err)
	}
	if node == nil {
		return storekit.LivenessUnknown, nil
	}
	n, err := node.PubSubShardNumSub(ctx, ch).Result()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) {
			return storekit.LivenessUnknown, nil
		}
		return storekit.LivenessUnknown, connErr("owner liveness", err)
	}
	if n[ch] > 0 {
		return storekit.Alive, nil
	}
	return storekit.Gone, nil
}

// goneNonce is, for a claim that met old (the value its SET NX GET found)
// on a deployment whose claim script cannot ask for the owner's presence
// itself, the nonce of old when it is another owner's in-progress claim
// of the same payload whose presence channel has no subscriber; "" when
// it is not, or the store cannot tell. It costs one round trip, to the
// channel's shard, and only then; the claim script takes the record over
// only if it still carries that nonce and is not stale by then.
func (s *Store) goneNonce(ctx context.Context, req storekit.ClaimRequest, old string) string {
	if s.scriptChecks() || len(old) < headerLen || old[offStatus] != 'P' {
		return ""
	}
	h, err := decodeHeader(old, func(string, ...any) error { return errCorrupt })
	if err != nil {
		return ""
	}
	at := int64(headerLen)
	nonce := old[at : at+h.lens[0]]
	hash := old[at+h.lens[0] : at+h.lens[0]+h.lens[1]]
	owner, ok := ownerAt(old, at+h.lens[0]+h.lens[1]+h.lens[2]+h.lens[3]+h.lens[4]+h.lens[5])
	if !ok || nonce == req.Nonce || hash != req.PayloadHash || owner == "" || owner == req.Owner ||
		storekit.EarlierIncarnation(owner, req.Owner) {
		return ""
	}
	if l, err := s.OwnerLiveness(ctx, owner); err != nil || l != storekit.Gone {
		return ""
	}
	return nonce
}

var errCorrupt = errors.New("corrupt")

// isToken reports whether s is a presence token: 32 lower-case hex digits.
func isToken(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// checkArg is the claim script's presence check argument: "s" when the
// script asks PUBSUB SHARDNUMSUB itself, "n" when the client does.
func (s *Store) checkArg() string {
	if s.scriptChecks() {
		return "s"
	}
	return "n"
}

// ownerPoll is how often a waiter's store asks whether the owner of the
// claim it waits for is still present.
const ownerPoll = time.Second

// watchOwner wakes w when the presence of owner, the owner of the claim w
// waits for, is gone (asked every ownerPoll, one PUBSUB SHARDNUMSUB), so
// the waiter looks again and its claim takes the record over, instead of
// waiting for the Guard's next look. It returns the watch's stop function,
// which also ends this. Nothing is asked for an owner without a token or
// for this store's own.
func (s *Store) watchOwner(owner string, w *waiter, stop func()) func() {
	tok := storekit.OwnerToken(owner)
	if p := s.pres.Load(); !isToken(tok) || p != nil && p.token == tok {
		return stop
	}
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(ownerPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-w.c:
				return
			case <-s.ctx.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(s.ctx, ownerPoll)
			l, err := s.OwnerLiveness(ctx, owner)
			cancel()
			if err == nil && l == storekit.Gone {
				w.fire()
				return
			}
		}
	}()
	return func() {
		once.Do(func() { close(done) })
		stop()
	}
}
