package natsstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/lease"
	"github.com/idem-go/idem/storekit"
)

// KeyValue is the part of jetstream.KeyValue the store uses; a
// jetstream.KeyValue satisfies it, and tests can wrap one to inject faults.
type KeyValue interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
	Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
	ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error)
	Status(ctx context.Context) (jetstream.KeyValueStatus, error)
}

// Store is an storekit.Store on a JetStream KV bucket. It is safe for
// concurrent use. The zero value is not usable; call New.
type Store struct {
	kv        KeyValue
	now       func() time.Time
	retention time.Duration

	mu   sync.Mutex
	revs map[string]entry // the revision this Store last wrote or read, per key it owns a claim on

	maxAge   atomic.Int64 // the bucket's max age in nanoseconds, once known (0: none)
	ageKnown atomic.Bool  // maxAge was read (or given by CreateBucket)

	js       jetstream.JetStream       // WithJetStream, to find the bucket's stream
	pub      atomic.Pointer[publisher] // set once the bucket's stream is known and standard (see write)
	streamMu sync.Mutex
	stream   jetstream.Stream // the bucket's stream, once known
	warned   atomic.Bool      // the markers warning was logged
	bodies   atomic.Int64     // message bodies this Store's scans received (for the tests)
	reads    atomic.Int64     // records its passes read one by one (for the tests)
	cleaner  *storekit.Cleaner
	every    time.Duration // WithCleanup
	id       string        // this Store's name in the clean-up lease
	logger   *slog.Logger  // WithLogger, or slog.Default()
	nc       *nats.Conn    // the presence's connection (WithConn, or the JetStream context's); nil: no presence
	bucket   string        // the bucket's name, for presence subjects ("" if kv does not say)
}

// entry is a record and the revision it was read or written at.
type entry struct {
	rev uint64
	rec *storekit.Record
}

// maxOwned bounds the revisions kept for claims this Store holds; past it
// the oldest are forgotten and the next write of such a key reads first.
const maxOwned = 1 << 16

var (
	_ storekit.Store   = (*Store)(nil)
	_ storekit.Watcher = (*Store)(nil)
)

// New returns a Store on kv (a jetstream.KeyValue, from CreateBucket or
// js.KeyValue). It checks its options and, for a bucket not made by
// CreateBucket, reads the bucket's status once: a bucket that keeps more
// than one revision per key (history over 1) is refused with an error
// matching storekit.ErrInvalidOption (if the status cannot be read then, the
// Store refuses the bucket at its first write, pass or listing). Unless
// WithoutCleanup is given, it starts the Store's clean-up in the
// background (see the package doc); Close stops it. A Store dropped
// without Close stops its clean-up once it is garbage collected, but call
// Close when you are done with a Store.
func New(kv KeyValue, opts ...Option) (*Store, error) {
	c := config{Options: storekit.Options{Store: "natsstore", Now: time.Now, Retention: DefaultRetention, Cleanup: DefaultCleanup}}
	// CreateBucket and js.KeyValue hand back a nil interface with their
	// error, never a nil pointer inside one.
	if kv == nil {
		c.Invalid("New", "nil key-value bucket")
	}
	for _, o := range opts {
		if o == nil {
			c.Invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	if _, made := kv.(*bucket); !made {
		if err := readHistory(kv); err != nil {
			return nil, err
		}
	}
	s := &Store{kv: kv, now: c.Now, retention: c.Retention, revs: make(map[string]entry),
		js: c.js, every: c.Cleanup, id: lease.Token(), logger: c.logger}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.nc, s.bucket = presenceConn(kv, c)
	if b, ok := kv.(*bucket); ok {
		s.stream = b.stream
		s.setMaxAge(b.maxAge)
		s.pub.Store(newPublisher(b.js, b.stream, b.stream.CachedInfo()))
	}
	if !c.NoCleanup {
		// The cleaner holds the Store weakly between passes, so that a Store
		// dropped without Close is collected, and its collection stops the
		// cleaner, as in the other stores.
		w := weak.Make(s)
		s.cleaner = storekit.StartCleaner("natsstore", c.Cleanup, s.logger, func(ctx context.Context) error {
			if s := w.Value(); s != nil {
				return s.background(ctx)
			}
			return nil
		})
		runtime.AddCleanup(s, func(c *storekit.Cleaner) { go c.Close() }, s.cleaner)
	}
	return s, nil
}

// presenceConn returns the connection and bucket name a Store's presence
// uses: WithConn's connection, else that of the JetStream context the
// Store has (WithJetStream's, or CreateBucket's); nil if none.
func presenceConn(kv KeyValue, c config) (*nats.Conn, string) {
	named, ok := kv.(interface{ Bucket() string })
	if !ok {
		return nil, ""
	}
	nc := c.conn
	if nc == nil && c.js != nil {
		nc = c.js.Conn()
	}
	if b, made := kv.(*bucket); nc == nil && made {
		nc = b.js.Conn()
	}
	return nc, named.Bucket()
}

// newStatusTimeout bounds New's read of a bucket's status.
const newStatusTimeout = 5 * time.Second

// readHistory is New's check of a bucket not made by CreateBucket: one
// status read, and a bucket with a history over 1 is refused (see
// checkHistory). A status that cannot be read now is not an error here:
// the Store reads it again before its first write, pass or listing, and
// refuses the bucket then.
func readHistory(kv KeyValue) error {
	ctx, cancel := context.WithTimeout(context.Background(), newStatusTimeout)
	defer cancel()
	st, err := kv.Status(ctx)
	if err != nil {
		return nil
	}
	return checkHistory(st)
}

// Close stops the Store's clean-up and waits for a pass in flight to
// return. The Store still serves calls after Close; Close may be called
// more than once and returns nil.
func (s *Store) Close() error { return s.cleaner.Close() }

// bucket is the jetstream.KeyValue CreateBucket returns: the bucket with
// the JetStream context it was made with, the handle of its stream and its
// max age, so a Store on it writes records with their expiry header,
// removes records without leaving markers and knows the max age without a
// read.
type bucket struct {
	jetstream.KeyValue
	js     jetstream.JetStream
	stream jetstream.Stream
	maxAge time.Duration
}

// CreateBucket creates the KV bucket name for a Store (history 1, file
// storage, WithReplicas servers, no max age unless WithMaxAge) and returns
// it. It makes the bucket's stream itself, as jetstream.CreateKeyValue
// would except that the stream allows deleting a message by its sequence,
// which is how the Store's clean-up removes an expired record without
// leaving a delete marker (see Lifecycle in docs/natsstore.md). An existing
// bucket with the same settings is returned as it is; one with other
// settings is an error, and so is one of the same name that
// jetstream.CreateKeyValue made (its stream denies deletes: open it with
// js.KeyValue instead). The bucket it returns carries js, its stream's
// handle and its max age, so a Store on it needs neither WithJetStream
// nor a status read.
func CreateBucket(ctx context.Context, js jetstream.JetStream, name string, opts ...BucketOption) (jetstream.KeyValue, error) {
	c := bucketConfig{Options: storekit.Options{Store: "natsstore"}, replicas: 1}
	if js == nil {
		c.Invalid("CreateBucket", "nil JetStream")
	}
	for _, o := range opts {
		if o == nil {
			c.Invalid("CreateBucket", "nil option")
			continue
		}
		o(&c)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	stream, err := js.CreateStream(ctx, bucketStream(name, c))
	if err != nil {
		return nil, fmt.Errorf("natsstore: create bucket %q: %w", name, err)
	}
	kv, err := js.KeyValue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("natsstore: open bucket %q: %w", name, err)
	}
	return &bucket{KeyValue: kv, js: js, stream: stream, maxAge: c.maxAge}, nil
}

// bucketStream is the stream of a KV bucket as jetstream.CreateKeyValue
// makes it (history 1), except that it allows deleting a message by its
// sequence: the clean-up removes an expired record that way, leaving no
// delete marker.
func bucketStream(name string, c bucketConfig) jetstream.StreamConfig {
	dup := 2 * time.Minute
	if c.maxAge > 0 && c.maxAge < dup {
		dup = c.maxAge
	}
	return jetstream.StreamConfig{
		Name:              streamName(name),
		Description:       "idem records",
		Subjects:          []string{"$KV." + name + ".>"},
		MaxMsgsPerSubject: 1,
		MaxBytes:          -1,
		MaxAge:            c.maxAge,
		MaxMsgSize:        -1,
		Storage:           jetstream.FileStorage,
		Replicas:          c.replicas,
		AllowRollup:       true,
		DenyDelete:        false,
		Duplicates:        dup,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
	}
}

// streamName is the name of the stream that holds the KV bucket name.
func streamName(bucket string) string { return "KV_" + bucket }

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

// read returns the record under key and its revision; a missing or deleted
// key is (nil, 0, nil), so a claim creates it.
func (s *Store) read(ctx context.Context, key string) (*storekit.Record, uint64, bool, error) {
	e, err := s.kv.Get(ctx, kvKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, true, nil
	}
	if err != nil {
		return nil, 0, false, &storekit.StoreError{Op: "get", Err: err}
	}
	rec, err := decode(key, e.Value())
	if err != nil {
		return nil, 0, false, err
	}
	return rec, e.Revision(), false, nil
}

func decode(key string, b []byte) (*storekit.Record, error) {
	rec, err := storekit.DecodeRecord(b)
	if err != nil {
		return nil, &storekit.CorruptRecordError{Key: key, Err: err}
	}
	rec.Key = key
	return rec, nil
}

// write stores rec under key if the entry is still at revision rev (0: the
// key has never been written or was purged; deleted is true when a read
// found a deletion marker). conflict is true when another write got there
// first. With the bucket's stream known (see publisher) it publishes the
// record itself, with its expiry in a header; otherwise it is a KV Create
// or Update.
func (s *Store) write(ctx context.Context, key string, rec *storekit.Record, rev uint64, deleted bool) (newRev uint64, conflict bool, err error) {
	b, err := storekit.EncodeRecord(rec)
	if err != nil {
		return 0, false, err
	}
	if p := s.pub.Load(); p != nil {
		return p.write(ctx, kvKey(key), b, rec.ExpiresAt, rev, deleted)
	}
	if deleted {
		newRev, err = s.kv.Create(ctx, kvKey(key), b)
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err) {
			return 0, true, nil
		}
	} else {
		newRev, err = s.kv.Update(ctx, kvKey(key), b, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err) {
			return 0, true, nil
		}
	}
	if err != nil {
		return 0, false, &storekit.StoreError{Op: "write", Err: err}
	}
	return newRev, false, nil
}

// Claim implements storekit.Store. It first publishes a new claim expecting the
// key to be absent: a fresh key costs that one round trip. Otherwise it
// reads the entry, decides with storekit.DecideClaimGone, and writes a
// takeover or re-claim against the revision read. Only when the entry is
// another process's live in-progress claim with the same payload hash,
// not stale, does it ask that owner's presence subject (one request): "no
// responders" means the owner is gone, and the claim is taken over at
// once (ClaimResult.OwnerGone); so is one left by an earlier incarnation
// of the claiming process's instance, with no request.
func (s *Store) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if err := storekit.ValidateClaim(req); err != nil {
		return storekit.ClaimResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return storekit.ClaimResult{}, err
	}
	if err := s.checkLifetime(ctx, "claim", req.LeaseTTL); err != nil {
		return storekit.ClaimResult{}, err
	}
	var cur *storekit.Record
	var gone func(string) bool // asks an owner's subject; set once a record was read
	rev, deleted := uint64(0), false
	for {
		d := storekit.DecideClaimGone(cur, req, s.nowMs(), gone)
		if !d.Write {
			return d.Result(), nil
		}
		newRev, conflict, err := s.write(ctx, req.Key, d.Record, rev, deleted)
		if err != nil {
			return storekit.ClaimResult{}, err
		}
		if !conflict {
			s.own(req.Key, newRev, d.Record.Clone()) // the caller gets d.Record (ClaimResult.Record)
			return d.Result(), nil
		}
		if cur, rev, deleted, err = s.read(ctx, req.Key); err != nil {
			return storekit.ClaimResult{}, err
		}
		if deleted {
			cur, rev = nil, 0
		}
		if err := ctx.Err(); err != nil {
			return storekit.ClaimResult{}, err
		}
		if gone == nil && cur != nil && cur.Status == storekit.StatusInProgress {
			gone = func(token string) bool { return s.ownerGone(ctx, token) }
		}
	}
}

// own remembers the revision of a record this Store wrote for its owner.
func (s *Store) own(key string, rev uint64, rec *storekit.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.revs[key]; !ok && len(s.revs) >= maxOwned {
		for k := range s.revs { // forget an arbitrary one: it is read again if needed
			delete(s.revs, k)
			break
		}
	}
	s.revs[key] = entry{rev: rev, rec: rec}
}

func (s *Store) owned(key string) (entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.revs[key]
	return e, ok
}

func (s *Store) disown(key string) {
	s.mu.Lock()
	delete(s.revs, key)
	s.mu.Unlock()
}

// Heartbeat implements storekit.Store.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	return s.update(ctx, "heartbeat", key, nonce, false, func(cur *storekit.Record, now int64) (*storekit.Record, error) {
		return storekit.ApplyHeartbeat(cur, nonce, leaseTTL, now)
	})
}

// Complete implements storekit.Store.
func (s *Store) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	if err := storekit.ValidateCompletion(c); err != nil {
		return err
	}
	if err := s.checkLifetime(ctx, "complete", c.TTL); err != nil {
		return err
	}
	return s.update(ctx, "complete", key, nonce, true, func(cur *storekit.Record, now int64) (*storekit.Record, error) {
		return storekit.ApplyComplete(cur, nonce, c, now)
	})
}

// Release implements storekit.Store. The record is kept with ExpiresAt = now,
// so the next claim goes on counting attempts.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	return s.update(ctx, "release", key, nonce, true, func(cur *storekit.Record, now int64) (*storekit.Record, error) {
		return storekit.ApplyRelease(cur, nonce, now)
	})
}

// update applies an owner's transition: against the revision this Store
// last wrote or read for key when it has one, else against a fresh read;
// a conflict or a refusal decided on a remembered record is decided again
// on a fresh read, so only what the bucket holds now can refuse it.
func (s *Store) update(ctx context.Context, op, key, nonce string, final bool, apply func(*storekit.Record, int64) (*storekit.Record, error)) error {
	if err := storekit.ValidateOwner(key, nonce); err != nil {
		return fmt.Errorf("natsstore: %s %s: %w", op, key, err)
	}
	e, remembered := s.owned(key)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !remembered {
			cur, rev, _, err := s.read(ctx, key)
			if err != nil {
				return err
			}
			e = entry{rev: rev, rec: cur}
		}
		next, err := apply(e.rec, s.nowMs())
		if err != nil {
			if remembered {
				remembered = false
				continue
			}
			s.disown(key)
			return fmt.Errorf("natsstore: %s %s: %w", op, key, err)
		}
		newRev, conflict, err := s.write(ctx, key, next, e.rev, e.rec == nil)
		if err != nil {
			return err
		}
		if conflict {
			remembered = false
			continue
		}
		if final {
			s.disown(key)
		} else {
			s.own(key, newRev, next)
		}
		return nil
	}
}

// Get implements storekit.Store: the live record, or storekit.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (*storekit.Record, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cur, _, _, err := s.read(ctx, key)
	if err != nil {
		return nil, err
	}
	rec, err := storekit.Found(cur, s.nowMs())
	if err != nil {
		return nil, fmt.Errorf("natsstore: get %s: %w", key, err)
	}
	return rec, nil
}

// Delete implements storekit.Store: the key's entry and its history are purged.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := storekit.ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.disown(key)
	if err := s.kv.Purge(ctx, kvKey(key)); err != nil {
		return &storekit.StoreError{Op: "delete", Err: err}
	}
	return nil
}

func isWrongLastSeq(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
