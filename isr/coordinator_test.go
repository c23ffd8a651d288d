package isr_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
	"github.com/idem-go/idem/stores/storetest"
)

func TestPK(t *testing.T) {
	sum := sha256.Sum256([]byte("/blog/hello?x=1"))
	h := hex.EncodeToString(sum[:])
	pk, err := isr.PK("", "/blog/hello?x=1")
	if err != nil || pk != "CACHE#"+h {
		t.Fatalf("PK = %q, %v", pk, err)
	}
	pk, err = isr.PK("acme", "/blog/hello?x=1")
	if err != nil || pk != "TENANT#acme#CACHE#"+h {
		t.Fatalf("PK = %q, %v", pk, err)
	}
	if isr.HashCacheKey("/blog/hello?x=1") != h {
		t.Fatal("HashCacheKey")
	}
	for _, bad := range [][2]string{{"", ""}, {"a#b", "/x"}, {"a\nb", "/x"}, {"\xff", "/x"}, {strings.Repeat("t", 600), "/x"}} {
		if _, err := isr.PK(bad[0], bad[1]); !errors.Is(err, isr.ErrInvalidInput) {
			t.Errorf("PK(%q, %q): want ErrInvalidInput, got %v", bad[0], bad[1], err)
		}
	}
}

func TestIdempotencyKeys(t *testing.T) {
	if k, err := isr.RequestIDKey("3f2c-req"); err != nil || k != "3f2c-req" {
		t.Fatalf("RequestIDKey = %q, %v", k, err)
	}
	if k, err := isr.MessageIDKey("059f36b4-87a3-44ab-83d2-661975830a7d"); err != nil || k != "059f36b4-87a3-44ab-83d2-661975830a7d" {
		t.Fatalf("MessageIDKey = %q, %v", k, err)
	}
	for _, bad := range []string{"", "a\x00b", strings.Repeat("x", 513)} {
		if _, err := isr.RequestIDKey(bad); !errors.Is(err, isr.ErrInvalidInput) {
			t.Errorf("RequestIDKey(%q): %v", bad, err)
		}
		if _, err := isr.MessageIDKey(bad); !errors.Is(err, isr.ErrInvalidInput) {
			t.Errorf("MessageIDKey(%q): %v", bad, err)
		}
	}
	sum := sha256.Sum256([]byte("/p|deploy-42|policy-3"))
	k, err := isr.VersionedKey("/p", "deploy-42", "policy-3")
	if err != nil || k != hex.EncodeToString(sum[:]) {
		t.Fatalf("VersionedKey = %q, %v", k, err)
	}
	k2, _ := isr.VersionedKey("/p", "deploy-43", "policy-3")
	if k2 == k {
		t.Fatal("a new deployment must give a new key")
	}
	for _, bad := range [][3]string{{"", "d", "p"}, {"/p", "", "p"}, {"/p", "d", ""}, {"/p", "d|x", "p"}, {"/p", "d", "p|x"}} {
		if _, err := isr.VersionedKey(bad[0], bad[1], bad[2]); !errors.Is(err, isr.ErrInvalidInput) {
			t.Errorf("VersionedKey%v: %v", bad, err)
		}
	}
	ab := isr.RequestHash("a", "b")
	if ab == isr.RequestHash("ab") || ab != isr.RequestHash("a", "b") {
		t.Fatal("RequestHash must be deterministic and keep field boundaries")
	}
	if isr.RequestHash() != isr.RequestHash([]string{}...) {
		t.Fatal("RequestHash of nothing")
	}
}

func TestTableNameFromEnv(t *testing.T) {
	t.Setenv(isr.EnvTableName, "")
	if _, err := isr.TableNameFromEnv(); !errors.Is(err, isr.ErrInvalidInput) {
		t.Fatalf("unset: %v", err)
	}
	t.Setenv(isr.EnvTableName, "facetheory-cache")
	if n, err := isr.TableNameFromEnv(); err != nil || n != "facetheory-cache" {
		t.Fatalf("TableNameFromEnv = %q, %v", n, err)
	}
}

func TestCoordinatorOptions(t *testing.T) {
	tb := newMemoryTable(t)
	for name, opt := range map[string]isr.Option{
		"clock":              isr.WithClock(nil),
		"lease":              isr.WithLeaseDuration(500 * time.Millisecond),
		"buffer":             isr.WithTTLBuffer(0),
		"default revalidate": isr.WithDefaultRevalidate(0),
		"meta":               isr.WithMetaTTL(-time.Second),
		"req":                isr.WithRequestTTL(0),
		"nil":                nil,
	} {
		c, err := isr.NewCoordinator(tb, opt)
		if c != nil || !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: NewCoordinator = %v, %v", name, c, err)
		}
	}
	_, err := isr.NewCoordinator(nil, isr.WithClock(nil), nil, isr.WithMetaTTL(-time.Second))
	storetest.CheckOptionErrors(t, err, "isr.NewCoordinator", "isr.WithClock", "isr.NewCoordinator", "isr.WithMetaTTL")
	var zero isr.Coordinator
	if _, err := zero.TryAcquire(context.Background(), isrtest.NewPK(t), nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("zero Coordinator: TryAcquire = %v", err)
	}
	if _, err := zero.Regenerate(context.Background(), isrtest.NewPK(t), nil, render); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("zero Coordinator: Regenerate = %v", err)
	}
}

// A render longer than a third of the lease refreshes the lease, so a slow
// but live worker keeps it and publishes.
func TestRegenerateRefreshesLease(t *testing.T) {
	tb := newMemoryTable(t)
	c := mustCoordinator(t, tb, isr.WithLeaseDuration(time.Second))
	pk := isrtest.NewPK(t)
	res, err := c.Regenerate(context.Background(), pk, nil, func(ctx context.Context, l isr.Lease) (isr.Page, error) {
		select {
		case <-time.After(2500 * time.Millisecond):
		case <-ctx.Done():
			return isr.Page{}, context.Cause(ctx)
		}
		return isr.Page{S3Key: "slow", RevalidateSeconds: 60}, nil
	})
	if err != nil || res.Outcome != isr.OutcomeRegenerated {
		t.Fatalf("slow render: %+v, %v", res, err)
	}
}

// When a refresh finds the lease gone, the render's context is cancelled
// with ErrLeaseLost and nothing is published.
func TestRegenerateLeaseLostCancelsRender(t *testing.T) {
	tb := newMemoryTable(t)
	c := mustCoordinator(t, tb, isr.WithLeaseDuration(3*time.Second))
	pk := isrtest.NewPK(t)
	var sawCause error
	_, err := c.Regenerate(context.Background(), pk, nil, func(ctx context.Context, l isr.Lease) (isr.Page, error) {
		// Someone deletes the lease and takes it.
		if err := tb.ReleaseLease(ctx, l); err != nil {
			return isr.Page{}, err
		}
		if _, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "thief", Now: time.Now(), ExpiresAt: time.Now().Unix() + 60, TTL: time.Now().Unix() + 120}); err != nil {
			return isr.Page{}, err
		}
		select {
		case <-ctx.Done():
			sawCause = context.Cause(ctx)
			return isr.Page{}, ctx.Err()
		case <-time.After(10 * time.Second):
			return isr.Page{S3Key: "late", RevalidateSeconds: 60}, nil
		}
	})
	if !errors.Is(err, isr.ErrLeaseLost) || !errors.Is(sawCause, isr.ErrLeaseLost) {
		t.Fatalf("Regenerate = %v, render saw %v; want ErrLeaseLost", err, sawCause)
	}
	if _, err := tb.GetMeta(context.Background(), pk); !errors.Is(err, isr.ErrNotFound) {
		t.Fatalf("META after a lost lease: %v", err)
	}
	if l, _ := tb.GetLease(context.Background(), pk); l.Token != "thief" {
		t.Fatalf("the new holder's lease was touched: %+v", l)
	}
}

func TestOutcomeString(t *testing.T) {
	for o, s := range map[isr.Outcome]string{isr.OutcomeFresh: "fresh", isr.OutcomeRecorded: "recorded", isr.OutcomeInProgress: "in-progress", isr.OutcomeRegenerated: "regenerated", 0: "Outcome(0)"} {
		if o.String() != s {
			t.Errorf("%d: %q", o, o.String())
		}
	}
}

// conflictOnce is a Table whose first publish is cancelled by a concurrent
// transaction, as DynamoDB does under contention.
type conflictOnce struct {
	isr.Table
	calls int
}

func (c *conflictOnce) Publish(ctx context.Context, in isr.PublishInput) error {
	c.calls++
	if c.calls == 1 {
		return &isr.TxError{Op: "publish", PK: in.Lease.PK, Reasons: []string{"None", "TransactionConflict"}, Errors: []error{isr.ErrConflict}}
	}
	return c.Table.Publish(ctx, in)
}

func TestPublishRetriesTransactionConflict(t *testing.T) {
	tb := &conflictOnce{Table: newMemoryTable(t)}
	c := mustCoordinator(t, tb)
	res, err := c.Regenerate(context.Background(), isrtest.NewPK(t), nil, render)
	if err != nil || res.Outcome != isr.OutcomeRegenerated || tb.calls != 2 {
		t.Fatalf("Regenerate = %+v, %v after %d publishes", res, err, tb.calls)
	}
}

// RegenerateFrom reuses the caller's META read: a regeneration costs
// acquire + publish, and a META published since the read wins over it.
func TestRegenerateFromCostsTwoRequests(t *testing.T) {
	tb := newMemoryTable(t)
	c := mustCoordinator(t, tb)
	ctx := context.Background()
	pk := isrtest.NewPK(t)
	seedStale(t, tb, pk)
	seen, err := c.Lookup(ctx, pk)
	if err != nil {
		t.Fatal(err)
	}
	before := tb.Requests()
	res, err := c.RegenerateFrom(ctx, pk, &seen, nil, render)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != isr.OutcomeRegenerated {
		t.Fatalf("outcome %v, want regenerated", res.Outcome)
	}
	if n := tb.Requests() - before; n != 2 {
		t.Fatalf("RegenerateFrom cost %d requests, want 2 (acquire, publish)", n)
	}
	// The read is now out of date: the lease is refused and the current
	// META is returned, with nothing rendered.
	rendered := false
	res, err = c.RegenerateFrom(ctx, pk, &seen, nil, func(ctx context.Context, l isr.Lease) (isr.Page, error) {
		rendered = true
		return isr.Page{S3Key: "x"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rendered || res.Outcome != isr.OutcomeFresh || res.Meta.S3Key == seen.S3Key {
		t.Fatalf("stale read: rendered=%v outcome=%v meta=%+v", rendered, res.Outcome, res.Meta)
	}
}

// RequestHash agrees with JavaScript: the expectation is Node's
// sha256(JSON.stringify(["acme", "/q?a=1&b=<x>", "\u2028\"\\"])) (no HTML
// escaping, as RFC 8785).
func TestRequestHashMatchesJavaScript(t *testing.T) {
	if got := isr.RequestHash("acme", "/q?a=1&b=<x>", "\u2028\"\\"); got != "18ead0c44b45ce5932046751b4b6a6f7fcda7216813dab2047f804e8c0f40102" {
		t.Fatalf("RequestHash = %s", got)
	}
}
