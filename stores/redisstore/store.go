package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/storekit"
	"github.com/redis/go-redis/v9"
)

// Client is what the store needs from go-redis: SET with arguments (the
// claim), running scripts and subscribing. *redis.Client (also from redis.NewFailoverClient),
// *redis.Ring and *redis.ClusterClient satisfy it.
type Client interface {
	redis.Scripter
	SetArgs(ctx context.Context, key string, value any, a redis.SetArgs) *redis.StatusCmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// processor is the method every go-redis client has to send one command;
// their SetArgs builds its command and sends it through it. For the
// go-redis clients themselves, a claim's SET is built here with its
// arguments in one slice, which allocates less than SetArgs (it appends
// them one by one); a client of another type (a wrapper that may do more in
// its SetArgs) gets SetArgs.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// pipeliner is what WithReplicaAck needs from a standalone or Sentinel
// client: a pipeline on one connection.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

var (
	_ Client           = (*redis.Client)(nil)
	_ Client           = (*redis.Ring)(nil)
	_ Client           = (*redis.ClusterClient)(nil)
	_ storekit.Store   = (*Store)(nil)
	_ storekit.Watcher = (*Store)(nil)
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
	//go:embed lua/watch.lua
	srcWatch string
	//go:embed lua/set_ifeq.lua
	srcSetIfEq string

	scriptClaim     = redis.NewScript(srcCommon + srcClaim)
	scriptHeartbeat = redis.NewScript(srcCommon + srcHeartbeat)
	scriptComplete  = redis.NewScript(srcCommon + srcComplete)
	scriptSetIfEq   = redis.NewScript(srcSetIfEq)
	scriptRelease   = redis.NewScript(srcCommon + srcRelease)
	scriptGet       = redis.NewScript(srcCommon + srcGet)
	scriptDelete    = redis.NewScript(srcCommon + srcDelete)
	scriptWatch     = redis.NewScript(srcCommon + srcWatch)
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
// permanent *storekit.StoreError, so the Guard reports storekit.ErrNotRecorded.
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
// invalid one as an *storekit.OptionError matching storekit.ErrInvalidOption.
type Option func(*config)

type config struct {
	storekit.Options // Retention
	prefix           string
	watchTimeout     time.Duration
	health           time.Duration
	ackN             int
	ackTimeout       time.Duration
	acceptAsync      bool
}

// WithPrefix puts prefix in front of every Redis key and channel of the
// store (default none: keys are {<digest>}, see Store.Key). It must not
// contain '{' or '}', which would move the hash tag.
func WithPrefix(prefix string) Option {
	return func(c *config) {
		if strings.ContainsAny(prefix, "{}") {
			c.Invalid("WithPrefix", "prefix %q contains '{' or '}'", prefix)
			return
		}
		c.prefix = prefix
	}
}

// WithRetention sets how long past its expires_at an in-progress record (a
// claim whose lease ran out, a released claim) is kept before Redis deletes
// it (native expiry = expires_at + d). Default DefaultRetention; it must not
// be negative. While a record is retained its attempt number, and so the
// fencing token, keeps counting up. Completed and failed records are not
// retained: they expire at their expires_at (see Expiry in docs/redisstore.md).
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		c.SetRetention(d)
	}
}

// WithWatchTimeout bounds how long Watch waits for the server to confirm a
// new subscription before it gives up with an error (the Guard then polls).
// Default DefaultWatchTimeout; it must be positive.
func WithWatchTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.Invalid("WithWatchTimeout", "timeout must be positive, got %v", d)
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
			c.Invalid("WithHealthInterval", "interval must be positive, got %v", d)
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
// pipeline cannot pin WAIT to the key's shard). See the package doc's
// Replicas for what happens when the replicas do not acknowledge.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(c *config) {
		if n < 1 {
			c.Invalid("WithReplicaAck", "replica count must be at least 1, got %d", n)
		}
		if timeout < time.Millisecond {
			c.Invalid("WithReplicaAck", "timeout must be at least 1ms, got %v", timeout)
		}
		c.ackN, c.ackTimeout = n, timeout
	}
}

// AcceptAsyncReplication declares that the store may run on a Redis
// master with replicas without waiting for them: a claim the master
// acknowledged and lost in a failover before a replica received it lets a
// second caller run fn again, with the same fencing token. Without it (and
// without WithReplicaAck), a store whose master has replicas refuses to
// claim (see ErrAsyncReplication). It cannot be combined with
// WithReplicaAck.
func AcceptAsyncReplication() Option {
	return func(c *config) { c.acceptAsync = true }
}

// ErrAsyncReplication is matched by the error Claim returns when the store
// found that its Redis master has replicas (INFO replication
// connected_slaves on a standalone or Sentinel master, replicas in CLUSTER
// on every master of a Cluster and every shard of a Ring) and neither WithReplicaAck nor
// AcceptAsyncReplication was given: Redis replicates asynchronously, so a
// claim lost in a failover would run fn twice. The error is a
// *ReplicationError, which also matches storekit.ErrInvalidOption.
var ErrAsyncReplication = errors.New("redisstore: the Redis master has replicas and replicates asynchronously: choose WithReplicaAck(n, timeout) or AcceptAsyncReplication()")

// ReplicationError says where the store found replicas without an explicit
// choice. It matches ErrAsyncReplication and storekit.ErrInvalidOption.
type ReplicationError struct {
	Where    string // the server or the Cluster node with replicas
	Replicas int    // how many replicas it reported
}

func (e *ReplicationError) Error() string {
	return fmt.Sprintf("%v (%s has %d connected replicas)", ErrAsyncReplication, e.Where, e.Replicas)
}

// Is makes a ReplicationError match ErrAsyncReplication and
// storekit.ErrInvalidOption.
func (e *ReplicationError) Is(target error) bool {
	return target == ErrAsyncReplication || target == storekit.ErrInvalidOption
}

// replicaCheckEvery is how long a finding about replicas is trusted before
// the next claim checks again (a replica attached later is noticed).
const replicaCheckEvery = time.Minute

// replicaState is what the last replica check found.
type replicaState struct {
	at  time.Time
	err error // nil: no replicas; a *ReplicationError: replicas
}

// replicas returns the cached finding of the replica check, checking
// again (one caller at a time, inline) when it is older than
// replicaCheckEvery. A check that fails keeps the previous finding; with
// none, its error is returned (the claim fails, nothing is written).
func (s *Store) replicas(ctx context.Context, now time.Time) error {
	st := s.replicaState.Load()
	if st != nil && now.Sub(st.at) < replicaCheckEvery {
		return st.err
	}
	if !s.replicaMu.TryLock() {
		if st != nil {
			return st.err
		}
		s.replicaMu.Lock() // the first check: wait for it
	}
	defer s.replicaMu.Unlock()
	if cur := s.replicaState.Load(); cur != st && cur != nil {
		return cur.err
	}
	found, err := checkReplicas(ctx, s.client)
	if err != nil {
		if st != nil {
			return st.err
		}
		if u := unreachable(err); u != nil {
			return u // the caller names the operation
		}
		return fmt.Errorf("redisstore: replica check: %w", err)
	}
	st = &replicaState{at: now}
	if found != nil {
		st.err = found
	}
	s.replicaState.Store(st)
	return st.err
}

// unreachableError is a failure to connect to a Redis server: its text
// names the address (from the dial error), and it unwraps to that error.
type unreachableError struct {
	addr string
	err  error
}

func (e *unreachableError) Error() string {
	return "cannot reach the Redis server" + e.addr + ": " + e.err.Error()
}

func (e *unreachableError) Unwrap() error { return e.err }

// unreachable returns err as an *unreachableError when it is a failure to
// dial, and nil otherwise.
func unreachable(err error) error {
	var u *unreachableError
	if errors.As(err, &u) {
		return err
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "dial" {
		return nil
	}
	addr := ""
	if oe.Addr != nil {
		addr = " at " + oe.Addr.String()
	}
	return &unreachableError{addr: addr, err: err}
}

// connErr wraps err from op ("claim KEY", "get KEY", ...): "redisstore:
// op: err", where a failure to connect reads "cannot reach the Redis
// server at ADDR: dial tcp ...". Either way it wraps err, so errors.Is
// and errors.As see what they saw before.
func connErr(op string, err error) error {
	if u := unreachable(err); u != nil {
		err = u
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

// checkReplicas asks the deployment whether a master has replicas: a
// *ReplicationError when one has, nil when none has. A client of another
// type is not checked.
func checkReplicas(ctx context.Context, c Client) (*ReplicationError, error) {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return eachReplicas(ctx, c.ForEachMaster)
	case *redis.Ring:
		return eachReplicas(ctx, c.ForEachShard)
	case *redis.Client:
		return infoReplicas(ctx, c)
	}
	return nil, nil
}

// eachReplicas runs infoReplicas on every master (shard) each visits.
func eachReplicas(ctx context.Context, each func(context.Context, func(context.Context, *redis.Client) error) error) (*ReplicationError, error) {
	var mu sync.Mutex
	var found *ReplicationError
	err := each(ctx, func(ctx context.Context, c *redis.Client) error {
		e, err := infoReplicas(ctx, c)
		mu.Lock()
		if e != nil && found == nil {
			found = e
		}
		mu.Unlock()
		return err
	})
	return found, err
}

// infoReplicas reads connected_slaves from INFO replication.
func infoReplicas(ctx context.Context, c *redis.Client) (*ReplicationError, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("INFO replication: connected_slaves %q", v)
			}
			if n > 0 {
				return &ReplicationError{Where: c.Options().Addr, Replicas: n}, nil
			}
			return nil, nil
		}
	}
	return nil, nil
}

// Store is an storekit.Store and storekit.Watcher on Redis. It is safe for
// concurrent use. Close stops its subscriptions; it does not close the
// client.
type Store struct {
	client       Client
	proc         processor // client, when it is one; nil otherwise
	px           atomic.Pointer[pxArg]
	prefix       string
	retention    time.Duration
	retentionArg string
	watchTimeout time.Duration
	health       time.Duration
	ackN         int64
	ackTimeout   time.Duration
	acceptAsync  bool

	replicaMu    sync.Mutex
	replicaState atomic.Pointer[replicaState]

	freshMu sync.Mutex
	fresh   map[string]freshClaim // by nonce; see rememberFresh

	clocks sync.Map // server address -> *nodeClock; see ifeq.go

	presOnce    sync.Once
	ownerTok    string // Owner's answer
	ownPresence bool   // a presence of its own, not the process's (tests)

	pres atomic.Pointer[presence] // set by Owner

	mu     sync.Mutex
	hubs   map[string]*hub
	closed bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a store on client. It does no I/O (the replica check runs at
// the first claim). A nil client and every invalid option are reported,
// joined, each an *storekit.OptionError matching storekit.ErrInvalidOption.
func New(client Client, opts ...Option) (*Store, error) {
	c := config{
		Options:      storekit.Options{Store: "redisstore", Retention: DefaultRetention},
		watchTimeout: DefaultWatchTimeout,
		health:       DefaultHealthInterval,
	}
	if client == nil {
		c.Invalid("New", "client is nil")
	}
	for _, o := range opts {
		if o == nil {
			c.Invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	if c.acceptAsync && c.ackN > 0 {
		c.Invalid("AcceptAsyncReplication", "contradicts WithReplicaAck")
	}
	if c.ackN > 0 && client != nil {
		switch client.(type) {
		case *redis.ClusterClient:
		case *redis.Ring:
			c.Invalid("WithReplicaAck", "not supported on a Ring")
		default:
			if _, ok := client.(pipeliner); !ok {
				c.Invalid("WithReplicaAck", "client %T has no Pipeline method", client)
			}
		}
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	var proc processor
	switch c := client.(type) {
	case *redis.Client:
		proc = c
	case *redis.ClusterClient:
		proc = c
	case *redis.Ring:
		proc = c
	}
	s := &Store{
		client:       client,
		proc:         proc,
		prefix:       c.prefix,
		retention:    c.Retention,
		retentionArg: ms(c.Retention),
		watchTimeout: c.watchTimeout,
		health:       c.health,
		ackN:         int64(c.ackN),
		ackTimeout:   c.ackTimeout,
		acceptAsync:  c.acceptAsync,
		hubs:         make(map[string]*hub),
		fresh:        make(map[string]freshClaim),
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
	s.leavePresence()
	var first error
	for _, h := range hubs {
		if err := h.close(); err != nil && first == nil {
			first = err
		}
	}
	s.wg.Wait()
	return first
}

// Key returns the Redis key of the record for a storage key: the prefix
// and, as a hash tag, a 128-bit digest of the storage key in base64url,
// 24 bytes where the storage key itself makes 71. Redis's time per command
// grows with the length of its key (a GET of a 71-byte key costs about
// twice one of a 22-byte key), and every operation names its key. A
// storage key of the Guard's (storekit.StorageKeyPrefix and the 64 hex digits
// of a SHA-256) gives its first 128 bits; any other is hashed with
// SHA-256. Two storage keys of one digest (about 2^-64 among 2^32 keys)
// would share a Redis key: the record holds its whole storage key, and an
// operation that finds another one there reports it corrupt rather than
// answer for the wrong key (Delete, unconditional, would remove it).
func (s *Store) Key(storageKey string) string { return s.tagged(storageKey, "") }

// Channel returns the pub/sub channel the store publishes changes of
// storageKey on: its Redis key and ":changed", in the same hash slot.
func (s *Store) Channel(storageKey string) string { return s.tagged(storageKey, ":changed") }

// tagged is the prefix, the digest of storageKey as a hash tag, and suffix.
func (s *Store) tagged(storageKey, suffix string) string {
	d, ok := guardDigest(storageKey)
	if !ok {
		sum := sha256.Sum256([]byte(storageKey))
		copy(d[:], sum[:])
	}
	var enc [22]byte
	base64.RawURLEncoding.Encode(enc[:], d[:])
	var b strings.Builder
	b.Grow(len(s.prefix) + len(enc) + 2 + len(suffix))
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.Write(enc[:])
	b.WriteByte('}')
	b.WriteString(suffix)
	return b.String()
}

// guardDigest returns the first 128 bits of a storage key of the Guard's
// (storekit.StorageKeyPrefix and 64 lowercase hex digits); ok is false for any
// other storage key.
func guardDigest(storageKey string) (d [16]byte, ok bool) {
	h, ok := strings.CutPrefix(storageKey, storekit.StorageKeyPrefix)
	if !ok || len(h) != 64 {
		return d, false
	}
	var bad byte
	for i := range 32 {
		hi, lo := hexValue[h[2*i]], hexValue[h[2*i+1]]
		bad |= hi | lo
		if i < len(d) {
			d[i] = hi<<4 | lo
		}
	}
	return d, bad < 16
}

// hexValue maps a lowercase hex digit to its value and any other byte to
// 0xff, so that one OR over a string's values tells whether all were digits.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	return t
}()

// checked wraps the verdict of a storekit check of an op on key.
func checked(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return connErr(op+" "+key, err)
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
		return nil, -1, connErr(op+" "+key, err)
	}
	return v, -1, nil
}

// runAck sends EVALSHA + WAIT as one pipeline on the connection of the
// key's master (on a Cluster, the node that owns the slot; a go-redis
// ClusterClient pipeline would send the keyless WAIT to a random node).
func (s *Store) runAck(ctx context.Context, op string, sc *redis.Script, key, rk string, args []any) (any, int64, error) {
	p, err := s.ackPipeliner(ctx, rk)
	if err != nil {
		return nil, -1, connErr(op+" "+key, err)
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
			return nil, -1, connErr(op+" "+key, err)
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
	case scriptWatch:
		return srcCommon + srcWatch
	case scriptSetIfEq:
		return srcSetIfEq
	default:
		return srcCommon + srcDelete
	}
}

func corruptReply(key, v string) error {
	return &storekit.CorruptRecordError{Key: key, Err: errors.New(v[1:])}
}

// Claim implements storekit.Store.
func (s *Store) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if err := checked("claim", req.Key, storekit.ValidateClaim(req)); err != nil {
		return storekit.ClaimResult{}, err
	}
	req.Owner = s.claimOwner(req.Owner)
	value, err := claimBytes(req, s.retention)
	if err != nil {
		return storekit.ClaimResult{}, connErr("claim "+req.Key, err)
	}
	sent := time.Now()
	if s.ackN == 0 && !s.acceptAsync {
		if err := s.replicas(ctx, sent); err != nil {
			return storekit.ClaimResult{}, connErr("claim "+req.Key, err)
		}
	}
	n, err := s.setNX(ctx, req.Key, value, req.LeaseTTL)
	if err != nil {
		return storekit.ClaimResult{}, err
	}
	if n.claimed {
		if err := s.acked(ctx, req, n.acked, n.ackErr); err != nil {
			return storekit.ClaimResult{}, err
		}
		s.rememberFresh(req.Key, req.Nonce, string(value), sent)
		return storekit.ClaimResult{Outcome: storekit.Claimed, Record: freshRecord(req, sent)}, nil
	}
	if res, ok := answer(req, n.old, sent); ok {
		if res.Outcome == storekit.Claimed {
			if err := s.acked(ctx, req, n.acked, n.ackErr); err != nil {
				return storekit.ClaimResult{}, err
			}
		}
		return res, nil
	}
	tail, err := claimTail(req)
	if err != nil {
		return storekit.ClaimResult{}, connErr("claim "+req.Key, err)
	}
	inst, inc := storekit.OwnerPrefixes(req.Owner)
	v, acked, err := s.run(ctx, "claim", scriptClaim, req.Key, true,
		tail, ms(req.LeaseTTL), s.retentionArg, s.checkArg(), s.prefix, inst, inc, s.goneNonce(ctx, req, n.old))
	var ackErr *ReplicaAckError
	if err != nil && !errors.As(err, &ackErr) {
		return storekit.ClaimResult{}, err
	}
	str, ok := v.(string)
	if !ok || str == "" {
		return storekit.ClaimResult{}, fmt.Errorf("redisstore: claim %s: unexpected script reply %T", req.Key, v)
	}
	var out storekit.ClaimOutcome
	gone := false
	switch str[0] {
	case 'R':
		out = storekit.Existing
	case 'C':
		out, str = storekit.Claimed, str[1:]
	case 'T':
		out, str = storekit.TookOver, str[1:]
	case 'G':
		out, str, gone = storekit.TookOver, str[1:], true
	case 'X':
		return storekit.ClaimResult{}, corruptReply(req.Key, str)
	default:
		return storekit.ClaimResult{}, fmt.Errorf("redisstore: claim %s: unexpected script reply %q", req.Key, str[:1])
	}
	rec, err := decode(req.Key, str, -1)
	if err != nil {
		return storekit.ClaimResult{}, err
	}
	if out != storekit.Existing {
		if err := s.acked(ctx, req, acked, ackErr); err != nil {
			return storekit.ClaimResult{}, err
		}
	}
	return storekit.ClaimResult{Outcome: out, Record: rec, OwnerGone: gone}, nil
}

// freshRecord is the record a claim written by SET NX holds. Its stored
// times are relative to the key's expiry, which the server's clock set; the
// times returned here are the client's clock at the send, as close to them
// as the client can tell without asking (the Guard uses only the nonce and
// the attempt of its own claim; Get returns the server's times).
func freshRecord(req storekit.ClaimRequest, sent time.Time) *storekit.Record {
	now := sent.UnixMilli()
	return &storekit.Record{
		Key: req.Key, Status: storekit.StatusInProgress, Nonce: req.Nonce, PayloadHash: req.PayloadHash,
		ExpiresAt: now + req.LeaseTTL.Milliseconds(), HeartbeatAt: now, StartedAt: now,
		Attempt: 1, TakeoverMs: req.TakeoverAfter.Milliseconds(), Owner: req.Owner,
	}
}

// answer decides a claim from the record SET NX GET found, when that needs
// no clock: a completed or failed record (present, so live: its
// native expiry is its expires_at) is Existing, or Claimed when it carries
// req.Nonce (this claim, applied by an earlier try); an in-progress record
// that carries req.Nonce is this claim's own first try (Claimed). Anything
// else (another caller's in-progress record, which may be stale; a value
// that does not decode) is for the claim script.
func answer(req storekit.ClaimRequest, v string, sent time.Time) (storekit.ClaimResult, bool) {
	if len(v) < headerLen || v[:2] != magic {
		return storekit.ClaimResult{}, false
	}
	nl, ok := digits(v[offNonceLen : offNonceLen+smallWidth])
	if !ok || int64(len(v)) < headerLen+nl {
		return storekit.ClaimResult{}, false
	}
	own := v[headerLen:headerLen+nl] == req.Nonce
	switch v[offStatus] {
	case 'C', 'F':
	case 'P':
		if !own {
			return storekit.ClaimResult{}, false
		}
		f, ok := flagsOf(v)
		if !ok || f&flagRelative == 0 {
			// Our own claim, with absolute times: it may have been released
			// (or have expired) since, which only the server's clock can
			// tell, so the claim script decides.
			return storekit.ClaimResult{}, false
		}
		// Our own SET NX, retried after a lost reply: its stored times are
		// relative, so answer as for a fresh claim, with what it stored.
		stored, err := decode(req.Key, v, 1<<40)
		if err != nil {
			return storekit.ClaimResult{}, false
		}
		rec := freshRecord(req, sent)
		rec.PayloadHash = stored.PayloadHash
		return storekit.ClaimResult{Outcome: storekit.Claimed, Record: rec}, true
	default:
		return storekit.ClaimResult{}, false
	}
	rec, err := decode(req.Key, v, -1)
	if err != nil {
		return storekit.ClaimResult{}, false
	}
	if own {
		return storekit.ClaimResult{Outcome: storekit.Claimed, Record: rec}, true
	}
	return storekit.ClaimResult{Outcome: storekit.Existing, Record: rec}, true
}

// acked checks that a claim this call made is held by the replicas
// WithReplicaAck asks for. One that is not may not survive a failover: it
// is released, so nobody waits for it and fn does not run on a claim that
// may vanish.
func (s *Store) acked(ctx context.Context, req storekit.ClaimRequest, acked int64, ackErr *ReplicaAckError) error {
	if s.ackN == 0 || (ackErr == nil && acked >= s.ackN) {
		return nil
	}
	if ackErr == nil {
		ackErr = &ReplicaAckError{Op: "claim", Key: req.Key, Want: s.ackN, Got: acked}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storekit.AddDuration(s.ackTimeout, time.Second))
	defer cancel()
	if rerr := s.Release(rctx, req.Key, req.Nonce); rerr != nil && !errors.Is(rerr, storekit.ErrLostOwnership) {
		return errors.Join(ackErr, rerr)
	}
	return ackErr
}

// nx is what a claim's SET NX GET found.
type nx struct {
	claimed bool   // the key was absent: value is stored
	old     string // the value the key held, when not claimed
	acked   int64  // replicas that acknowledged (WithReplicaAck)
	ackErr  *ReplicaAckError
}

// setNX stores value under key's record unless the key exists, with one
// native command: SET key value NX GET PX lease+retention (followed by
// WAIT in the same pipeline with WithReplicaAck). No script runs and no
// clock is read. A reply that is not a string value (a key of another
// type) is left to the claim script, which reports it.
func (s *Store) setNX(ctx context.Context, key string, value []byte, lease time.Duration) (nx, error) {
	rk := s.Key(key)
	args := redis.SetArgs{Mode: "NX", Get: true, TTL: storekit.AddDuration(lease, s.retention)}
	var (
		set *redis.StatusCmd
		w   *redis.Cmd
	)
	if s.ackN > 0 {
		pl, err := s.ackPipeliner(ctx, rk)
		if err != nil {
			return nx{}, connErr("claim "+key, err)
		}
		p := pl.Pipeline()
		set = p.SetArgs(ctx, rk, value, args)
		w = p.Do(ctx, "wait", s.ackN, s.ackTimeout.Milliseconds())
		_, _ = p.Exec(ctx)
	} else if s.proc != nil {
		set = redis.NewStatusCmd(ctx, "set", rk, value, "nx", "get", "px", s.pxArg(args.TTL))
		_ = s.proc.Process(ctx, set) // the error is the command's
	} else {
		set = s.client.SetArgs(ctx, rk, value, args)
	}
	var n nx
	old, err := set.Result()
	switch {
	case err == redis.Nil:
		n.claimed = true
	case err != nil:
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return nx{}, connErr("claim "+key, err)
		}
		// Not a string (WRONGTYPE): the script reports what the key holds.
	default:
		n.old = old
	}
	if w != nil {
		if got, werr := w.Int64(); werr != nil {
			n.ackErr = &ReplicaAckError{Op: "claim", Key: key, Want: s.ackN, Err: werr}
		} else {
			n.acked = got
		}
	}
	return n, nil
}

// pxArg is a claim's PX argument, boxed once for the TTL most claims share.
type pxArg struct {
	ttl time.Duration
	v   any
}

func (s *Store) pxArg(ttl time.Duration) any {
	if p := s.px.Load(); p != nil && p.ttl == ttl {
		return p.v
	}
	p := &pxArg{ttl: ttl, v: ttl.Milliseconds()}
	s.px.Store(p)
	return p.v
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
			return fmt.Errorf("redisstore: %s %s: %w", op, key, storekit.ErrLostOwnership)
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
	if ack {
		return s.notAcked(op, key, acked, ackErr)
	}
	return nil
}

// notAcked is the answer to a write the master applied, given what the
// WAIT behind it said (acked replicas, or ackErr): nil when WithReplicaAck
// is not set or enough replicas hold it. Otherwise the write may not
// survive the master's failover: the outcome is reported as not recorded,
// at once (a retry would not make the replicas catch up sooner).
func (s *Store) notAcked(op, key string, acked int64, ackErr *ReplicaAckError) error {
	if s.ackN == 0 || ackErr == nil && acked >= s.ackN {
		return nil
	}
	if ackErr == nil {
		ackErr = &ReplicaAckError{Op: op, Key: key, Want: s.ackN, Got: acked}
	}
	return &storekit.NotRecordedError{Err: &storekit.StoreError{Op: op, Err: ackErr}}
}

// maxFresh bounds the fresh claims a store remembers. A claim that is never
// completed nor released (its caller stopped) stays until the map is full,
// which then starts again empty: forgetting a claim's value only sends its
// completion down the full path.
const maxFresh = 4096

// freshClaim is the value a fresh claim wrote with SET NX, its key, and
// when the claim was sent.
type freshClaim struct {
	key, value string
	sent       time.Time
}

// rememberFresh keeps the value a fresh claim of key by nonce wrote, for the
// conditional completion (ifeq.go): a key that still holds exactly that
// value holds this claim untouched. The value is only a hint: the
// conditional SET compares it with what the key holds, so a stale or
// forgotten one costs the complete script, never a wrong write.
func (s *Store) rememberFresh(key, nonce, value string, sent time.Time) {
	s.freshMu.Lock()
	if len(s.fresh) >= maxFresh {
		clear(s.fresh)
	}
	s.fresh[nonce] = freshClaim{key: key, value: value, sent: sent}
	s.freshMu.Unlock()
}

// takeFresh returns and forgets the fresh claim of key by nonce (its value
// "" when the store does not have it).
func (s *Store) takeFresh(key, nonce string) freshClaim {
	s.freshMu.Lock()
	f, ok := s.fresh[nonce]
	if ok {
		delete(s.fresh, nonce)
	}
	s.freshMu.Unlock()
	if !ok || f.key != key {
		return freshClaim{}
	}
	return f
}

// Heartbeat implements storekit.Store.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	if err := checked("heartbeat", key, storekit.ValidateOwner(key, nonce)); err != nil {
		return err
	}
	s.takeFresh(key, nonce) // the heartbeat rewrites the record
	return s.write(ctx, "heartbeat", scriptHeartbeat, key, false, s.Channel(key), nonce, ms(leaseTTL), s.retentionArg, key)
}

// Complete implements storekit.Store.
func (s *Store) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	if err := checked("complete", key, storekit.ValidateOwner(key, nonce)); err != nil {
		return err
	}
	if err := checked("complete", key, storekit.ValidateCompletion(c)); err != nil {
		return err
	}
	sf, lens, body, err := outcome(c)
	if err != nil {
		return &storekit.StoreError{Op: "complete", Err: fmt.Errorf("redisstore: complete %s: %w", key, err), Permanent: true}
	}
	if f := s.takeFresh(key, nonce); f.value != "" {
		// The key holds something else, or the server's clock is not
		// read yet: the complete script decides.
		if done, err := s.completeIfEq(ctx, key, f, c, sf, lens, body); done || err != nil {
			return err
		}
	}
	return s.write(ctx, "complete", scriptComplete, key, true, s.Channel(key), nonce, ms(c.TTL), sf, lens, body, key)
}

// Release implements storekit.Store.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	if err := checked("release", key, storekit.ValidateOwner(key, nonce)); err != nil {
		return err
	}
	s.takeFresh(key, nonce)
	return s.write(ctx, "release", scriptRelease, key, false, s.Channel(key), nonce, s.retentionArg, key)
}

// Get implements storekit.Store.
func (s *Store) Get(ctx context.Context, key string) (*storekit.Record, error) {
	if err := checked("get", key, storekit.ValidateKey(key)); err != nil {
		return nil, err
	}
	v, _, err := s.run(ctx, "get", scriptGet, key, false, s.Channel(key), key)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("redisstore: get %s: %w", key, storekit.ErrNotFound)
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

// Delete implements storekit.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checked("delete", key, storekit.ValidateKey(key)); err != nil {
		return err
	}
	_, _, err := s.run(ctx, "delete", scriptDelete, key, false, s.Channel(key))
	return err
}

// LoadScripts loads every script of the store into the server's script
// cache (on a Cluster, into every master), so the first call of each
// operation is one EVALSHA instead of a failed EVALSHA plus EVAL. It also
// reads each master's version and clock (INFO server, TIME), which the
// store otherwise reads in the background at its first completion there,
// so that the first fresh call already completes conditionally (SET ...
// IFEQ, or the script that does what it does). It is optional: without it
// the first call of each script falls back to EVAL once per server, and
// the first completions on each server run the complete script.
func (s *Store) LoadScripts(ctx context.Context) error {
	for _, sc := range []*redis.Script{scriptClaim, scriptHeartbeat, scriptComplete, scriptRelease, scriptGet, scriptDelete, scriptWatch, scriptSetIfEq} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return connErr("load scripts", err)
		}
	}
	read := func(ctx context.Context, node *redis.Client) error {
		c, err := readServerClock(ctx, node)
		if err != nil {
			return connErr("read the server's clock", err)
		}
		v, _ := s.clocks.LoadOrStore(node.Options().Addr, &nodeClock{})
		v.(*nodeClock).c.Store(c)
		return nil
	}
	switch c := s.client.(type) {
	case *redis.Client:
		return read(ctx, c)
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, read)
	}
	return nil
}
