package isr_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
)

// TestFileTablePurgeReadsNoLiveItem: a Purge over 2,000 live items across
// 1,000 cache keys opens no item file; once some of them expire, Purge
// removes those (opening only them) and keeps the rest.
func TestFileTablePurgeReadsNoLiveItem(t *testing.T) {
	clock, dir, tb := purgeTable(t)
	ctx := context.Background()
	now := clock.Now()
	const keys = 1000
	for i := range keys {
		pk := fmt.Sprintf("CACHE#/page/%d", i)
		ttl := now.Unix() + 100 // the first half expire at +100 s
		if i >= keys/2 {
			ttl = now.Unix() + 10_000
		}
		if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "k", Hash: "h", Now: now, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		// A lease that expires at +50 s, its LOCK kept until +10,000 s.
		exp := now.Unix() + 50
		if _, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "tok", Now: now, ExpiresAt: exp, TTL: now.Unix() + 10_000}); err != nil {
			t.Fatal(err)
		}
	}
	if n := countFiles(t, dir); n != 2*keys {
		t.Fatalf("%d item files; want %d", n, 2*keys)
	}

	removed, err := tb.Purge(ctx)
	if err != nil || removed != 0 {
		t.Fatalf("Purge with nothing expired = %d, %v; want 0, nil", removed, err)
	}
	if r := isr.PurgeReads(tb); r != 0 {
		t.Fatalf("Purge with nothing expired opened %d item files; want 0", r)
	}

	// Leases expired, LOCKs' ttl not passed: still nothing to remove or read.
	clock.Advance(60 * time.Second)
	if removed, err := tb.Purge(ctx); err != nil || removed != 0 || isr.PurgeReads(tb) != 0 {
		t.Fatalf("Purge past the leases = %d, %v, %d reads; want 0, nil, 0", removed, err, isr.PurgeReads(tb))
	}

	// Half the REQ# items expired: those are read and removed, nothing else.
	clock.Advance(60 * time.Second)
	removed, err = tb.Purge(ctx)
	if err != nil || removed != keys/2 {
		t.Fatalf("Purge past half the requests = %d, %v; want %d", removed, err, keys/2)
	}
	if r := isr.PurgeReads(tb); r != keys/2 {
		t.Fatalf("Purge opened %d item files; want the %d expired", r, keys/2)
	}
	if n := countFiles(t, dir); n != keys+keys/2 {
		t.Fatalf("%d item files after Purge; want %d", n, keys+keys/2)
	}
	for i := range keys {
		pk := fmt.Sprintf("CACHE#/page/%d", i)
		_, err := tb.GetRequest(ctx, pk, "k")
		if (err == nil) != (i >= keys/2) {
			t.Fatalf("request %d after Purge: %v", i, err)
		}
		if _, err := tb.GetLease(ctx, pk); err != nil {
			t.Fatalf("lease %d after Purge: %v", i, err)
		}
	}

	// Everything expired: every item goes, and every directory with it.
	clock.Advance(time.Hour * 3)
	if removed, err := tb.Purge(ctx); err != nil || removed != keys+keys/2 {
		t.Fatalf("final Purge = %d, %v; want %d", removed, err, keys+keys/2)
	}
	if n := countFiles(t, dir); n != 0 {
		t.Fatalf("%d files or empty directories left; want none", n)
	}
}

// TestFileTableItemModTime: every item file's modification time is the
// instant the item may expire: its ttl, a LOCK's lease_expires_at when
// later, 2200-01-01 UTC for an item without a ttl.
func TestFileTableItemModTime(t *testing.T) {
	clock := isrtest.NewClock(isrtest.Base())
	tb, err := isr.NewFileTable(t.TempDir(), isr.WithTableClock(clock.Now), isr.WithoutCleanup(), isr.WithoutFileSync())
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	ctx, pk, now := context.Background(), isrtest.NewPK(t), clock.Now()
	base := now.Unix()
	mtime := func(sk string) int64 {
		t.Helper()
		fi, err := os.Lstat(tb.Path(pk, sk))
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime().Unix()
	}
	if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "k", Hash: "h", Now: now, TTL: base + 86400}); err != nil {
		t.Fatal(err)
	}
	if got := mtime(isr.RequestSKPrefix + "k"); got != base+86400 {
		t.Errorf("REQ# file time %d; want its ttl %d", got, base+86400)
	}
	lease, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "a", Now: now, ExpiresAt: base + 30, TTL: base + 3630})
	if err != nil {
		t.Fatal(err)
	}
	if got := mtime(isr.SKLock); got != base+3630 {
		t.Errorf("LOCK file time %d; want its ttl %d", got, base+3630)
	}
	if lease, err = tb.RefreshLease(ctx, isr.RefreshInput{Lease: lease, Now: now, ExpiresAt: base + 60, TTL: base + 3660}); err != nil {
		t.Fatal(err)
	}
	if got := mtime(isr.SKLock); got != base+3660 {
		t.Errorf("LOCK file time %d after a refresh; want its new ttl %d", got, base+3660)
	}
	if err := tb.Publish(ctx, isr.PublishInput{Lease: lease, Now: now, Meta: isr.Meta{PK: pk, S3Key: "p", GeneratedAt: base, RevalidateSeconds: 60}}); err != nil {
		t.Fatal(err)
	}
	never := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	if got := mtime(isr.SKMeta); got != never {
		t.Errorf("META without ttl: file time %d; want %d (2200-01-01)", got, never)
	}
}

// TestFileTablePurgeByHand: files the walk finds that no FileTable wrote
// as they are. A live item written by hand (its file's time the moment of
// writing, here past on the table's clock) is opened once, kept, and given
// its ttl as modification time (a LOCK whose lease ends after its ttl:
// the lease's end), so the next pass does not open it; an expired one is
// removed; temporary files left by crashed writers go whatever their
// modification time.
func TestFileTablePurgeByHand(t *testing.T) {
	clock, _, tb := purgeTable(t)
	ctx, now := context.Background(), clock.Now()
	past := now.Add(-time.Hour)
	put := func(pk string, ttl int64) string {
		t.Helper()
		return putFile(t, tb.Path(pk, isr.RequestSKPrefix+"k"), past,
			fmt.Sprintf(`{"pk":%q,"sk":"REQ#k","status":"STARTED","request_hash":"h","ttl":%d}`, pk, ttl))
	}
	live, expired := isrtest.NewPK(t), isrtest.NewPK(t)
	livePath := put(live, now.Unix()+100)
	expiredPath := put(expired, now.Unix()-1)
	held := isrtest.NewPK(t)
	heldPath := putFile(t, tb.Path(held, isr.SKLock), past,
		fmt.Sprintf(`{"pk":%q,"sk":"LOCK","lease_token":"a","lease_expires_at":%d,"ttl":%d}`, held, now.Unix()+200, now.Unix()-10))
	var tmps []string
	for i, mt := range []time.Time{past, now, time.Now().Add(time.Hour), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)} {
		p := filepath.Join(filepath.Dir(livePath), fmt.Sprintf(".tmp-%d", i))
		if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
		tmps = append(tmps, p)
	}

	removed, err := tb.Purge(ctx)
	if err != nil || removed != 1 {
		t.Fatalf("Purge = %d, %v; want 1 (the expired item)", removed, err)
	}
	if r := isr.PurgeReads(tb); r != 3 {
		t.Fatalf("Purge opened %d item files; want 3 (all by their file times)", r)
	}
	if _, err := os.Stat(expiredPath); !os.IsNotExist(err) {
		t.Fatalf("expired item: %v; want it removed", err)
	}
	if _, err := os.Stat(filepath.Dir(expiredPath)); !os.IsNotExist(err) {
		t.Fatalf("emptied cache-key directory: %v; want it removed", err)
	}
	for _, p := range tmps {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("temporary file %s: %v; want it removed", filepath.Base(p), err)
		}
	}
	if r, err := tb.GetRequest(ctx, live, "k"); err != nil || r.Status != isr.RequestStarted {
		t.Fatalf("live item after Purge: %+v, %v", r, err)
	}
	fi, err := os.Stat(livePath)
	if err != nil || fi.ModTime().Unix() != now.Unix()+100 {
		t.Fatalf("live item's file time after Purge: %v, %v; want its ttl", fi.ModTime(), err)
	}
	if l, err := tb.GetLease(ctx, held); err != nil || l.Token != "a" {
		t.Fatalf("held LOCK after Purge: %+v, %v", l, err)
	}
	fi, err = os.Stat(heldPath)
	if err != nil || fi.ModTime().Unix() != now.Unix()+200 {
		t.Fatalf("held LOCK's file time after Purge: %v, %v; want its lease's end", fi.ModTime(), err)
	}
	if removed, err := tb.Purge(ctx); err != nil || removed != 0 || isr.PurgeReads(tb) != 3 {
		t.Fatalf("second Purge = %d, %v, %d item files opened in all; want 0, nil, 3", removed, err, isr.PurgeReads(tb))
	}
	entries, err := os.ReadDir(filepath.Dir(livePath))
	if err != nil || len(entries) != 1 || strings.HasPrefix(entries[0].Name(), ".tmp-") {
		t.Fatalf("live item's directory after Purge: %v, %v; want the item alone", entries, err)
	}
}

// putFile writes an item file by hand, its modification time mt.
func putFile(t *testing.T, p string, mt time.Time, item string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(item), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFileTableLayout: the items of a cache key live in
// <dir>/<h0h1>/<h2>/<sha256 hex of pk>/, and its lock is .locks/<h0h1>: a
// write waits while another process holds that file, and only that one.
func TestFileTableLayout(t *testing.T) {
	dir := t.TempDir()
	tb, err := isr.NewFileTable(dir, isr.WithoutCleanup(), isr.WithoutFileSync())
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	pk := isrtest.NewPK(t)
	h := sumHexOf(pk)
	if got, want := tb.Path(pk, isr.SKMeta), filepath.Join(dir, h[:2], h[2:3], h, "META.json"); got != want {
		t.Fatalf("Path = %s; want %s", got, want)
	}
	other := isrtest.NewPK(t)
	for sumHexOf(other)[:2] == h[:2] {
		other = isrtest.NewPK(t)
	}
	fl := flock.New(filepath.Join(dir, ".locks", h[:2]))
	if ok, err := fl.TryLock(); !ok || err != nil {
		t.Fatalf("lock .locks/%s: %v, %v", h[:2], ok, err)
	}
	defer fl.Unlock()
	acquire := func(pk string, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		now := time.Now()
		_, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "a", Now: now, ExpiresAt: now.Unix() + 30, TTL: now.Unix() + 3630})
		return err
	}
	if err := acquire(pk, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire while .locks/%s is held elsewhere: %v; want it to wait (DeadlineExceeded)", h[:2], err)
	}
	if err := acquire(other, time.Minute); err != nil {
		t.Fatalf("acquire of a cache key of another lock file: %v", err)
	}
}

func sumHexOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// purgeTable is a FileTable in a directory of its own, on a clock of its
// own, without clean-up or fsync: Purge is called by the test.
func purgeTable(t *testing.T) (*isrtest.Clock, string, *isr.FileTable) {
	t.Helper()
	clock := isrtest.NewClock(isrtest.Base())
	dir := t.TempDir()
	tb, err := isr.NewFileTable(dir, isr.WithTableClock(clock.Now), isr.WithoutCleanup(), isr.WithoutFileSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	return clock, dir, tb
}
