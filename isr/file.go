package isr

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"

	"github.com/idem-go/idem/storekit"
)

// fileStripes is the number of lock files and of top fan-out
// directories; part of the on-disk layout.
const fileStripes = 256

const (
	fileLockDir = ".locks"
	fileTmp     = ".tmp-"
)

// FileTable is a Table in a directory on one host, shared by any number of
// processes on that host (not over a network file system).
//
// Every item is one JSON file holding the DynamoDB item's attribute names
// and value types, pk and sk included: strings as JSON strings, numbers as
// JSON numbers (read in DynamoDB's decimal form). The items of a cache key
// live in <dir>/<h0h1>/<h2>/<sha256 hex of pk>/, h0h1 and h2 being the
// first three hex digits of that hash: META.json, LOCK.json,
// REQ#<sha256 hex of the idempotency key>.json and VER#<sha256 hex of the
// version id>.json (Path names them). The 256 fan-out directories of at
// most 16 each are made when first needed and kept, so there are never
// more than 4,352 of them, and each leaf holds about 1/4,096 of the cache
// keys (about 250 at a million pages); a cache key's directory is removed
// once it is empty. Each item file's modification time is the instant the
// item may expire, so that the clean-up tells live items from expired
// ones without opening them: its ttl floored, a LOCK's lease_expires_at
// floored when later, and 2200-01-01 UTC for an item without a ttl (within
// the range of ext4 with 256-byte inodes, XFS with bigtime, btrfs, APFS
// and NTFS; a file system that keeps 32-bit seconds stores 2038-01-19 for
// any later time, so from then on the clean-up opens such files, and
// keeps the live ones).
//
// A write takes the cache key's lock (<dir>/.locks/<h0h1>, one of 256 lock
// files, named as the cache key's top fan-out directory, with gofrs/flock,
// and an in-process semaphore beside it), reads the items it conditions
// on, and writes each changed item to a temporary file that is fsynced and
// renamed over the item, then fsyncs the directory; deletes are fsynced
// the same way. So every operation, the transaction recipes included, is
// atomic with respect to every other, and a reader (which takes no lock)
// sees each item whole, old or new. A crash between the renames of one
// recipe can leave it half applied (for example META published and LOCK
// not yet deleted); the lease then simply expires.
//
// Conditions and refusals are the DynamoDB table's (dynamoisr.Table). Expiry is decided with the
// caller's exact Now against the items' numbers, compared exactly as the
// Go side compares them; ttl decides nothing but a REQ# item's liveness, as on
// DynamoDB. Items whose ttl has passed on the table's clock are removed
// by a clean-up goroutine (WithCleanup, WithoutCleanup, Close, Purge), as
// DynamoDB's TTL deletion would remove them; see Lifecycle in
// docs/isr.md. A FileTable dropped without Close stops its clean-up
// too, but call Close when you are done with one.
type FileTable struct {
	*fileCore
	cleaner *storekit.Cleaner // nil under WithoutCleanup
}

// fileCore is a FileTable's state apart from its cleaner, so that the
// clean-up goroutine holds it and not the FileTable.
type fileCore struct {
	dir     string
	sync    bool
	now     func() time.Time
	stripes [fileStripes]fileStripe

	purgeReads atomic.Int64 // item files the clean-up opened, for tests
}

type fileStripe struct {
	sem chan struct{} // capacity 1: held while a goroutine owns the stripe
	fl  *flock.Flock
}

var _ Table = (*FileTable)(nil)

// NewFileTable returns a FileTable in dir, creating the directory if
// needed. An empty dir, a dir that is not a directory and every invalid
// option are reported, joined, each an *storekit.OptionError matching
// idem.ErrInvalidOption.
func NewFileTable(dir string, opts ...FileOption) (*FileTable, error) {
	c := newTableConfig()
	if strings.TrimSpace(dir) == "" {
		c.Invalid("NewFileTable", "directory is empty")
	} else if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		c.Invalid("NewFileTable", "%s is not a directory", dir)
	}
	c.apply("NewFileTable", opts)
	if err := c.Err(); err != nil {
		return nil, err
	}
	t := &FileTable{fileCore: &fileCore{dir: dir, sync: c.sync, now: c.Now}}
	locks := filepath.Join(dir, fileLockDir)
	if err := os.MkdirAll(locks, 0o700); err != nil {
		return nil, fmt.Errorf("isr: file table: %w", err)
	}
	for i := range t.stripes {
		t.stripes[i] = fileStripe{
			sem: make(chan struct{}, 1),
			fl:  flock.New(filepath.Join(locks, fmt.Sprintf("%02x", i)), flock.SetPermissions(0o600)),
		}
	}
	if !c.NoCleanup {
		core := t.fileCore
		t.cleaner = storekit.StartCleaner("isr.FileTable", c.Cleanup, c.logger, func(ctx context.Context) error {
			_, err := core.purge(ctx)
			return err
		})
		runtime.AddCleanup(t, func(c *storekit.Cleaner) { go c.Close() }, t.cleaner)
	}
	return t, nil
}

// check refuses a FileTable that NewFileTable did not make.
func (t *FileTable) check() error {
	if t == nil || t.fileCore == nil || t.dir == "" || t.stripes[0].sem == nil {
		return unmade("FileTable", "NewFileTable")
	}
	return nil
}

// Dir returns the table's directory ("" for a nil or zero FileTable).
func (t *FileTable) Dir() string {
	if t.check() != nil {
		return ""
	}
	return t.dir
}

func sumHex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// pkDir is the directory of pk's items.
func (t *fileCore) pkDir(pk string) string { return t.keyDir(sumHex(pk)) }

// keyDir is the directory of the cache key whose pk's sha256 hex is
// keyHex: <dir>/<h0h1>/<h2>/<keyHex>.
func (t *fileCore) keyDir(keyHex string) string {
	return filepath.Join(t.dir, keyHex[:2], keyHex[2:3], keyHex)
}

// stripeOf is the lock stripe (and top fan-out directory) of a cache key's
// directory name, the sha256 hex of its pk: its first byte.
func stripeOf(keyHex string) int {
	b, _ := hex.DecodeString(keyHex[:2])
	return int(b[0])
}

// Path returns the file of the item (pk, sk) ("" for a nil or zero
// FileTable).
func (t *FileTable) Path(pk, sk string) string {
	if t.check() != nil {
		return ""
	}
	return t.path(pk, sk)
}

// path is the file of the item (pk, sk).
func (t *fileCore) path(pk, sk string) string {
	name := sk
	for _, p := range []string{RequestSKPrefix, VersionSKPrefix} {
		if rest, ok := strings.CutPrefix(sk, p); ok {
			name = p + sumHex(rest)
		}
	}
	return filepath.Join(t.pkDir(pk), name+".json")
}

// lock takes pk's stripe (lockStripe).
func (t *fileCore) lock(ctx context.Context, pk string) (func(), error) {
	return t.lockStripe(ctx, stripeOf(sumHex(pk)))
}

// lockStripe takes a stripe: the semaphore (honouring ctx), then the file
// lock, polled while another process holds it.
func (t *fileCore) lockStripe(ctx context.Context, stripe int) (func(), error) {
	st := &t.stripes[stripe]
	select {
	case st.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ok, err := st.fl.TryLock()
	if err == nil && !ok {
		ok, err = st.fl.TryLockContext(ctx, 200*time.Microsecond)
	}
	if err != nil || !ok {
		<-st.sem
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("isr: file table lock: %w", err)
	}
	return func() {
		_ = st.fl.Unlock()
		<-st.sem
	}, nil
}

// fileItem is an item as stored: attribute name to a JSON string,
// json.Number or any other JSON value (which no attribute may hold).
type fileItem map[string]any

// read returns the item (pk, sk), or nil when it does not exist.
func (t *fileCore) read(pk, sk string) (fileItem, error) {
	b, err := os.ReadFile(t.path(pk, sk))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("isr: read %s/%s: %w", pk, sk, err)
	}
	it, err := decodeFileItem(b)
	if err != nil {
		return nil, &CorruptItemError{PK: pk, SK: sk, Attr: "", Reason: "not a JSON object"}
	}
	return it, nil
}

// decodeFileItem decodes an item file's contents.
func decodeFileItem(b []byte) (fileItem, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var it fileItem
	if err := dec.Decode(&it); err != nil || it == nil {
		return nil, errors.New("not a JSON object")
	}
	return it, nil
}

// attrs is the item a file item stands for: a JSON string is S, a number
// N, true and false BOOL, anything else NULL.
func (it fileItem) attrs() Item {
	item := make(Item, len(it))
	for k, v := range it {
		switch v := v.(type) {
		case string:
			item[k] = Attr{Type: TypeS, Value: v}
		case json.Number:
			item[k] = Attr{Type: TypeN, Value: string(v)}
		case bool:
			item[k] = Attr{Type: "BOOL"}
		default:
			item[k] = Attr{Type: "NULL"}
		}
	}
	return item
}

// num reads a number attribute floored to whole units, as the decoders
// do; ok is false when it is absent or not a number.
func (it fileItem) num(attr string) (int64, bool) {
	v, isNum := it[attr].(json.Number)
	if !isNum {
		return 0, false
	}
	n, err := parseN("", "", attr, string(v))
	return n, err == nil
}

// numN reads a number attribute's exact text; ok is false when it is
// absent or not a number the decoders accept.
func (it fileItem) numN(attr string) (string, bool) {
	v, isNum := it[attr].(json.Number)
	if !isNum {
		return "", false
	}
	if _, err := parseN("", "", attr, string(v)); err != nil {
		return "", false
	}
	return string(v), true
}

func (it fileItem) str(attr string) (string, bool) {
	s, ok := it[attr].(string)
	return s, ok
}

func jn(v int64) json.Number { return json.Number(i64(v)) }

// fileItemOf is the file item of an item (its S and N attributes).
func fileItemOf(item Item) fileItem {
	it := make(fileItem, len(item))
	for k, v := range item {
		switch v.Type {
		case TypeS:
			it[k] = v.Value
		case TypeN:
			it[k] = json.Number(v.Value)
		}
	}
	return it
}

// get reads an item for a Get method: its attributes, or ErrNotFound.
// The file is read without the lock; ctx is only checked first.
func (t *FileTable) get(ctx context.Context, pk, sk string) (Item, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	it, err := t.read(pk, sk)
	if err != nil {
		return nil, err
	}
	if it == nil {
		return nil, ErrNotFound
	}
	return it.attrs(), nil
}

// fileNever is the modification time of an item file that never expires
// (no ttl, or one the clean-up never acts on): 2200-01-01 UTC (see
// FileTable).
var fileNever = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// fileExpiry is the modification time of the item file of it (with sort
// key sk): the earliest whole second at which collectable may hold, so
// that an item whose file's time has not passed is not collectable. That
// is its ttl floored, or, for a LOCK, the later of that and its
// lease_expires_at floored; fileNever when it has no ttl collectable
// reads, or one at or past fileNever.
func fileExpiry(sk string, it fileItem) time.Time {
	ttl, ok := it.num(AttrTTL)
	if !ok || ttl <= 0 || ttl >= fileNever.Unix() {
		return fileNever
	}
	if sk == SKLock {
		if exp, ok := it.num(AttrLeaseExpiresAt); ok && exp > ttl {
			ttl = min(exp, fileNever.Unix())
		}
	}
	return time.Unix(ttl, 0)
}

// write replaces the item (pk, sk): a temporary file in the same
// directory, its modification time set to fileExpiry, fsynced, renamed
// over the item, and the directory fsynced.
func (t *fileCore) write(pk, sk string, it fileItem) error {
	it["pk"], it["sk"] = pk, sk
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(it); err != nil {
		return fmt.Errorf("isr: encode %s/%s: %w", pk, sk, err)
	}
	dir := t.pkDir(pk)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		// The fan-out directories are made under the same stripe's lock.
		leaf := filepath.Dir(dir)
		fan := filepath.Dir(leaf)
		for _, d := range [][2]string{{fan, t.dir}, {leaf, fan}, {dir, leaf}} {
			if err := t.mkdir(d[0], d[1]); err != nil {
				return fmt.Errorf("isr: write %s/%s: %w", pk, sk, err)
			}
		}
	}
	f, err := os.CreateTemp(dir, fileTmp+"*")
	if err != nil {
		return fmt.Errorf("isr: write %s/%s: %w", pk, sk, err)
	}
	tmp := f.Name()
	_, err = f.Write(buf.Bytes())
	if err == nil {
		exp := fileExpiry(sk, it)
		err = os.Chtimes(tmp, exp, exp)
	}
	if err == nil && t.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, t.path(pk, sk))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("isr: write %s/%s: %w", pk, sk, err)
	}
	return t.syncDir(dir)
}

// remove deletes the item (pk, sk) if it exists.
func (t *fileCore) remove(pk, sk string) error {
	err := os.Remove(t.path(pk, sk))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("isr: delete %s/%s: %w", pk, sk, err)
	}
	return t.syncDir(t.pkDir(pk))
}

// mkdir makes dir, and fsyncs parent if it did; a dir that exists is no
// error.
func (t *fileCore) mkdir(dir, parent string) error {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return t.syncDir(parent)
}

func (t *fileCore) syncDir(dir string) error {
	if !t.sync {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("isr: sync %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("isr: sync %s: %w", dir, err)
	}
	return nil
}

// GetMeta implements Table.
func (t *FileTable) GetMeta(ctx context.Context, pk string) (Meta, error) {
	if err := t.check(); err != nil {
		return Meta{}, err
	}
	return ItemGetter(t.get).GetMeta(ctx, pk)
}

// GetLease implements Table.
func (t *FileTable) GetLease(ctx context.Context, pk string) (Lease, error) {
	if err := t.check(); err != nil {
		return Lease{}, err
	}
	return ItemGetter(t.get).GetLease(ctx, pk)
}

// GetRequest implements Table.
func (t *FileTable) GetRequest(ctx context.Context, pk, k string) (Request, error) {
	if err := t.check(); err != nil {
		return Request{}, err
	}
	return ItemGetter(t.get).GetRequest(ctx, pk, k)
}

// GetVersion implements Table.
func (t *FileTable) GetVersion(ctx context.Context, pk, id string) (Version, error) {
	if err := t.check(); err != nil {
		return Version{}, err
	}
	return ItemGetter(t.get).GetVersion(ctx, pk, id)
}

// leaseOK is the condition on LOCK of both recipes and of a refresh: it
// carries token and lease_expires_at > now.
func (t *FileTable) leaseOK(pk, token string, now time.Time) (bool, error) {
	lock, err := t.read(pk, SKLock)
	if err != nil || lock == nil {
		return false, err
	}
	// A LOCK that cannot be decoded holds for nobody.
	l, err := DecodeLease(pk, lock.attrs())
	return err == nil && holds(l, token, now), nil
}

// requestOK is the condition on a REQ# item that is completed, failed or
// abandoned: STARTED with the caller's request_hash.
func (t *FileTable) requestOK(pk string, rc *RequestCompletion) (fileItem, bool, error) {
	r, err := t.read(pk, RequestSKPrefix+rc.Key)
	if err != nil || r == nil {
		return nil, false, err
	}
	st, _ := r.str(AttrStatus)
	h, _ := r.str(AttrRequestHash)
	return r, requestStarted(st, h, rc), nil
}

// checkRequest evaluates the condition on the REQ# item a publish
// completes, when rc is non-nil, in tx; it returns the item read.
func (t *FileTable) checkRequest(tx *txCheck, pk string, rc *RequestCompletion) (fileItem, error) {
	if rc == nil {
		return nil, nil
	}
	req, ok, err := t.requestOK(pk, rc)
	if err == nil && !ok {
		tx.failRequest()
	}
	return req, err
}

// AcquireLease implements Table.
func (t *FileTable) AcquireLease(ctx context.Context, in AcquireInput) (Lease, error) {
	if err := t.check(); err != nil {
		return Lease{}, err
	}
	if err := ValidateAcquire(in); err != nil {
		return Lease{}, err
	}
	unlock, err := t.lock(ctx, in.PK)
	if err != nil {
		return Lease{}, err
	}
	defer unlock()
	lock, err := t.read(in.PK, SKLock)
	if err != nil {
		return Lease{}, err
	}
	var heldErr error
	if lock != nil {
		if _, err := getN(in.PK, SKLock, lock.attrs(), AttrLeaseExpiresAt, true); err != nil {
			return Lease{}, err
		}
		if exp, _ := lock.numN(AttrLeaseExpiresAt); cmpNTime(exp, 0, in.Now) > 0 {
			if tok, _ := lock.str(AttrLeaseToken); tok == in.Token {
				return DecodeLease(in.PK, lock.attrs()) // a retried acquire: already ours
			}
			heldErr = LeaseHeld(in.PK, lock.attrs())
		}
	}
	changed := false
	if in.IfMetaNotNewer != nil {
		gen, found, err := t.seenGeneratedAt(in.PK)
		if err != nil {
			return Lease{}, err
		}
		changed = found && cmpN(gen, 0, MetaNotNewerText(in), 0) > 0
	}
	if heldErr != nil || changed {
		return Lease{}, AcquireRefused(in, heldErr, changed)
	}
	if err := t.write(in.PK, SKLock, fileItemOf(LeaseItem(in.PK, in.Token, in.ExpiresAt, in.TTL))); err != nil {
		return Lease{}, err
	}
	return AcquiredLease(in), nil
}

// seenGeneratedAt is the generated_at a reader of META sees: the pointed
// VER# row's under recipe B, META's own otherwise.
func (t *FileTable) seenGeneratedAt(pk string) (string, bool, error) {
	meta, err := t.read(pk, SKMeta)
	if err != nil || meta == nil {
		return "", false, err
	}
	attrs := meta.attrs()
	cur, ok, err := pointerSK(pk, attrs)
	if err != nil {
		return "", false, err
	}
	sk := SKMeta
	if ok {
		ver, err := t.read(pk, cur)
		if err != nil {
			return "", false, err
		}
		if ver == nil {
			return "", false, missingPointer(pk, cur)
		}
		attrs, sk = ver.attrs(), cur
	}
	if _, err := getN(pk, sk, attrs, AttrGeneratedAt, true); err != nil {
		return "", true, err
	}
	return attrs[AttrGeneratedAt].Value, true, nil
}

// RefreshLease implements Table.
func (t *FileTable) RefreshLease(ctx context.Context, in RefreshInput) (Lease, error) {
	if err := t.check(); err != nil {
		return Lease{}, err
	}
	if err := ValidateRefresh(in); err != nil {
		return Lease{}, err
	}
	pk := in.Lease.PK
	unlock, err := t.lock(ctx, pk)
	if err != nil {
		return Lease{}, err
	}
	defer unlock()
	ok, err := t.leaseOK(pk, in.Lease.Token, in.Now)
	if err != nil {
		return Lease{}, err
	}
	if !ok {
		return Lease{}, LeaseLost("refresh", pk)
	}
	lock, err := t.read(pk, SKLock)
	if err != nil {
		return Lease{}, err
	}
	lock[AttrLeaseExpiresAt], lock[AttrTTL] = jn(in.ExpiresAt), jn(in.TTL)
	if err := t.write(pk, SKLock, lock); err != nil {
		return Lease{}, err
	}
	return DecodeLease(pk, lock.attrs())
}

// ReleaseLease implements Table.
func (t *FileTable) ReleaseLease(ctx context.Context, lease Lease) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := ValidateLease(lease); err != nil {
		return err
	}
	unlock, err := t.lock(ctx, lease.PK)
	if err != nil {
		return err
	}
	defer unlock()
	lock, err := t.read(lease.PK, SKLock)
	if err != nil {
		return err
	}
	if tok, _ := lock.str(AttrLeaseToken); lock == nil || tok != lease.Token {
		return LeaseLost("release", lease.PK)
	}
	return t.remove(lease.PK, SKLock)
}

// complete sets a REQ# item to COMPLETED with result_s3_key.
func (t *FileTable) complete(pk string, rc *RequestCompletion, req fileItem, s3Key string) error {
	if rc == nil {
		return nil
	}
	req[AttrStatus], req[AttrResultS3Key] = string(RequestCompleted), s3Key
	return t.write(pk, RequestSKPrefix+rc.Key, req)
}

// Publish implements Table (recipe A). Items, in order: LOCK, META, REQ#.
func (t *FileTable) Publish(ctx context.Context, in PublishInput) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := ValidatePublish(in); err != nil {
		return err
	}
	pk := in.Lease.PK
	unlock, err := t.lock(ctx, pk)
	if err != nil {
		return err
	}
	defer unlock()
	tx := newTxCheck("publish", pk, 2, in.Request)
	ok, err := t.leaseOK(pk, in.Lease.Token, in.Now)
	if err != nil {
		return err
	}
	if !ok {
		tx.fail(0, ErrLeaseLost)
	}
	if in.Monotonic {
		meta, err := t.read(pk, SKMeta)
		if err != nil {
			return err
		}
		if _, has := meta[AttrGeneratedAt]; has {
			if g, ok := meta.num(AttrGeneratedAt); !ok || !(g < in.Meta.GeneratedAt) {
				tx.fail(1, ErrNotNewer)
			}
		}
	}
	req, err := t.checkRequest(tx, pk, in.Request)
	if err != nil {
		return err
	}
	if err := tx.err(); err != nil {
		return err
	}
	if err := t.write(pk, SKMeta, fileItemOf(MetaItem(pk, in.Meta))); err != nil {
		return err
	}
	if err := t.remove(pk, SKLock); err != nil {
		return err
	}
	return t.complete(pk, in.Request, req, in.Meta.S3Key)
}

// PublishPointer implements Table (recipe B). Items, in order: LOCK, VER#,
// META, REQ#.
func (t *FileTable) PublishPointer(ctx context.Context, in PublishPointerInput) (Meta, error) {
	if err := t.check(); err != nil {
		return Meta{}, err
	}
	if err := ValidatePublishPointer(in); err != nil {
		return Meta{}, err
	}
	pk := in.Lease.PK
	unlock, err := t.lock(ctx, pk)
	if err != nil {
		return Meta{}, err
	}
	defer unlock()
	m := PointerMeta(in)
	tx := newTxCheck("publish-pointer", pk, 3, in.Request)
	ok, err := t.leaseOK(pk, in.Lease.Token, in.Now)
	if err != nil {
		return Meta{}, err
	}
	if !ok {
		tx.fail(0, ErrLeaseLost)
	}
	if ver, err := t.read(pk, m.CurrentSK); err != nil {
		return Meta{}, err
	} else if ver != nil {
		tx.fail(1, ErrVersionExists)
	}
	meta, err := t.read(pk, SKMeta)
	if err != nil {
		return Meta{}, err
	}
	checkPointerMeta(tx, in, meta)
	req, err := t.checkRequest(tx, pk, in.Request)
	if err != nil {
		return Meta{}, err
	}
	if err := tx.err(); err != nil {
		return Meta{}, err
	}
	if err := t.write(pk, m.CurrentSK, fileItemOf(VersionItem(pk, in.Version))); err != nil {
		return Meta{}, err
	}
	if err := t.updatePointerMeta(pk, meta, m); err != nil {
		return Meta{}, err
	}
	if err := t.remove(pk, SKLock); err != nil {
		return Meta{}, err
	}
	if err := t.complete(pk, in.Request, req, in.Version.S3Key); err != nil {
		return Meta{}, err
	}
	if in.Previous != "" && in.Previous != m.CurrentSK {
		if err := t.retireVersion(pk, in.Previous, in.PreviousTTL); err != nil {
			return Meta{}, err
		}
	}
	return m, nil
}

// checkPointerMeta is the condition of a recipe-B publish on META (item 2
// of tx): META's version is in.ExpectedVersion (0 when META has none), it
// points to in.Previous when that is set, and, with in.Monotonic, its
// content is older than in.Version's.
func checkPointerMeta(tx *txCheck, in PublishPointerInput, meta fileItem) {
	version, vok := int64(0), true
	if _, has := meta[AttrVersion]; has {
		version, vok = meta.num(AttrVersion)
	}
	cur, _ := meta.str(AttrCurrentSK)
	if !vok || version != in.ExpectedVersion || (in.Previous != "" && cur != in.Previous) {
		tx.fail(2, ErrVersionConflict)
	} else if _, has := meta[AttrGeneratedAt]; in.Monotonic && has {
		if g, ok := meta.num(AttrGeneratedAt); !ok || !(g < in.Version.GeneratedAt) {
			tx.fail(2, ErrNotNewer)
		}
	}
}

// updatePointerMeta writes META of pk as a recipe-B publish leaves it: meta
// (as read, nil when absent) with m's pointer attributes set and those m
// leaves empty removed. META is updated, not replaced: attributes of other
// writers stay.
func (t *FileTable) updatePointerMeta(pk string, meta fileItem, m Meta) error {
	if meta == nil {
		meta = fileItem{}
	}
	set, remove := PointerMetaUpdate(m)
	for _, a := range remove {
		delete(meta, a)
	}
	for a, v := range fileItemOf(set) {
		meta[a] = v
	}
	return t.write(pk, SKMeta, meta)
}

// retireVersion gives the VER# row sk of pk, superseded by a recipe-B
// publish, its ttl, which lets it go. An absent row stays absent.
func (t *FileTable) retireVersion(pk, sk string, ttl int64) error {
	prev, err := t.read(pk, sk)
	if err != nil || prev == nil {
		return err
	}
	prev[AttrTTL] = jn(ttl)
	return t.write(pk, sk, prev)
}

// BeginRequest implements Table.
func (t *FileTable) BeginRequest(ctx context.Context, in BeginRequestInput) (Request, bool, error) {
	if err := t.check(); err != nil {
		return Request{}, false, err
	}
	if err := ValidateBeginRequest(in); err != nil {
		return Request{}, false, err
	}
	unlock, err := t.lock(ctx, in.PK)
	if err != nil {
		return Request{}, false, err
	}
	defer unlock()
	sk := RequestSKPrefix + in.Key
	cur, err := t.read(in.PK, sk)
	if err != nil {
		return Request{}, false, err
	}
	live := cur != nil
	if ttl, ok := cur.numN(AttrTTL); live && ok && cmpNTime(ttl, 0, in.Now) <= 0 {
		live = false // past its ttl: counts as absent
	}
	if live {
		st, _ := cur.str(AttrStatus)
		h, _ := cur.str(AttrRequestHash)
		if !retakable(in, st, h) {
			return ExistingRequest(in, cur.attrs())
		}
	}
	if err := t.write(in.PK, sk, fileItemOf(RequestItem(in))); err != nil {
		return Request{}, false, err
	}
	return BegunRequest(in), true, nil
}

// FailRequest implements Table.
func (t *FileTable) FailRequest(ctx context.Context, pk, k, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	return t.requestOp(ctx, "fail-request", pk, k, hash, func(req fileItem) error {
		req[AttrStatus] = string(RequestFailed)
		return t.write(pk, RequestSKPrefix+k, req)
	})
}

// AbandonRequest implements Table.
func (t *FileTable) AbandonRequest(ctx context.Context, pk, k, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	return t.requestOp(ctx, "abandon-request", pk, k, hash, func(fileItem) error {
		return t.remove(pk, RequestSKPrefix+k)
	})
}

func (t *FileTable) requestOp(ctx context.Context, op, pk, k, hash string, apply func(fileItem) error) error {
	if err := ValidateRequestRef(pk, k, hash); err != nil {
		return err
	}
	unlock, err := t.lock(ctx, pk)
	if err != nil {
		return err
	}
	defer unlock()
	req, ok, err := t.requestOK(pk, &RequestCompletion{Key: k, Hash: hash})
	if err != nil {
		return err
	}
	if !ok {
		return RequestNotStarted(op, pk)
	}
	return apply(req)
}
