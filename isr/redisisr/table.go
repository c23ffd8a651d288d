package redisisr

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/storekit"
)

// Client is what Table needs from go-redis: running scripts and
// reading a hash. *redis.Client (also from redis.NewFailoverClient),
// *redis.ClusterClient and *redis.Ring satisfy it.
type Client interface {
	redis.Scripter
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
}

var (
	_ Client    = (*redis.Client)(nil)
	_ Client    = (*redis.ClusterClient)(nil)
	_ Client    = (*redis.Ring)(nil)
	_ isr.Table = (*Table)(nil)
)

var (
	//go:embed lua/common.lua
	luaCommon string
	//go:embed lua/acquire.lua
	luaAcquire string
	//go:embed lua/refresh.lua
	luaRefresh string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/publish.lua
	luaPublish string
	//go:embed lua/publish_pointer.lua
	luaPublishPointer string
	//go:embed lua/begin.lua
	luaBegin string
	//go:embed lua/fail.lua
	luaFail string
	//go:embed lua/abandon.lua
	luaAbandon string

	scriptAcquire        = redis.NewScript(luaCommon + luaAcquire)
	scriptRefresh        = redis.NewScript(luaCommon + luaRefresh)
	scriptRelease        = redis.NewScript(luaCommon + luaRelease)
	scriptPublish        = redis.NewScript(luaCommon + luaPublish)
	scriptPublishPointer = redis.NewScript(luaCommon + luaPublishPointer)
	scriptBegin          = redis.NewScript(luaCommon + luaBegin)
	scriptFail           = redis.NewScript(luaCommon + luaFail)
	scriptAbandon        = redis.NewScript(luaCommon + luaAbandon)
)

// DefaultPrefix is the key prefix of a Table without
// WithPrefix.
const DefaultPrefix = "isr:"

// Option configures a Table. NewTable reports every
// invalid option as an *storekit.OptionError matching idem.ErrInvalidOption.
type Option func(*config)

type config struct {
	storekit.Options
	prefix string
}

// WithPrefix sets the prefix of every key (default "isr:"), so several
// tables can share one Redis. It may not contain '{' or '}', which would
// change the hash tag.
func WithPrefix(prefix string) Option {
	return func(c *config) {
		if strings.ContainsAny(prefix, "{}") {
			c.Invalid("WithPrefix", "prefix %q contains '{' or '}'", prefix)
			return
		}
		c.prefix = prefix
	}
}

// Table is an isr.Table on Redis (standalone, Sentinel, Cluster or Ring).
//
// An item is one hash at <prefix>{<pk>}:<sk> whose fields are the DynamoDB
// item's attribute names, pk and sk included, with the same values:
// strings as they are, numbers in the decimal text DynamoDB accepts. So
// META of a cache key is, with the default prefix,
//
//	isr:{CACHE#<sha256 hex>}:META  pk CACHE#… sk META s3_key … generated_at 1700000000 revalidate_seconds 60 etag "…"
//
// and a tool reads one schema on DynamoDB and Redis. The {pk} hash tag puts
// every item of a cache key in one Cluster slot (and Ring shard).
//
// Every write is one embedded Lua script (EVALSHA, falling back to EVAL):
// acquire, refresh, release, recipe A (condition on LOCK, put META, delete
// LOCK, complete REQ#) and recipe B (condition on LOCK, put VER# if absent,
// update META with the optimistic version, delete LOCK, complete REQ#) each
// run atomically, with the same conditions and the same refusals
// (*isr.TxError with DynamoDB's cancellation reasons) as dynamoisr.Table. Reads are
// HGETALL; a META with current_sk is followed to its VER# row, as on
// DynamoDB.
//
// Time: the isr.Table interface passes the caller's Now to every method, and
// expiry is decided with it against the items' own numbers, never by the
// Redis server's clock (the conformance suite runs at fixed instants), so
// the workers' clocks must agree as on DynamoDB. Numbers are compared
// exactly (decimal text, no rounding to a double), with the caller's Now as
// exact decimal text, as the Go side compares them, so the value a worker
// read is the value a script conditions on. The ttl attribute is garbage
// collection for the deployment; no key gets a native expiry and no
// decision reads ttl except a REQ# item's, as on DynamoDB.
type Table struct {
	client Client
	prefix string
}

// NewTable returns a Table on client. It does no I/O. A nil
// client and every invalid option are reported, joined, each an
// *storekit.OptionError matching idem.ErrInvalidOption.
func NewTable(client Client, opts ...Option) (*Table, error) {
	c := config{Options: storekit.Options{Store: "redisisr"}, prefix: DefaultPrefix}
	if client == nil {
		c.Invalid("NewTable", "Redis client is nil")
	}
	for _, o := range opts {
		if o == nil {
			c.Invalid("NewTable", "nil option")
			continue
		}
		o(&c)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return &Table{client: client, prefix: c.prefix}, nil
}

// check refuses a Table that NewTable did not make.
func (t *Table) check() error {
	if t == nil || t.client == nil {
		return &storekit.OptionError{Option: "redisisr.Table", Reason: "nil or zero Table: use NewTable"}
	}
	return nil
}

// Key returns the Redis key of the item (pk, sk) ("" for a nil or zero
// Table).
func (t *Table) Key(pk, sk string) string {
	if t.check() != nil {
		return ""
	}
	return t.key(pk, sk)
}

func (t *Table) key(pk, sk string) string { return t.prefix + "{" + pk + "}:" + sk }

func (t *Table) get(ctx context.Context, pk, sk string) (isr.Item, error) {
	h, err := t.client.HGetAll(ctx, t.key(pk, sk)).Result()
	if err != nil {
		return nil, fmt.Errorf("isr: get %s/%s: %w", pk, sk, err)
	}
	if len(h) == 0 {
		return nil, isr.ErrNotFound
	}
	return isr.ItemFromStrings(h), nil
}

// GetMeta implements isr.Table.
func (t *Table) GetMeta(ctx context.Context, pk string) (isr.Meta, error) {
	if err := t.check(); err != nil {
		return isr.Meta{}, err
	}
	return isr.ItemGetter(t.get).GetMeta(ctx, pk)
}

// GetLease implements isr.Table.
func (t *Table) GetLease(ctx context.Context, pk string) (isr.Lease, error) {
	if err := t.check(); err != nil {
		return isr.Lease{}, err
	}
	return isr.ItemGetter(t.get).GetLease(ctx, pk)
}

// GetRequest implements isr.Table.
func (t *Table) GetRequest(ctx context.Context, pk, k string) (isr.Request, error) {
	if err := t.check(); err != nil {
		return isr.Request{}, err
	}
	return isr.ItemGetter(t.get).GetRequest(ctx, pk, k)
}

// GetVersion implements isr.Table.
func (t *Table) GetVersion(ctx context.Context, pk, id string) (isr.Version, error) {
	if err := t.check(); err != nil {
		return isr.Version{}, err
	}
	return isr.ItemGetter(t.get).GetVersion(ctx, pk, id)
}

// reply is a script's answer: a status word and its details.
type reply []any

func (t *Table) run(ctx context.Context, op, pk string, s *redis.Script, keys []string, args ...any) (reply, error) {
	v, err := s.Run(ctx, t.client, keys, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("isr: %s on %s: %w", op, pk, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) == 0 {
		return nil, fmt.Errorf("isr: %s on %s: unexpected script reply %v", op, pk, v)
	}
	if _, ok := r[0].(string); !ok {
		return nil, fmt.Errorf("isr: %s on %s: unexpected script reply %v", op, pk, v)
	}
	return r, nil
}

func (r reply) status() string { return r[0].(string) }

func (r reply) str(i int) string {
	if i < len(r) {
		if s, ok := r[i].(string); ok {
			return s
		}
	}
	return ""
}

func (r reply) flag(i int) bool {
	if i < len(r) {
		if n, ok := r[i].(int64); ok {
			return n != 0
		}
	}
	return false
}

// item decodes a flat HGETALL list at index i.
func (r reply) item(i int) isr.Item {
	h := map[string]string{}
	if i < len(r) {
		if flat, ok := r[i].([]any); ok {
			for j := 0; j+1 < len(flat); j += 2 {
				k, _ := flat[j].(string)
				v, _ := flat[j+1].(string)
				h[k] = v
			}
		}
	}
	return isr.ItemFromStrings(h)
}

// reasons reads the per-item cancellation reasons at index i.
func (r reply) reasons(i int) []string {
	var out []string
	if i < len(r) {
		if list, ok := r[i].([]any); ok {
			for _, x := range list {
				s, _ := x.(string)
				out = append(out, s)
			}
		}
	}
	return out
}

// corrupt turns a CORRUPT reply (sk, attribute, reason) into its error.
func (r reply) corrupt(pk string) error {
	return &isr.CorruptItemError{PK: pk, SK: r.str(1), Attr: r.str(2), Reason: r.str(3)}
}

func unexpected(op, pk string, r reply) error {
	return fmt.Errorf("isr: %s on %s: unexpected script reply %v", op, pk, []any(r))
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }

// optN is a number argument that is absent when 0.
func optN(v int64) string {
	if v == 0 {
		return ""
	}
	return i64(v)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// AcquireLease implements isr.Table.
func (t *Table) AcquireLease(ctx context.Context, in isr.AcquireInput) (isr.Lease, error) {
	if err := t.check(); err != nil {
		return isr.Lease{}, err
	}
	if err := isr.ValidateAcquire(in); err != nil {
		return isr.Lease{}, err
	}
	seen := ""
	if in.IfMetaNotNewer != nil {
		seen = isr.MetaNotNewerText(in)
	}
	r, err := t.run(ctx, "acquire", in.PK, scriptAcquire, []string{t.key(in.PK, isr.SKLock), t.key(in.PK, isr.SKMeta)},
		in.PK, in.Token, isr.TimeText(in.Now), i64(in.ExpiresAt), i64(in.TTL), seen)
	if err != nil {
		return isr.Lease{}, err
	}
	switch r.status() {
	case "OK":
		return isr.AcquiredLease(in), nil
	case "MINE":
		return isr.DecodeLease(in.PK, r.item(1))
	case "CORRUPT":
		return isr.Lease{}, r.corrupt(in.PK)
	case "REFUSED":
		held, changed := r.flag(1), r.flag(2)
		var heldErr error
		if held {
			heldErr = isr.LeaseHeld(in.PK, r.item(3))
		}
		if in.IfMetaNotNewer == nil && heldErr == nil {
			return isr.Lease{}, unexpected("acquire", in.PK, r)
		}
		return isr.Lease{}, isr.AcquireRefused(in, heldErr, changed)
	}
	return isr.Lease{}, unexpected("acquire", in.PK, r)
}

// RefreshLease implements isr.Table.
func (t *Table) RefreshLease(ctx context.Context, in isr.RefreshInput) (isr.Lease, error) {
	if err := t.check(); err != nil {
		return isr.Lease{}, err
	}
	if err := isr.ValidateRefresh(in); err != nil {
		return isr.Lease{}, err
	}
	pk := in.Lease.PK
	r, err := t.run(ctx, "refresh", pk, scriptRefresh, []string{t.key(pk, isr.SKLock)},
		in.Lease.Token, isr.TimeText(in.Now), i64(in.ExpiresAt), i64(in.TTL))
	if err != nil {
		return isr.Lease{}, err
	}
	switch r.status() {
	case "OK":
		return isr.DecodeLease(pk, r.item(1))
	case "LOST":
		return isr.Lease{}, isr.LeaseLost("refresh", pk)
	}
	return isr.Lease{}, unexpected("refresh", pk, r)
}

// ReleaseLease implements isr.Table.
func (t *Table) ReleaseLease(ctx context.Context, lease isr.Lease) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := isr.ValidateLease(lease); err != nil {
		return err
	}
	r, err := t.run(ctx, "release", lease.PK, scriptRelease, []string{t.key(lease.PK, isr.SKLock)}, lease.Token)
	if err != nil {
		return err
	}
	switch r.status() {
	case "OK":
		return nil
	case "LOST":
		return isr.LeaseLost("release", lease.PK)
	}
	return unexpected("release", lease.PK, r)
}

// refused maps a REFUSED publish reply to a *TxError: reasons[i] is the
// cancellation reason of transaction item i, mapped by sentinel(i).
func refused(op, pk string, reasons []string, sentinel func(int) error) error {
	te := &isr.TxError{Op: op, PK: pk, Reasons: reasons}
	for i, code := range reasons {
		if code == isr.ReasonConditionalCheckFailed {
			te.Errors = append(te.Errors, sentinel(i))
		}
	}
	return te
}

// Publish implements isr.Table (recipe A). Items, in order: LOCK, META, REQ#.
func (t *Table) Publish(ctx context.Context, in isr.PublishInput) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := isr.ValidatePublish(in); err != nil {
		return err
	}
	pk := in.Lease.PK
	keys := []string{t.key(pk, isr.SKLock), t.key(pk, isr.SKMeta)}
	hash := ""
	if in.Request != nil {
		keys = append(keys, t.key(pk, isr.RequestSKPrefix+in.Request.Key))
		hash = in.Request.Hash
	}
	m := in.Meta
	r, err := t.run(ctx, "publish", pk, scriptPublish, keys,
		pk, in.Lease.Token, isr.TimeText(in.Now), m.S3Key, i64(m.GeneratedAt), i64(m.RevalidateSeconds),
		m.ETag, optN(m.TTL), boolArg(in.Monotonic), hash)
	if err != nil {
		return err
	}
	switch r.status() {
	case "OK":
		return nil
	case "REFUSED":
		return refused("publish", pk, r.reasons(1), isr.PublishRefusal)
	}
	return unexpected("publish", pk, r)
}

// PublishPointer implements isr.Table (recipe B). Items, in order: LOCK, VER#,
// META, REQ#.
func (t *Table) PublishPointer(ctx context.Context, in isr.PublishPointerInput) (isr.Meta, error) {
	if err := t.check(); err != nil {
		return isr.Meta{}, err
	}
	if err := isr.ValidatePublishPointer(in); err != nil {
		return isr.Meta{}, err
	}
	pk := in.Lease.PK
	m := isr.PointerMeta(in)
	v := in.Version
	keys := []string{t.key(pk, isr.SKLock), t.key(pk, m.CurrentSK), t.key(pk, isr.SKMeta)}
	hash := ""
	if in.Request != nil {
		keys = append(keys, t.key(pk, isr.RequestSKPrefix+in.Request.Key))
		hash = in.Request.Hash
	}
	if in.Previous != "" {
		keys = append(keys, t.key(pk, in.Previous))
	}
	r, err := t.run(ctx, "publish-pointer", pk, scriptPublishPointer, keys,
		pk, in.Lease.Token, isr.TimeText(in.Now), m.CurrentSK, v.S3Key, i64(v.GeneratedAt), v.ETag, optN(v.TTL),
		i64(in.RevalidateSeconds), optN(in.MetaTTL), i64(in.ExpectedVersion), i64(m.Version),
		boolArg(in.Monotonic), hash, in.Previous, optN(in.PreviousTTL))
	if err != nil {
		return isr.Meta{}, err
	}
	switch r.status() {
	case "OK":
		return m, nil
	case "REFUSED":
		notNewer := r.str(2) == "newer"
		return isr.Meta{}, refused("publish-pointer", pk, r.reasons(1), func(i int) error {
			return isr.PointerRefusal(i, notNewer)
		})
	}
	return isr.Meta{}, unexpected("publish-pointer", pk, r)
}

// BeginRequest implements isr.Table.
func (t *Table) BeginRequest(ctx context.Context, in isr.BeginRequestInput) (isr.Request, bool, error) {
	if err := t.check(); err != nil {
		return isr.Request{}, false, err
	}
	if err := isr.ValidateBeginRequest(in); err != nil {
		return isr.Request{}, false, err
	}
	sk := isr.RequestSKPrefix + in.Key
	r, err := t.run(ctx, "begin-request", in.PK, scriptBegin, []string{t.key(in.PK, sk)},
		in.PK, sk, in.Hash, isr.TimeText(in.Now), i64(in.TTL), boolArg(in.RetryFailed))
	if err != nil {
		return isr.Request{}, false, err
	}
	switch r.status() {
	case "OK":
		return isr.BegunRequest(in), true, nil
	case "EXISTS":
		return isr.ExistingRequest(in, r.item(1))
	}
	return isr.Request{}, false, unexpected("begin-request", in.PK, r)
}

// FailRequest implements isr.Table.
func (t *Table) FailRequest(ctx context.Context, pk, k, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	return t.requestOp(ctx, "fail-request", scriptFail, pk, k, hash)
}

// AbandonRequest implements isr.Table.
func (t *Table) AbandonRequest(ctx context.Context, pk, k, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	return t.requestOp(ctx, "abandon-request", scriptAbandon, pk, k, hash)
}

func (t *Table) requestOp(ctx context.Context, op string, s *redis.Script, pk, k, hash string) error {
	if err := isr.ValidateRequestRef(pk, k, hash); err != nil {
		return err
	}
	r, err := t.run(ctx, op, pk, s, []string{t.key(pk, isr.RequestSKPrefix+k)}, hash)
	if err != nil {
		return err
	}
	switch r.status() {
	case "OK":
		return nil
	case "STATE":
		return isr.RequestNotStarted(op, pk)
	}
	return unexpected(op, pk, r)
}
