// Package redisstore is an idem.Store on Redis (github.com/redis/go-redis/v9):
// standalone, Ring or Cluster.
//
// # Layout
//
// A record is one Redis hash at <prefix>{<storage key>}. Its fields are v
// (encoding version, "1"), key, status, nonce, attempt, started_at,
// heartbeat_at, completed_at, expires_at (Unix milliseconds, decimal),
// payload_hash, and, only when present, result, err_msg and err_type. The
// hash tag makes every key of one operation (the record and its change
// channel <prefix>{<storage key>}:changed) hash to the same Cluster slot and
// Ring shard.
//
// # Atomicity and time
//
// Every Store method is one embedded Lua script (lua/*.lua, go:embed), run
// with EVALSHA and falling back to EVAL when the server does not have it
// cached: one round trip, one key. The scripts implement the rules of
// idem.DecideClaim, idem.ApplyHeartbeat, idem.ApplyComplete and
// idem.ApplyRelease natively. Now is the Redis server's clock
// (redis.call('TIME')), so clients with skewed clocks agree on expiry and
// staleness; the only clock that matters for the takeover threshold is the
// server's.
//
// Liveness is decided by the record's own expires_at field, compared inside
// the scripts. The native expiry (PEXPIREAT) is garbage collection only: it
// is set to expires_at plus a safety buffer (WithExpiryBuffer, default one
// minute), so a record stays readable, and keeps its attempt number, for the
// buffer after it stops counting. Release keeps the record with
// expires_at = now, so the fencing token (Attempt) stays monotonic across a
// release for as long as the record exists (at least the buffer).
//
// # Retries
//
// go-redis retries a command after a network error. A claim whose first try
// was applied finds its own nonce and returns Claimed; a complete whose
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
// A record that does not decode (missing or garbled field, wrong type at the
// key, unknown version) is an *idem.CorruptRecordError, never a panic. A
// nonce mismatch is idem.ErrLostOwnership. An invalid option is an
// *OptionError matching idem.ErrInvalidOption, returned by Validate and by
// every method.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/redis/go-redis/v9"
)

// Client is what the store needs from go-redis: running scripts and
// subscribing. *redis.Client, *redis.Ring and *redis.ClusterClient satisfy
// it.
type Client interface {
	redis.Scripter
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
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

// Reply codes of the scripts.
const (
	codeExisting = 0
	codeLost     = 0
	codeNotFound = 0
	codeOK       = 1
	codeTookOver = 2
	codeCorrupt  = 3
)

// Defaults.
const (
	DefaultExpiryBuffer   = time.Minute
	DefaultWatchTimeout   = 5 * time.Second
	DefaultHealthInterval = 15 * time.Second
)

// OptionError is an invalid option. It matches idem.ErrInvalidOption.
type OptionError struct {
	Option string // option name, e.g. "WithExpiryBuffer"
	Reason string
}

func (e *OptionError) Error() string {
	return "redisstore: invalid option " + e.Option + ": " + e.Reason
}

// Is makes an OptionError match idem.ErrInvalidOption.
func (e *OptionError) Is(target error) bool { return target == idem.ErrInvalidOption }

// Option configures a Store.
type Option func(*Store)

// WithPrefix puts prefix in front of every Redis key and channel of the
// store (default none: keys are {<storage key>}). It must not contain '{'
// or '}', which would move the hash tag.
func WithPrefix(prefix string) Option {
	return func(s *Store) {
		for _, c := range prefix {
			if c == '{' || c == '}' {
				s.setErr(&OptionError{"WithPrefix", "prefix must not contain '{' or '}'"})
				return
			}
		}
		s.prefix = prefix
	}
}

// WithExpiryBuffer sets how long after a record stops counting Redis keeps
// it (native expiry = expires_at + buffer). Default DefaultExpiryBuffer.
// It must not be negative.
func WithExpiryBuffer(d time.Duration) Option {
	return func(s *Store) {
		if d < 0 {
			s.setErr(&OptionError{"WithExpiryBuffer", "negative duration " + d.String()})
			return
		}
		s.buffer = d
	}
}

// WithWatchTimeout bounds how long Watch waits for the server to confirm a
// new subscription before it gives up with an error (the Guard then polls).
// Default DefaultWatchTimeout; it must be positive.
func WithWatchTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d <= 0 {
			s.setErr(&OptionError{"WithWatchTimeout", "must be positive, got " + d.String()})
			return
		}
		s.watchTimeout = d
	}
}

// WithHealthInterval sets how often an idle subscription connection is
// pinged, so a silently dead connection is found and its watchers woken: a
// connection that does not answer a ping within the interval is replaced.
// Default DefaultHealthInterval; it must be positive.
func WithHealthInterval(d time.Duration) Option {
	return func(s *Store) {
		if d <= 0 {
			s.setErr(&OptionError{"WithHealthInterval", "must be positive, got " + d.String()})
			return
		}
		s.health = d
	}
}

// Store is an idem.Store and idem.Watcher on Redis. It is safe for
// concurrent use. Close stops its subscriptions; it does not close the
// client.
type Store struct {
	client       Client
	prefix       string
	buffer       time.Duration
	watchTimeout time.Duration
	health       time.Duration
	err          error

	mu     sync.Mutex
	hubs   map[string]*hub
	closed bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a store on client. It does no I/O; a nil client or an invalid
// option is reported by Validate and by every method.
func New(client Client, opts ...Option) *Store {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		client:       client,
		buffer:       DefaultExpiryBuffer,
		watchTimeout: DefaultWatchTimeout,
		health:       DefaultHealthInterval,
		hubs:         make(map[string]*hub),
		ctx:          ctx,
		cancel:       cancel,
	}
	if client == nil {
		s.setErr(&OptionError{"client", "nil client"})
	}
	for _, o := range opts {
		if o == nil {
			s.setErr(&OptionError{"Option", "nil option"})
			continue
		}
		o(s)
	}
	return s
}

func (s *Store) setErr(err error) {
	if s.err == nil {
		s.err = err
	}
}

// Validate reports an invalid option or a nil client given to New, as an
// *OptionError matching idem.ErrInvalidOption.
func (s *Store) Validate() error { return s.err }

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

func (s *Store) check(op, key string) error {
	if s.err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, s.err)
	}
	if key == "" {
		return fmt.Errorf("redisstore: %s: %w", op, &idem.KeyError{Reason: "empty storage key"})
	}
	return nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func (s *Store) run(ctx context.Context, op string, sc *redis.Script, key string, args ...any) ([]any, error) {
	keys := []string{s.Key(key)}
	args = append([]any{s.Channel(key)}, args...)
	v, err := sc.Run(ctx, s.client, keys, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: %s %s: %w", op, key, err)
	}
	reply, ok := v.([]any)
	if !ok || len(reply) < 2 {
		return nil, fmt.Errorf("redisstore: %s %s: unexpected script reply %T", op, key, v)
	}
	code, ok := reply[0].(int64)
	if !ok {
		return nil, fmt.Errorf("redisstore: %s %s: unexpected script reply code %T", op, key, reply[0])
	}
	if code == codeCorrupt {
		why, _ := reply[1].(string)
		return nil, &idem.CorruptRecordError{Key: key, Err: errors.New(why)}
	}
	return reply, nil
}

// Claim implements idem.Store.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.ClaimResult, error) {
	if err := s.check("claim", req.Key); err != nil {
		return idem.ClaimResult{}, err
	}
	if req.Nonce == "" {
		return idem.ClaimResult{}, fmt.Errorf("redisstore: claim %s: empty nonce", req.Key)
	}
	reply, err := s.run(ctx, "claim", scriptClaim, req.Key,
		req.Key, req.Nonce, req.PayloadHash, ms(req.LeaseTTL), ms(req.TakeoverAfter), ms(s.buffer))
	if err != nil {
		return idem.ClaimResult{}, err
	}
	var out idem.ClaimOutcome
	switch reply[0].(int64) {
	case codeExisting:
		out = idem.Existing
	case codeOK:
		out = idem.Claimed
	case codeTookOver:
		out = idem.TookOver
	default:
		return idem.ClaimResult{}, fmt.Errorf("redisstore: claim %s: unexpected script reply code %v", req.Key, reply[0])
	}
	if len(reply) < 3 {
		return idem.ClaimResult{}, fmt.Errorf("redisstore: claim %s: script reply without record", req.Key)
	}
	rec, err := decode(req.Key, reply[2])
	if err != nil {
		return idem.ClaimResult{}, err
	}
	return idem.ClaimResult{Outcome: out, Record: rec}, nil
}

func (s *Store) write(ctx context.Context, op string, sc *redis.Script, key, nonce string, args ...any) error {
	if err := s.check(op, key); err != nil {
		return err
	}
	reply, err := s.run(ctx, op, sc, key, append([]any{nonce}, args...)...)
	if err != nil {
		return err
	}
	switch reply[0].(int64) {
	case codeOK:
		return nil
	case codeLost:
		return fmt.Errorf("redisstore: %s %s: %w", op, key, idem.ErrLostOwnership)
	default:
		return fmt.Errorf("redisstore: %s %s: unexpected script reply code %v", op, key, reply[0])
	}
}

// Heartbeat implements idem.Store.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	return s.write(ctx, "heartbeat", scriptHeartbeat, key, nonce, ms(leaseTTL), ms(s.buffer))
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key, nonce string, c idem.Completion) error {
	if c.Status != idem.StatusCompleted && c.Status != idem.StatusFailed {
		return fmt.Errorf("redisstore: complete %s: invalid completion status %q", key, c.Status)
	}
	if c.Status == idem.StatusFailed && c.Error == nil {
		return fmt.Errorf("redisstore: complete %s: failed completion without error", key)
	}
	hasResult, hasErr := "0", "0"
	var errMsg, errType string
	if c.Result != nil {
		hasResult = "1"
	}
	if c.Error != nil {
		hasErr, errMsg, errType = "1", c.Error.Message, c.Error.Type
	}
	return s.write(ctx, "complete", scriptComplete, key, nonce, string(c.Status), ms(c.TTL), ms(s.buffer),
		hasResult, c.Result, hasErr, errMsg, errType)
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	return s.write(ctx, "release", scriptRelease, key, nonce, ms(s.buffer))
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key string) (*idem.Record, error) {
	if err := s.check("get", key); err != nil {
		return nil, err
	}
	reply, err := s.run(ctx, "get", scriptGet, key)
	if err != nil {
		return nil, err
	}
	switch reply[0].(int64) {
	case codeNotFound:
		return nil, fmt.Errorf("redisstore: get %s: %w", key, idem.ErrNotFound)
	case codeOK:
		if len(reply) < 3 {
			return nil, fmt.Errorf("redisstore: get %s: script reply without record", key)
		}
		return decode(key, reply[2])
	default:
		return nil, fmt.Errorf("redisstore: get %s: unexpected script reply code %v", key, reply[0])
	}
}

// Delete implements idem.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.check("delete", key); err != nil {
		return err
	}
	_, err := s.run(ctx, "delete", scriptDelete, key)
	return err
}

// LoadScripts loads every script of the store into the server's script
// cache (on a Cluster, into every master), so the first call of each
// operation is one EVALSHA instead of a failed EVALSHA plus EVAL. It is
// optional: without it the first call of each script falls back to EVAL
// once per server.
func (s *Store) LoadScripts(ctx context.Context) error {
	if s.err != nil {
		return fmt.Errorf("redisstore: load scripts: %w", s.err)
	}
	for _, sc := range []*redis.Script{scriptClaim, scriptHeartbeat, scriptComplete, scriptRelease, scriptGet, scriptDelete} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("redisstore: load scripts: %w", err)
		}
	}
	return nil
}
