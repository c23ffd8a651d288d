package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/storekit"
)

// MaxAgeError is returned by Claim and Complete on a bucket with a max age
// (WithMaxAge, or a bucket configured with a TTL) when the record would
// outlive it: the server would remove the entry before the record's own
// expiry plus the retention, and a duplicate could then run fn again. It
// matches storekit.ErrInvalidOption: a Guard's TTL or takeover threshold, or
// the store's retention, does not fit the bucket.
type MaxAgeError struct {
	Op       string        // "claim" or "complete"
	Lifetime time.Duration // the record's lifetime past this write, retention included
	MaxAge   time.Duration // the bucket's max age
}

func (e *MaxAgeError) Error() string {
	return fmt.Sprintf("natsstore: %s: a record living %v past its write (lifetime plus retention) outlives the bucket's max age %v: give the bucket a max age of at least that, or shorten the Guard's TTL and takeover threshold",
		e.Op, e.Lifetime, e.MaxAge)
}

// Is reports whether target is storekit.ErrInvalidOption.
func (e *MaxAgeError) Is(target error) bool { return target == storekit.ErrInvalidOption }

func (s *Store) setMaxAge(d time.Duration) {
	s.maxAge.Store(int64(d))
	s.ageKnown.Store(true)
}

// bucketMaxAge returns the bucket's max age: given by CreateBucket, or read
// from the bucket's status once (and again by every clean-up pass).
func (s *Store) bucketMaxAge(ctx context.Context) (time.Duration, error) {
	if s.ageKnown.Load() {
		return time.Duration(s.maxAge.Load()), nil
	}
	st, err := s.status(ctx, "status")
	if err != nil {
		return 0, err
	}
	s.setMaxAge(st.TTL())
	s.learnStream(st)
	return st.TTL(), nil
}

// status reads the bucket's status for op, and refuses a bucket that
// keeps more than one revision per key (see checkHistory).
func (s *Store) status(ctx context.Context, op string) (jetstream.KeyValueStatus, error) {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return nil, &storekit.StoreError{Op: op, Err: err}
	}
	if err := checkHistory(st); err != nil {
		return nil, err
	}
	return st, nil
}

// checkHistory refuses a bucket whose history is over 1: its stream holds
// a key's older revisions beside the last, and a pass or a listing that
// reads the stream would take an old revision (a completed key's earlier
// claim) for a record. The error matches storekit.ErrInvalidOption.
func checkHistory(st jetstream.KeyValueStatus) error {
	if st == nil {
		return nil
	}
	if h := st.History(); h > 1 {
		return &storekit.OptionError{Option: "natsstore.New", Reason: fmt.Sprintf("bucket %q keeps a history of %d revisions per key; a Store needs history 1 (natsstore.CreateBucket makes such a bucket)", st.Bucket(), h)}
	}
	return nil
}

// checkLifetime refuses a write whose record lives life past it (plus the
// retention) on a bucket whose max age is shorter.
func (s *Store) checkLifetime(ctx context.Context, op string, life time.Duration) error {
	maxAge, err := s.bucketMaxAge(ctx)
	if err != nil || maxAge == 0 {
		return err
	}
	if total := storekit.AddDuration(life, s.retention); total > maxAge {
		return &MaxAgeError{Op: op, Lifetime: total, MaxAge: maxAge}
	}
	return nil
}

// passStream returns the bucket's stream for a pass, with its current
// information: CreateBucket's, or looked up once through WithJetStream;
// nil without either (the pass then reads the bucket through a KV watch).
// deletes is true when the pass can delete the stream's messages; when it
// cannot, the pass removes records with KV purges, which leave markers,
// and says so once.
func (s *Store) passStream(ctx context.Context) (stream jetstream.Stream, info *jetstream.StreamInfo, deletes bool, err error) {
	st, err := s.status(ctx, "status")
	if err != nil {
		return nil, nil, false, err
	}
	s.learnStream(st)
	info = streamInfo(st)
	if stream, err = s.bucketStream(ctx, info); err != nil {
		return nil, nil, false, err
	}
	if stream != nil && !info.Config.DenyDelete {
		return stream, info, true, nil
	}
	if !s.warned.Swap(true) {
		why := "the bucket's stream denies message deletes (a bucket made by jetstream.CreateKeyValue; natsstore.CreateBucket makes one that allows them)"
		if stream == nil {
			why = "the Store has no JetStream context (natsstore.WithJetStream) for a bucket not made by natsstore.CreateBucket"
		}
		s.logger.Warn("natsstore: clean-up removes expired records with KV purges, which leave one delete marker per key in the stream", "bucket", st.Bucket(), "why", why)
	}
	return stream, info, false, nil
}

// bucketStream returns the handle of the stream whose information is info
// (nil: the status had none): CreateBucket's, or looked up once with the
// Store's JetStream context; nil without either.
func (s *Store) bucketStream(ctx context.Context, info *jetstream.StreamInfo) (jetstream.Stream, error) {
	if info == nil {
		return nil, nil
	}
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.stream == nil && s.js != nil {
		stream, err := s.js.Stream(ctx, info.Config.Name)
		if err != nil {
			return nil, &storekit.StoreError{Op: "stream", Err: err}
		}
		s.stream = stream
	}
	return s.stream, nil
}

// streamInfo is the stream information in a bucket's status, when it has
// it (a jetstream.KeyValueBucketStatus).
func streamInfo(st jetstream.KeyValueStatus) *jetstream.StreamInfo {
	if b, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		return b.StreamInfo()
	}
	return nil
}

// Tuning of a clean-up pass.
var (
	purgeBatch    = storekit.DefaultPurgeBatch // removals between two lease renewals
	paceEvery     = 20                         // removals between two rests
	purgeParallel = 1                          // removals in flight at once
	purgePause    = 1.0                        // rest per unit of work
)

// Purge removes the records whose ExpiresAt is more than the retention
// (WithRetention) ago, and the delete markers Delete left, and returns how
// many records it removed. It runs at once, whatever other processes do
// (the background clean-up takes turns through a lease; Purge does not).
//
// It reads the bucket's entries once, in stream order, 100 per request,
// none held beyond the batch in hand. When the Store writes its records
// with their expiry in a header (it knows the bucket's stream:
// CreateBucket's, or one given WithJetStream; see docs/natsstore.md), it
// reads the entries' headers only, through a headers-only pull consumer of
// its own, and decides on that expiry, so a pass that finds nothing expired
// reads no live record; a record of the store's without the header (written
// through the KV API) is read by its sequence, or, when most of a chunk are
// such records, the rest of the bucket is read with values. Otherwise it
// reads the entries with their values (through a pull consumer, or a KV
// watch without the stream). It removes what it found in batches of
// storekit.DefaultPurgeBatch, one request at a time (and reads records by
// sequence one at a time), resting as long as it worked after every 20
// removals or reads and every chunk read. Each removal is conditioned on
// the revision read, so a record claimed again meanwhile is kept: on a
// bucket whose stream allows message deletes (CreateBucket's, or one given
// WithJetStream) it deletes the message with the revision read as its
// sequence, which leaves no marker and cannot touch a later write;
// otherwise it is a KV purge with jetstream.LastRevision, which leaves a
// marker per key (and markers are then not removed). A record that does not
// decode is left for an operator to see; keys that are not the store's are
// left alone and not read.
func (s *Store) Purge(ctx context.Context) (int, error) {
	return s.purge(ctx, nil)
}

// candidate is an entry a pass found removable.
type candidate struct {
	key    string // KV key
	rev    uint64
	marker bool // a delete marker, not a record
}

// beforeRemove, when set (tests), runs after a pass decided and before it
// removes a batch.
var beforeRemove func(batch []string)

// scanValues, when set (tests, to compare), makes a pass receive every
// record with its scan and decide on the records, not on their headers.
var scanValues atomic.Bool

// purge is one clean-up pass; between, when not nil, runs after every
// batch (the background pass renews its lease there) and ends the pass
// with its error.
func (s *Store) purge(ctx context.Context, between func(context.Context) error) (int, error) {
	stream, info, deletes, err := s.passStream(ctx)
	if err != nil {
		return 0, err
	}
	var del jetstream.Stream // removals delete messages from it; nil: KV purges
	if deletes {
		del = stream
	}
	sc, err := s.newScanner(ctx, stream, info)
	if err != nil {
		return 0, err
	}
	defer sc.stop()
	n := 0
	// The pass rests purgePause times as long as each step (a chunk
	// read, a few removals) took, so it leaves the server to the store's
	// calls most of the time instead of running back to back. A pass of
	// 20,000 removals takes longer this way, and claims beside it stay as
	// fast as without it (TestSoakCleanup).
	p := storekit.Pacer{Ratio: purgePause}
	batch := make([]candidate, 0, purgeBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if beforeRemove != nil {
			keys := make([]string, len(batch))
			for i, c := range batch {
				keys[i] = c.key
			}
			beforeRemove(keys)
		}
		k, err := s.removeBatch(ctx, del, batch, &p)
		n += k
		batch = batch[:0]
		if err == nil && between != nil {
			err = between(ctx)
		}
		return err
	}
	values := scanValues.Load()
	for {
		if err := p.Rest(ctx); err != nil {
			return n, err
		}
		chunk, done, err := sc.next(ctx)
		if err != nil {
			return n, err
		}
		if cs, ok := sc.(*consumerScan); ok && cs.headersOnly {
			if at, ok := s.valuesFrom(chunk); ok {
				if err := cs.withValues(ctx, chunk[at].rev); err != nil {
					return n, err
				}
				chunk, done = chunk[:at], false
			}
		}
		if batch, err = s.collect(ctx, stream, chunk, batch, deletes, values, &p); err != nil {
			return n, err
		}
		if done || len(batch) >= purgeBatch {
			if err := flush(); err != nil || done {
				return n, err
			}
		}
	}
}

// newScanner starts the scan of a pass: through the bucket's stream when
// it is known, else through a KV watch.
func (s *Store) newScanner(ctx context.Context, stream jetstream.Stream, info *jetstream.StreamInfo) (scanner, error) {
	if stream == nil {
		return newWatchScan(ctx, s.kv, &s.bodies)
	}
	// Headers only when the Store writes the expiry headers itself:
	// otherwise its records have none, and chunks of values beat reading
	// each record by its sequence.
	headersOnly := s.pub.Load() != nil && !scanValues.Load()
	return newConsumerScan(ctx, stream, info, headersOnly, &s.bodies)
}

// collect appends to batch the entries of chunk the pass removes: those
// removable decides on at once, and those it reads by sequence first
// (paced by p). values makes it decide on the records, not their headers.
func (s *Store) collect(ctx context.Context, stream jetstream.Stream, chunk []scanned, batch []candidate, deletes, values bool, p *storekit.Pacer) ([]candidate, error) {
	var unread []scanned // records of the chunk to read by sequence
	for _, e := range chunk {
		if values {
			e.hasExpires = false
		}
		c, ok, read := s.removable(e, deletes)
		switch {
		case read:
			unread = append(unread, e)
		case ok:
			batch = append(batch, c)
		}
	}
	if len(unread) == 0 {
		return batch, nil
	}
	expired := make([]bool, len(unread))
	err := inSteps(ctx, len(unread), p, func(i int) (err error) {
		expired[i], err = s.readExpired(ctx, stream, unread[i])
		return err
	})
	if err != nil {
		return batch, err
	}
	for i, e := range unread {
		if expired[i] {
			batch = append(batch, candidate{key: e.key, rev: e.rev})
		}
	}
	return batch, nil
}

// removable says whether e is one of the store's records expired past the
// retention now, or (when the pass deletes messages from the stream) a
// delete marker of one. It decides on the expiry e's headers carry, or on
// the record the scan read when they carry none (a record written through
// the KV API); read is true when it can decide only on the record and the
// scan left it out (see readExpired). A key that is not the store's is
// never read.
func (s *Store) removable(e scanned, deletes bool) (c candidate, ok, read bool) {
	key, ok := storageKey(e.key)
	if !ok {
		return candidate{}, false, false // not ours
	}
	if e.op != jetstream.KeyValuePut {
		return candidate{key: e.key, rev: e.rev, marker: true}, deletes, false
	}
	expires, ok := e.expires, e.hasExpires
	if !ok {
		if !e.hasValue {
			return candidate{}, false, true
		}
		rec, err := decode(key, e.value)
		if err != nil {
			return candidate{}, false, false // corrupt: left for an operator to see
		}
		expires = rec.ExpiresAt
	}
	if !s.expired(expires) {
		return candidate{}, false, false // live
	}
	return candidate{key: e.key, rev: e.rev}, true, false
}

// valuesFrom says whether most of a headers-only chunk are records of the
// store's without the expiry header (written through the KV API), and
// where the first of them is: the pass then reads the rest of the bucket
// with values, from there on, rather than each such record by its
// sequence.
func (s *Store) valuesFrom(chunk []scanned) (at int, ok bool) {
	at, n := -1, 0
	for i, e := range chunk {
		if _, _, read := s.removable(e, false); read {
			if n++; at < 0 {
				at = i
			}
		}
	}
	return at, 2*n > len(chunk)
}

// readExpired reads the record e (one of the store's, without an expiry
// header) by its sequence and says whether it is expired past the
// retention. A record rewritten or removed since the scan saw it, or one
// that does not decode, is not.
func (s *Store) readExpired(ctx context.Context, stream jetstream.Stream, e scanned) (bool, error) {
	m, err := stream.GetMsg(ctx, e.rev)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, &storekit.StoreError{Op: "purge", Err: err}
	}
	s.reads.Add(1)
	key, _ := storageKey(e.key)
	rec, err := decode(key, m.Data)
	return err == nil && s.expired(rec.ExpiresAt), nil
}

// expired says whether a record that expires at expiresAt (Unix
// milliseconds) is expired past the retention now.
func (s *Store) expired(expiresAt int64) bool {
	return expiresAt <= s.nowMs()-s.retention.Milliseconds()
}

// inSteps runs f on 0 to n-1, paceEvery at a time with purgeParallel in
// flight, resting after each step; it stops after the first step with
// errors and returns them.
func inSteps(ctx context.Context, n int, p *storekit.Pacer, f func(i int) error) error {
	for start := 0; start < n; start += paceEvery {
		end := min(start+paceEvery, n)
		var (
			next atomic.Int64
			wg   sync.WaitGroup
			errs = make([]error, end-start)
		)
		next.Store(int64(start))
		for range min(purgeParallel, end-start) {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < end && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
					errs[i-start] = f(i)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if err := p.Rest(ctx); err != nil {
			return err
		}
	}
	return nil
}

// removeBatch removes batch, paceEvery at a time (purgeParallel requests
// in flight) with a rest after each, and returns how many records (not
// markers) it removed.
func (s *Store) removeBatch(ctx context.Context, del jetstream.Stream, batch []candidate, p *storekit.Pacer) (int, error) {
	var removed atomic.Int64
	err := inSteps(ctx, len(batch), p, func(i int) error {
		gone, err := s.remove(ctx, del, batch[i])
		if gone && !batch[i].marker {
			removed.Add(1)
		}
		return err
	})
	return int(removed.Load()), err
}

// remove removes c if the key is still at the revision read: gone is false
// when another write got there first (the entry is kept).
func (s *Store) remove(ctx context.Context, del jetstream.Stream, c candidate) (gone bool, err error) {
	if del != nil {
		// The message with this sequence is the entry as read; a later
		// write to the key is another message, which this cannot touch.
		err := del.DeleteMsg(ctx, c.rev)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && !strings.Contains(err.Error(), "not permitted"):
			// "no message found": rewritten (history 1 dropped it) or
			// removed since the read. nats.go keeps only the text.
			return false, nil
		default:
			return false, &storekit.StoreError{Op: "purge", Err: err}
		}
	}
	err = s.kv.Purge(ctx, c.key, jetstream.LastRevision(c.rev))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err):
		return false, nil // claimed again since the read: kept
	default:
		return false, &storekit.StoreError{Op: "purge", Err: err}
	}
}

// leaseKey is the KV key of the clean-up lease: it holds a "." that kvKey
// never writes, so it is never taken for a record.
const leaseKey = "idem.cleanup.lease"

// cleanupLease is the value under leaseKey: who runs the bucket's clean-up
// and until when the others skip their passes (Unix milliseconds, the
// store's clock).
type cleanupLease struct {
	Owner string `json:"owner"`
	Until int64  `json:"until"`
}

// errLeaseLost ends a pass whose lease another process took.
var errLeaseLost = errors.New("natsstore: clean-up lease taken by another process")

// background is the pass the Cleaner runs: nothing when the bucket has a
// max age (the server removes entries itself), nothing when another
// process holds the lease; otherwise Purge under the lease, renewed after
// every batch and, when done, held for half an interval more so the
// processes sharing the bucket clean about once per interval between them.
func (s *Store) background(ctx context.Context) error {
	_, err := s.backgroundPass(ctx)
	return err
}

// backgroundPass is background, with what it removed and whether it ran.
func (s *Store) backgroundPass(ctx context.Context) (int, error) {
	st, err := s.status(ctx, "status")
	if err != nil {
		return 0, err
	}
	s.setMaxAge(st.TTL())
	s.learnStream(st)
	if st.TTL() > 0 {
		return 0, nil
	}
	hold := max(s.every/2, time.Minute)
	rev, ok, err := s.takeLease(ctx, 0, hold)
	if err != nil || !ok {
		return 0, err
	}
	n, err := s.purge(ctx, func(ctx context.Context) error {
		var ok bool
		var err error
		if rev, ok, err = s.takeLease(ctx, rev, hold); err == nil && !ok {
			err = errLeaseLost
		}
		return err
	})
	if errors.Is(err, errLeaseLost) {
		return n, nil // another process goes on
	}
	if err == nil {
		_, _, err = s.takeLease(ctx, rev, s.every/2)
	}
	return n, err
}

// takeLease takes or renews the clean-up lease until now+hold: renewing
// (rev > 0) is an Update on the revision this Store wrote; taking reads it
// first and takes it only when it is free, lapsed or its own. ok is false
// when another process holds it.
func (s *Store) takeLease(ctx context.Context, rev uint64, hold time.Duration) (newRev uint64, ok bool, err error) {
	now := s.now()
	if rev == 0 {
		e, err := s.kv.Get(ctx, leaseKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, false, &storekit.StoreError{Op: "lease", Err: err}
		default:
			var l cleanupLease
			if json.Unmarshal(e.Value(), &l) == nil && l.Owner != s.id && l.Until > now.UnixMilli() {
				return 0, false, nil
			}
			rev = e.Revision()
		}
	}
	b, err := json.Marshal(cleanupLease{Owner: s.id, Until: now.Add(hold).UnixMilli()})
	if err != nil {
		return 0, false, err
	}
	if rev == 0 {
		newRev, err = s.kv.Create(ctx, leaseKey, b)
	} else {
		newRev, err = s.kv.Update(ctx, leaseKey, b, rev)
	}
	switch {
	case err == nil:
		return newRev, true, nil
	case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err):
		return 0, false, nil
	default:
		return 0, false, &storekit.StoreError{Op: "lease", Err: err}
	}
}
