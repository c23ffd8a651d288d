// Package redisstore is an idem.Store on Redis (github.com/redis/go-redis/v9):
// standalone, Sentinel (redis.NewFailoverClient), Ring or Cluster.
//
// # Layout
//
// A record is one Redis string at <prefix>{<storage key>}: a fixed-width
// ASCII header of 122 bytes, then the variable parts. The header is "R2"
// (the encoding version), a status byte (P in_progress, C completed, F
// failed), a flags byte (has result, has error, relative times), expires_at,
// heartbeat_at, started_at, completed_at, attempt and the owner's takeover
// threshold as 13-digit zero-padded decimals (times in Unix ms), and the
// lengths of the nonce, payload hash, key, result, error message and error
// type; the variable parts follow in that order. lua/common.lua lists the
// offsets. A script reads the few header fields it needs with string.sub and
// checks the whole header with one anchored pattern before it writes; the Go
// client decodes the rest. A later encoding changes the version bytes, so it
// can read this one. The hash tag makes every key of one operation (the
// record and its change channel <prefix>{<storage key>}:changed) hash to the
// same Cluster slot and Ring shard.
//
// A fresh claim is written by the client, which does not know the server's
// time: its times are relative (flag +4). expires_at holds the lease,
// completed_at the retention, heartbeat_at and started_at zero, and the key
// is written with PX lease + retention, so the server's clock fixes its
// PEXPIRETIME. The claim's absolute times follow from that: expires_at =
// PEXPIRETIME - retention, heartbeat_at = started_at = expires_at - lease.
// Every script and the Go decoder make such a record absolute before they
// look at it; a relative record on anything but a fresh claim, or on a key
// without an expiry, does not decode.
//
// # Atomicity, round trips and time
//
// Claim is one transaction of native commands: MULTI, SET key value NX GET
// PX lease+retention, PEXPIRETIME key, PTTL key, EXEC. When the key is
// absent the SET is the claim. When it holds a record, the SET writes
// nothing and returns it, and PEXPIRETIME - PTTL is the server's clock
// inside the same transaction (no other client's command runs between; the
// clock may have moved on by a moment since the SET, which only makes the
// answer below more cautious): when storekit.DecideClaim has nothing to
// write (a live completed or failed record, another caller's live claim
// that is not stale by its owner's threshold, or this nonce's own claim
// retried), the store answers with it. So a replay runs no script and costs
// the server about what a GET does. Everything else (a takeover, an expired
// record, a value that does not decode, a key of another type) goes to the
// claim script, a second round trip on paths where a call takes over
// anyway.
//
// Heartbeat, complete, release, get and delete are one embedded Lua script
// each (lua/*.lua, go:embed), run with EVALSHA and falling back to EVAL when
// the server does not have it cached: one round trip, one key. A fresh call
// is a claim and a complete (2 round trips); a replay is one claim (1). The
// scripts implement the rules of storekit.DecideClaim,
// storekit.ApplyHeartbeat, storekit.ApplyComplete and storekit.ApplyRelease
// natively. Now is the Redis server's clock (TIME in a script, PEXPIRETIME
// - PTTL in the claim's transaction), so clients with skewed clocks agree on
// expiry and staleness. Staleness is judged by the takeover threshold
// stored with the claim (the caller's only for a record that has none).
//
// Liveness is decided by the record's own expires_at, compared with the
// server's clock. The native expiry is garbage collection only: it is
// expires_at plus the retention (WithRetention, default one minute), so a
// record stays readable, and keeps its attempt number, for the retention
// after it stops counting. Release keeps the record with expires_at = now,
// so the fencing token (Attempt) stays monotonic across a release for as
// long as the record exists.
//
// # Replicated Redis
//
// Redis replicates asynchronously: a claim acknowledged by a master that
// dies before its replica received it is lost on failover, and a second
// caller would run fn again. WithReplicaAck(n, timeout) sends a WAIT n
// timeout in the same pipeline (the same connection, one round trip) as the
// claim's transaction (MULTI and EXEC then go by hand, so the WAIT follows
// EXEC) and the complete script. On a Cluster the pipeline goes to the
// key's master, so the WAIT counts the replicas of the node that took the
// write. A claim that fewer than n replicas acknowledged in time is released
// and Claim returns a *ReplicaAckError matching ErrNotReplicated, so the
// Guard fails the call without running fn. A completion that fewer than n
// replicas acknowledged returns an *idem.NotRecordedError wrapping a
// *ReplicaAckError, so the Guard returns the result together with that
// error (matching idem.ErrNotRecorded) at once. WAIT makes a write survive the
// failover of a master to an acknowledging replica; it does not make Redis
// strongly consistent (a replica that lost the race can still be promoted
// when more than n replicas exist and fewer acknowledged).
//
// # Retries
//
// go-redis retries a command after a network error. A claim whose first try
// was applied finds its own nonce and answers Claimed; a complete whose
// first try was applied finds its own nonce and succeeds again. So a lost
// reply never turns a caller into its own duplicate.
//
// # Push wake-ups
//
// Store implements idem.Watcher with pub/sub. The complete, release,
// takeover and delete scripts PUBLISH on the record's channel. The store
// keeps one shared subscription connection per Redis server it has to
// listen to (one for a standalone server or a Cluster, one per shard for a
// Ring) and multiplexes every watched key over it; Watch returns only after
// the server confirmed the subscription, so no publish after Watch returns
// is missed. When the subscription connection breaks, every watcher is woken
// (a spurious wake is safe: the Guard re-checks), and the connection is
// re-established and resubscribed by go-redis.
//
// On a Cluster the scripts use classic PUBLISH, which Redis Cluster
// broadcasts to every node, so one subscription on any node hears every key.
// Sharded pub/sub (SPUBLISH/SSUBSCRIBE) would keep each message on its
// slot's node, but go-redis binds a sharded subscription to the node of its
// first channel, so multiplexing keys would need one subscription per master
// plus resubscription on every slot migration. One small message per
// completion broadcast over the cluster bus is the cheaper trade at the
// publish rate of an idempotency store (one per completed call), and it
// keeps working through resharding.
//
// # Errors
//
// Redis failures are returned wrapped (errors.Is finds the go-redis error).
// A record that does not decode (malformed header, lengths that do not add
// up, another key, wrong type at the key, unknown version) is an
// *idem.CorruptRecordError, never a panic, and no script overwrites it. A
// nonce mismatch is idem.ErrLostOwnership. New reports an invalid option as
// an error matching idem.ErrInvalidOption.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
	"github.com/redis/go-redis/v9"
)

// Client is what the store needs from go-redis: running scripts and
// subscribing. *redis.Client (also from redis.NewFailoverClient),
// *redis.Ring and *redis.ClusterClient satisfy it.
type Client interface {
	redis.Scripter
	TxPipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// pipeliner is what WithReplicaAck needs from a standalone or Sentinel
// client: a pipeline on one connection.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

var (
	_ Client       = (*redis.Client)(nil)
	_ Client       = (*redis.Ring)(nil)
	_ Client       = (*redis.ClusterClient)(nil)
	_ idem.Store   = (*Store)(nil)
	_ idem.Watcher = (*Store)(nil)
)

var (
	//go:embed lua/common.lua
	srcCommon string
	//go:embed lua/claim.lua
	srcClaim string
	//go:embed lua/heartbeat.lua
	srcHeartbeat string
	//go:embed lua/complete.lua
	srcComplete string
	//go:embed lua/release.lua
	srcRelease string
	//go:embed lua/get.lua
	srcGet string
	//go:embed lua/delete.lua
	srcDelete string

	scriptClaim     = redis.NewScript(srcCommon + srcClaim)
	scriptHeartbeat = redis.NewScript(srcCommon + srcHeartbeat)
	scriptComplete  = redis.NewScript(srcCommon + srcComplete)
	scriptRelease   = redis.NewScript(srcCommon + srcRelease)
	scriptGet       = redis.NewScript(srcCommon + srcGet)
	scriptDelete    = redis.NewScript(srcCommon + srcDelete)
)

// Defaults.
const (
	DefaultRetention      = time.Minute
	DefaultWatchTimeout   = 5 * time.Second
	DefaultHealthInterval = 15 * time.Second
)

// ErrNotReplicated is matched by a *ReplicaAckError: a write the master
// applied was not acknowledged by the replicas WithReplicaAck asks for in
// time.
var ErrNotReplicated = errors.New("redisstore: write not acknowledged by enough replicas")

// ReplicaAckError says how many replicas acknowledged a write (Got) when
// WithReplicaAck asked for Want. It matches ErrNotReplicated. A claim
// returns it after releasing the claim; a completion returns it inside a
// permanent *idem.StoreError, so the Guard reports idem.ErrNotRecorded.
type ReplicaAckError struct {
	Op        string // "claim" or "complete"
	Key       string // storage key
	Want, Got int64
	Err       error // the WAIT failure, if WAIT itself failed
}

func (e *ReplicaAckError) Error() string {
	s := fmt.Sprintf("redisstore: %s %s: %d of %d replicas acknowledged the write", e.Op, e.Key, e.Got, e.Want)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes a ReplicaAckError match ErrNotReplicated.
func (e *ReplicaAckError) Is(target error) bool { return target == ErrNotReplicated }

// Unwrap returns the WAIT failure, if any.
func (e *ReplicaAckError) Unwrap() error { return e.Err }

// Option configures a Store. New checks every option and reports each
// invalid one as an *idem.OptionError matching idem.ErrInvalidOption.
type Option func(*config)

type config struct {
	prefix       string
	retention    time.Duration
	watchTimeout time.Duration
	health       time.Duration
	ackN         int
	ackTimeout   time.Duration
	errs         []error
}

func (c *config) invalid(option, format string, args ...any) {
	c.errs = append(c.errs, &idem.OptionError{Option: "redisstore." + option, Reason: fmt.Sprintf(format, args...)})
}

// WithPrefix puts prefix in front of every Redis key and channel of the
// store (default none: keys are {<storage key>}). It must not contain '{'
// or '}', which would move the hash tag.
func WithPrefix(prefix string) Option {
	return func(c *config) {
		if strings.ContainsAny(prefix, "{}") {
			c.invalid("WithPrefix", "prefix %q contains '{' or '}'", prefix)
			return
		}
		c.prefix = prefix
	}
}

// WithRetention sets how long past its expires_at a record is kept before
// Redis deletes it (native expiry = expires_at + d). Default
// DefaultRetention; it must not be negative. While a record is retained its
// attempt number, and so the fencing token, keeps counting up.
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithRetention", "retention must not be negative, got %v", d)
			return
		}
		c.retention = d
	}
}

// WithWatchTimeout bounds how long Watch waits for the server to confirm a
// new subscription before it gives up with an error (the Guard then polls).
// Default DefaultWatchTimeout; it must be positive.
func WithWatchTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithWatchTimeout", "timeout must be positive, got %v", d)
			return
		}
		c.watchTimeout = d
	}
}

// WithHealthInterval sets how often an idle subscription connection is
// pinged, so a silently dead connection is found and its watchers woken: a
// connection that does not answer a ping within the interval is replaced.
// Default DefaultHealthInterval; it must be positive.
func WithHealthInterval(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithHealthInterval", "interval must be positive, got %v", d)
			return
		}
		c.health = d
	}
}

// WithReplicaAck makes claim and complete wait until n replicas of the
// key's master hold the write (Redis WAIT n timeout, pipelined with the
// script on the same connection: no extra round trip, the call takes at
// most timeout longer). n must be at least 1 and timeout positive (WAIT's
// timeout is in milliseconds, so at least 1ms); a Ring is refused (its
// pipeline cannot pin WAIT to the key's shard). See the package doc for
// what happens when the replicas do not acknowledge.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("WithReplicaAck", "replica count must be at least 1, got %d", n)
		}
		if timeout < time.Millisecond {
			c.invalid("WithReplicaAck", "timeout must be at least 1ms, got %v", timeout)
		}
		c.ackN, c.ackTimeout = n, timeout
	}
}

// Store is an idem.Store and idem.Watcher on Redis. It is safe for
// concurrent use. Close stops its subscriptions; it does not close the
// client.
type Store struct {
	client       Client
	prefix       string
	retention    time.Duration
	retentionArg string
	watchTimeout time.Duration
	health       time.Duration
	ackN         int64
	ackTimeout   time.Duration

	mu     sync.Mutex
	hubs   map[string]*hub
	closed bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a store on client. It does no I/O. A nil client and every
// invalid option are reported, joined, each an *idem.OptionError matching
// idem.ErrInvalidOption.
func New(client Client, opts ...Option) (*Store, error) {
	c := config{
		retention:    DefaultRetention,
		watchTimeout: DefaultWatchTimeout,
		health:       DefaultHealthInterval,
	}
	if client == nil {
		c.invalid("New", "client is nil")
	}
	for _, o := range opts {
		if o == nil {
			c.invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	if c.ackN > 0 && client != nil {
		switch client.(type) {
		case *redis.ClusterClient:
		case *redis.Ring:
			c.invalid("WithReplicaAck", "not supported on a Ring")
		default:
			if _, ok := client.(pipeliner); !ok {
				c.invalid("WithReplicaAck", "client %T has no Pipeline method", client)
			}
		}
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	s := &Store{
		client:       client,
		prefix:       c.prefix,
		retention:    c.retention,
		retentionArg: ms(c.retention),
		watchTimeout: c.watchTimeout,
		health:       c.health,
		ackN:         int64(c.ackN),
		ackTimeout:   c.ackTimeout,
		hubs:         make(map[string]*hub),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the store's subscriptions and wakes every watcher. Store
// operations keep working; Watch fails after Close.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	hubs := s.hubs
	s.hubs = map[string]*hub{}
	s.mu.Unlock()
	s.cancel()
	var first error
	for _, h := range hubs {
		if err := h.close(); err != nil && first == nil {
			first = err
		}
	}
	s.wg.Wait()
	return first
}

// Key returns the Redis key of the record for a storage key.
func (s *Store) Key(storageKey string) string { return s.prefix + "{" + storageKey + "}" }

// Channel returns the pub/sub channel the store publishes changes of
// storageKey on.
func (s *Store) Channel(storageKey string) string { return s.Key(storageKey) + ":changed" }

// checked wraps the verdict of a storekit check of an op on key.
func checked(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("redisstore: %s %s: %w", op, key, err)
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// run runs sc on key's record; with ack set and WithReplicaAck configured it
// pipelines a WAIT behind the script and returns the number of replicas
// that acknowledged (-1 when not asked).
func (s *Store) run(ctx context.Context, op string, sc *redis.Script, key string, ack bool, args ...any) (any, int64, error) {
	rk := s.Key(key)
	if ack && s.ackN > 0 {
		return s.runAck(ctx, op, sc, key, rk, args)
	}
	v, err := sc.Run(ctx, s.client, []string{rk}, args...).Result()
	if err != nil && err != redis.Nil {
		return nil, -1, fmt.Errorf("redisstore: %s %s: %w", op, key, err)
	}
	return v, -1, nil
}

// runAck sends EVALSHA + WAIT as one pipeline on the connection of the
// key's master (on a Cluster, the node that owns the slot; a go-redis
// ClusterClient pipeline would send the keyless WAIT to a random node).
func (s *Store) runAck(ctx context.Context, op string, sc *redis.Script, key, rk string, args []any) (any, int64, error) {
	p, err := s.ackPipeliner(ctx, rk)
	if err != nil {
		return nil, -1, fmt.Errorf("redisstore: %s %s: %w", op, key, err)
	}
	for try := 0; ; try++ {
		pipe := p.Pipeline()
		var ev *redis.Cmd
		if try == 0 {
			ev = pipe.EvalSha(ctx, sc.Hash(), []string{rk}, args...)
		} else {
			ev = pipe.Eval(ctx, srcOf(sc), []string{rk}, args...)
		}
		w := pipe.Do(ctx, "WAIT", s.ackN, s.ackTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		v, err := ev.Result()
		if err != nil && err != redis.Nil {
			if try == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
				continue
			}
			return nil, -1, fmt.Errorf("redisstore: %s %s: %w", op, key, err)
		}
		got, werr := w.Int64()
		if werr != nil {
			return v, 0, &ReplicaAckError{Op: op, Key: key, Want: s.ackN, Err: werr}
		}
		return v, got, nil
	}
}

func srcOf(sc *redis.Script) string {
	switch sc {
	case scriptClaim:
		return srcCommon + srcClaim
	case scriptHeartbeat:
		return srcCommon + srcHeartbeat
	case scriptComplete:
		return srcCommon + srcComplete
	case scriptRelease:
		return srcCommon + srcRelease
	case scriptGet:
		return srcCommon + srcGet
	default:
		return srcCommon + srcDelete
	}
}

func corruptReply(key, v string) error {
	return &idem.CorruptRecordError{Key: key, Err: errors.New(v[1:])}
}

// Claim implements idem.Store.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.ClaimResult, error) {
	if err := checked("claim", req.Key, storekit.ValidateClaim(req)); err != nil {
		return idem.ClaimResult{}, err
	}
	value, err := claimValue(req, s.retention)
	if err != nil {
		return idem.ClaimResult{}, fmt.Errorf("redisstore: claim %s: %w", req.Key, err)
	}
	n, err := s.setNX(ctx, req.Key, value, req.LeaseTTL)
	if err != nil {
		return idem.ClaimResult{}, err
	}
	if n.claimed {
		// Our value, with the times the server gave it.
		exp := n.pexpire - s.retention.Milliseconds()
		rec := &idem.Record{
			Key: req.Key, Status: idem.StatusInProgress, Nonce: req.Nonce, PayloadHash: req.PayloadHash,
			ExpiresAt: exp, HeartbeatAt: exp - req.LeaseTTL.Milliseconds(), StartedAt: exp - req.LeaseTTL.Milliseconds(),
			Attempt: 1, TakeoverMs: req.TakeoverAfter.Milliseconds(),
		}
		if err := s.acked(ctx, req, n.acked, n.ackErr); err != nil {
			return idem.ClaimResult{}, err
		}
		return idem.ClaimResult{Outcome: idem.Claimed, Record: rec}, nil
	}
	if n.old != "" && n.pttl >= 0 {
		// The record the key holds, and the server's clock in the same
		// transaction (now = PEXPIRETIME - PTTL), answer the claim when
		// storekit's decision writes nothing: a live record that is not this
		// caller's to take, or this nonce's own claim retried. A takeover, an
		// expired record and a value that does not decode are for the claim
		// script, which writes atomically.
		if rec, err := decode(req.Key, n.old, n.pexpire); err == nil {
			if d := storekit.DecideClaim(rec, req, n.pexpire-n.pttl); !d.Write {
				return d.Result(), nil
			}
		}
	}
	tail, err := claimTail(req)
	if err != nil {
		return idem.ClaimResult{}, fmt.Errorf("redisstore: claim %s: %w", req.Key, err)
	}
	v, acked, err := s.run(ctx, "claim", scriptClaim, req.Key, true,
		tail, ms(req.LeaseTTL), s.retentionArg)
	var ackErr *ReplicaAckError
	if err != nil && !errors.As(err, &ackErr) {
		return idem.ClaimResult{}, err
	}
	str, ok := v.(string)
	if !ok || str == "" {
		return idem.ClaimResult{}, fmt.Errorf("redisstore: claim %s: unexpected script reply %T", req.Key, v)
	}
	var out idem.ClaimOutcome
	switch str[0] {
	case 'R':
		out = idem.Existing
	case 'C':
		out, str = idem.Claimed, str[1:]
	case 'T':
		out, str = idem.TookOver, str[1:]
	case 'X':
		return idem.ClaimResult{}, corruptReply(req.Key, str)
	default:
		return idem.ClaimResult{}, fmt.Errorf("redisstore: claim %s: unexpected script reply %q", req.Key, str[:1])
	}
	rec, err := decode(req.Key, str, -1)
	if err != nil {
		return idem.ClaimResult{}, err
	}
	if out != idem.Existing {
		if err := s.acked(ctx, req, acked, ackErr); err != nil {
			return idem.ClaimResult{}, err
		}
	}
	return idem.ClaimResult{Outcome: out, Record: rec}, nil
}

// acked checks that a claim this call made is held by the replicas
// WithReplicaAck asks for. One that is not may not survive a failover: it
// is released, so nobody waits for it and fn does not run on a claim that
// may vanish.
func (s *Store) acked(ctx context.Context, req idem.ClaimRequest, acked int64, ackErr *ReplicaAckError) error {
	if s.ackN == 0 || (ackErr == nil && acked >= s.ackN) {
		return nil
	}
	if ackErr == nil {
		ackErr = &ReplicaAckError{Op: "claim", Key: req.Key, Want: s.ackN, Got: acked}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ackTimeout+time.Second)
	defer cancel()
	if rerr := s.Release(rctx, req.Key, req.Nonce); rerr != nil && !errors.Is(rerr, idem.ErrLostOwnership) {
		return errors.Join(ackErr, rerr)
	}
	return ackErr
}

// nx is what a SET NX GET transaction found.
type nx struct {
	claimed bool   // the key was absent: value is stored
	old     string // the value the key held, when not claimed
	pexpire int64  // the key's PEXPIRETIME after the SET
	pttl    int64  // its PTTL, in the same transaction
	acked   int64  // replicas that acknowledged (WithReplicaAck)
	ackErr  *ReplicaAckError
}

// setNX stores value under key's record unless the key exists, in one
// round trip: MULTI, SET NX GET PX (lease + retention), PEXPIRETIME, PTTL,
// EXEC (and WAIT, with WithReplicaAck). No script runs, so a replay costs
// the server about what a GET does. A reply that is not a string value
// (a key of another type) is left to the claim script, which reports it.
func (s *Store) setNX(ctx context.Context, key, value string, lease time.Duration) (nx, error) {
	rk := s.Key(key)
	px := lease.Milliseconds() + s.retention.Milliseconds()
	var (
		p      redis.Pipeliner
		manual bool // MULTI and EXEC sent by hand, so WAIT can follow EXEC
	)
	if s.ackN > 0 {
		pl, err := s.ackPipeliner(ctx, rk)
		if err != nil {
			return nx{}, fmt.Errorf("redisstore: claim %s: %w", key, err)
		}
		p, manual = pl.Pipeline(), true
		p.Do(ctx, "multi")
	} else {
		p = s.client.TxPipeline()
	}
	set := p.Do(ctx, "set", rk, value, "nx", "get", "px", px)
	pe := p.Do(ctx, "pexpiretime", rk)
	pt := p.Do(ctx, "pttl", rk)
	var ex, w *redis.Cmd
	if manual {
		ex = p.Do(ctx, "exec")
		w = p.Do(ctx, "wait", s.ackN, s.ackTimeout.Milliseconds())
	}
	_, _ = p.Exec(ctx)
	var n nx
	var setV any
	var setErr error
	if manual {
		vals, err := ex.Slice()
		if err != nil {
			return nx{}, fmt.Errorf("redisstore: claim %s: %w", key, err)
		}
		if len(vals) != 3 {
			return nx{}, fmt.Errorf("redisstore: claim %s: EXEC returned %d replies", key, len(vals))
		}
		setV = vals[0]
		if e, ok := setV.(error); ok {
			setErr, setV = e, nil
		}
		var ok1, ok2 bool
		n.pexpire, ok1 = vals[1].(int64)
		n.pttl, ok2 = vals[2].(int64)
		if !ok1 || !ok2 {
			return nx{}, fmt.Errorf("redisstore: claim %s: unexpected EXEC reply %v", key, vals)
		}
		if got, werr := w.Int64(); werr != nil {
			n.ackErr = &ReplicaAckError{Op: "claim", Key: key, Want: s.ackN, Err: werr}
		} else {
			n.acked = got
		}
	} else {
		setV, setErr = set.Result()
		var err error
		if n.pexpire, err = pe.Int64(); err == nil {
			n.pttl, err = pt.Int64()
		}
		if err != nil && setErr == nil {
			return nx{}, fmt.Errorf("redisstore: claim %s: %w", key, err)
		}
	}
	switch {
	case setErr == redis.Nil || (setErr == nil && setV == nil):
		n.claimed = true
		if n.pexpire < 0 {
			return nx{}, fmt.Errorf("redisstore: claim %s: claimed key has no expiry (%d)", key, n.pexpire)
		}
	case setErr != nil:
		var rerr redis.Error
		if !errors.As(setErr, &rerr) {
			return nx{}, fmt.Errorf("redisstore: claim %s: %w", key, setErr)
		}
		// Not a string (WRONGTYPE): the script reports what the key holds.
	default:
		str, ok := setV.(string)
		if !ok {
			return nx{}, fmt.Errorf("redisstore: claim %s: unexpected SET reply %T", key, setV)
		}
		n.old = str
	}
	return n, nil
}

// ackPipeliner is the connection a write that WithReplicaAck waits for is
// sent on: the key's master on a Cluster (a ClusterClient pipeline would
// send the keyless WAIT to a random node), the client otherwise.
func (s *Store) ackPipeliner(ctx context.Context, rk string) (pipeliner, error) {
	if c, ok := s.client.(*redis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, rk)
		if err != nil {
			return nil, fmt.Errorf("master for key: %w", err)
		}
		return node, nil
	}
	return s.client.(pipeliner), nil
}

func (s *Store) write(ctx context.Context, op string, sc *redis.Script, key string, ack bool, args ...any) error {
	v, acked, err := s.run(ctx, op, sc, key, ack, args...)
	var ackErr *ReplicaAckError
	if err != nil && !errors.As(err, &ackErr) {
		return err
	}
	switch r := v.(type) {
	case int64:
		if r == 0 {
			return fmt.Errorf("redisstore: %s %s: %w", op, key, idem.ErrLostOwnership)
		}
		if r != 1 {
			return fmt.Errorf("redisstore: %s %s: unexpected script reply %d", op, key, r)
		}
	case string:
		if r != "" && r[0] == 'X' {
			return corruptReply(key, r)
		}
		return fmt.Errorf("redisstore: %s %s: unexpected script reply %q", op, key, r)
	default:
		return fmt.Errorf("redisstore: %s %s: unexpected script reply %T", op, key, v)
	}
	if ack && s.ackN > 0 && (ackErr != nil || acked < s.ackN) {
		if ackErr == nil {
			ackErr = &ReplicaAckError{Op: op, Key: key, Want: s.ackN, Got: acked}
		}
		// The write was applied on the master but may not survive its
		// failover: the outcome is reported as not recorded, at once (a
		// retry would not make the replicas catch up sooner).
		return &idem.NotRecordedError{Err: &idem.StoreError{Op: op, Err: ackErr}}
	}
	return nil
}

// Heartbeat implements idem.Store.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	if err := checked("heartbeat", key, storekit.ValidateOwner(key, nonce)); err != nil {
		return err
	}
	return s.write(ctx, "heartbeat", scriptHeartbeat, key, false, s.Channel(key), nonce, ms(leaseTTL), s.retentionArg, key)
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key, nonce string, c idem.Completion) error {
	if err := checked("complete", key, storekit.ValidateOwner(key, nonce)); err != nil {
		return err
	}
	if err := checked("complete", key, storekit.ValidateCompletion(c)); err != nil {
		return err
	}
	sf, lens, body, err := outcome(c)
	if err != nil {
		return &idem.StoreError{Op: "complete", Err: fmt.Errorf("redisstore: complete %s: %w", key, err), Permanent: true}
	}
	return s.write(ctx, "complete", scriptComplete, key, true, s.Channel(key), nonce, ms(c.TTL), s.retentionArg, sf, lens, body, key)
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	if err := checked("release", key, storekit.ValidateOwner(key, nonce)); err != nil {
		return err
	}
	return s.write(ctx, "release", scriptRelease, key, false, s.Channel(key), nonce, s.retentionArg, key)
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key string) (*idem.Record, error) {
	if err := checked("get", key, storekit.ValidateKey(key)); err != nil {
		return nil, err
	}
	v, _, err := s.run(ctx, "get", scriptGet, key, false, s.Channel(key))
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("redisstore: get %s: %w", key, idem.ErrNotFound)
	}
	str, ok := v.(string)
	if !ok || str == "" {
		return nil, fmt.Errorf("redisstore: get %s: unexpected script reply %T", key, v)
	}
	if str[0] == 'X' {
		return nil, corruptReply(key, str)
	}
	return decode(key, str, -1)
}

// Delete implements idem.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checked("delete", key, storekit.ValidateKey(key)); err != nil {
		return err
	}
	_, _, err := s.run(ctx, "delete", scriptDelete, key, false, s.Channel(key))
	return err
}

// LoadScripts loads every script of the store into the server's script
// cache (on a Cluster, into every master), so the first call of each
// operation is one EVALSHA instead of a failed EVALSHA plus EVAL. It is
// optional: without it the first call of each script falls back to EVAL
// once per server.
func (s *Store) LoadScripts(ctx context.Context) error {
	for _, sc := range []*redis.Script{scriptClaim, scriptHeartbeat, scriptComplete, scriptRelease, scriptGet, scriptDelete} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("redisstore: load scripts: %w", err)
		}
	}
	return nil
}
