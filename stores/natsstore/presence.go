package natsstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idem-go/idem/lease"
	"github.com/idem-go/idem/storekit"
)

// A process's presence on a bucket is a core NATS subscription to a
// subject of its own (presencePrefix, the bucket's name and a random
// token) that answers every request on it at once. The server drops the
// subscription when the connection ends, however the process dies, and a
// request to a subject nobody listens on is answered "no responders" at
// once: a claim that meets an in-progress record of another process asks
// the record owner's subject, and takes the claim over when nobody is
// there. A process that is alive but does not answer (paused, busy) lets
// the request time out: that says nothing, and the threshold decides.

// presencePrefix starts every presence subject. It is outside "$KV.", so
// a request on it never reaches the bucket's stream.
const presencePrefix = "_IDEM.owner."

// askTimeout bounds a claim's request to an owner's subject: a live
// process answers in a round trip, a dead one's server answers "no
// responders" in one, and a request that times out counts as alive.
const askTimeout = time.Second

// subscribeTimeout bounds the flush that makes sure the server holds a
// new presence subscription before its token names a claim.
const subscribeTimeout = 5 * time.Second

// errNoHeaders is why a connection to a server without headers support
// has no presence: such a server never answers "no responders".
var errNoHeaders = errors.New("the server does not support headers, so it cannot answer \"no responders\"")

// presenceSubject is the subject of the process whose token is token on
// the bucket.
func presenceSubject(bucket, token string) string {
	return presencePrefix + bucket + "." + token
}

// presenceKey names a presence: one per connection and bucket.
type presenceKey struct {
	nc     *nats.Conn
	bucket string
}

// presence is this process's subscription on one connection for one
// bucket, shared by every Store on them.
type presence struct {
	mu    sync.Mutex
	token string
	sub   *nats.Subscription
}

// presences holds this process's presence per connection and bucket.
// An entry lives as long as the process; its subscription as long as the
// connection.
var presences sync.Map // presenceKey -> *presence

// start returns the presence's token, subscribing first if it has no
// live subscription (none yet, or its connection was closed: a new token
// then, since the old one is gone for everyone). It returns only once
// the server has the subscription.
func (p *presence) start(nc *nats.Conn, bucket string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sub != nil && p.sub.IsValid() {
		return p.token, nil
	}
	if !nc.HeadersSupported() {
		return "", errNoHeaders
	}
	token := lease.Token()
	sub, err := nc.Subscribe(presenceSubject(bucket, token), func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		return "", err
	}
	if err := nc.FlushTimeout(subscribeTimeout); err != nil {
		_ = sub.Unsubscribe()
		return "", err
	}
	p.token, p.sub = token, sub
	return token, nil
}

// Owner implements storekit.Presence: this process's token on the
// Store's connection and bucket, subscribed to (and the subscription
// flushed to the server) on first use. It is "" when the Store has no
// connection (a bucket given without its JetStream context, and no
// WithConn) or cannot subscribe; its claims are then taken over after
// the threshold only. A failure is logged, and the next call tries again.
func (s *Store) Owner() string {
	if s.nc == nil || s.bucket == "" {
		return ""
	}
	v, _ := presences.LoadOrStore(presenceKey{s.nc, s.bucket}, &presence{})
	token, err := v.(*presence).start(s.nc, s.bucket)
	if err != nil {
		s.logger.Warn("natsstore: no presence: a dead owner's claims are taken over after the takeover threshold only",
			"bucket", s.bucket, "err", err)
		return ""
	}
	return token
}

// OwnerLiveness implements storekit.LivenessChecker: Gone when the
// server answers "no responders" on owner's subject, Alive when the owner
// answers or lets the request time out (its subscription is there; a
// paused process does not answer), LivenessUnknown when the Store has no
// connection or owner has no token. Any other failure is an error.
func (s *Store) OwnerLiveness(ctx context.Context, owner string) (storekit.Liveness, error) {
	return s.liveness(ctx, storekit.OwnerToken(owner))
}

// liveness asks token's subject, once, for at most askTimeout.
func (s *Store) liveness(ctx context.Context, token string) (storekit.Liveness, error) {
	if s.nc == nil || s.bucket == "" || !isToken(token) || !s.nc.HeadersSupported() {
		return storekit.LivenessUnknown, nil
	}
	actx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	_, err := s.nc.RequestWithContext(actx, presenceSubject(s.bucket, token), nil)
	switch {
	case err == nil:
		return storekit.Alive, nil
	case errors.Is(err, nats.ErrNoResponders):
		return storekit.Gone, nil
	case ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)):
		return storekit.Alive, nil
	}
	return storekit.LivenessUnknown, &storekit.StoreError{Op: "owner", Err: fmt.Errorf("ask %s: %w", token, err)}
}

// ownerGone is the claim's check (storekit.DecideClaimGone): gone only
// on "no responders"; an answer, a timeout or any error is not gone.
func (s *Store) ownerGone(ctx context.Context, token string) bool {
	l, _ := s.liveness(ctx, token)
	return l == storekit.Gone
}

// isToken reports whether t is a presence token: 32 lower-case hex
// digits (lease.Token), so a subject made of it has no wildcard.
func isToken(t string) bool {
	if len(t) != 32 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

var (
	_ storekit.Presence        = (*Store)(nil)
	_ storekit.LivenessChecker = (*Store)(nil)
)
