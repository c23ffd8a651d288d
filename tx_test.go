package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// memTx is a storekit.TxRunner over a memory store: body runs, and the
// completion it returns is written with Store.Complete conditioned on the
// nonce, standing in for a commit. commitErr, when set, is returned instead
// of writing anything (a transaction that did not commit).
type memTx struct {
	s         storekit.Store
	commitErr error
}

func (m memTx) RunTx(ctx context.Context, c storekit.TxClaim, body func(context.Context) (storekit.Completion, error)) error {
	comp, err := body(ctx)
	if err != nil {
		return err
	}
	if m.commitErr != nil {
		return m.commitErr
	}
	return m.s.Complete(context.WithoutCancel(ctx), c.Key, c.Nonce, comp)
}

// txRun is a call run inside a memTx.
type txRun struct {
	fn        func(context.Context) (int, error)
	commitErr error
}

func fakeTx(fn func(ctx context.Context) (int, error), commitErr error) txRun {
	return txRun{fn: fn, commitErr: commitErr}
}

// runTx runs r as a store package's DoTx runs its fn: g.Do with a
// transaction runner asked for in the context.
func runTx(ctx context.Context, g *idem.Guard[int], key string, r txRun, opts ...idem.CallOption) (int, error) {
	open := func(s storekit.Store) (storekit.TxRunner, error) { return memTx{s: s, commitErr: r.commitErr}, nil }
	return g.Do(storekit.WithTx(ctx, open), key, r.fn, opts...)
}

// runnerFunc is a storekit.TxRunner made of a function.
type runnerFunc func(ctx context.Context, c storekit.TxClaim, body func(context.Context) (storekit.Completion, error)) error

func (f runnerFunc) RunTx(ctx context.Context, c storekit.TxClaim, body func(context.Context) (storekit.Completion, error)) error {
	return f(ctx, c, body)
}

func withRunner(ctx context.Context, r runnerFunc) context.Context {
	return storekit.WithTx(ctx, func(storekit.Store) (storekit.TxRunner, error) { return r, nil })
}

func txCtx(*idem.Guard[int]) context.Context { return context.Background() }

func TestRunTxCommitted(t *testing.T) {
	g, _ := memGuard[int](t)
	ctx := txCtx(g)
	runs := 0
	fn := func(ctx context.Context) (int, error) {
		runs++
		if tok, ok := idem.FencingToken(ctx); !ok || tok != 1 {
			t.Errorf("FencingToken = %d, %v; want 1, true", tok, ok)
		}
		return 7, nil
	}
	v, err := runTx(ctx, g, "k", fakeTx(fn, nil))
	if err != nil || v != 7 {
		t.Fatalf("RunTx = %d, %v; want 7, nil", v, err)
	}
	v, err = runTx(ctx, g, "k", fakeTx(fn, nil))
	if err != nil || v != 7 || runs != 1 {
		t.Fatalf("replay = %d, %v after %d runs; want 7, nil after 1", v, err, runs)
	}
	v, err = g.Do(ctx, "k", func(context.Context) (int, error) { runs++; return 0, nil })
	if err != nil || v != 7 || runs != 1 {
		t.Fatalf("Do after RunTx = %d, %v after %d runs; want the recorded 7", v, err, runs)
	}
}

func TestRunTxFnErrorUnlock(t *testing.T) {
	g, _ := memGuard[int](t)
	ctx := txCtx(g)
	boom := errors.New("boom")
	_, err := runTx(ctx, g, "k", fakeTx(func(context.Context) (int, error) { return 0, boom }, nil))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if rec := record(t, g, "k"); rec != nil {
		t.Fatalf("record after a failure under Unlock = %+v, want released", rec)
	}
	v, err := runTx(ctx, g, "k", fakeTx(func(context.Context) (int, error) { return 3, nil }, nil))
	if err != nil || v != 3 {
		t.Fatalf("retry = %d, %v; want 3, nil (runs again)", v, err)
	}
}

func TestRunTxFnErrorLock(t *testing.T) {
	g, _ := memGuard[int](t, idem.OnFailure(idem.Lock))
	ctx := txCtx(g)
	_, err := runTx(ctx, g, "k", fakeTx(func(context.Context) (int, error) { return 0, errors.New("declined") }, nil))
	if err == nil || err.Error() != "declined" {
		t.Fatalf("err = %v, want declined", err)
	}
	_, err = runTx(ctx, g, "k", fakeTx(func(context.Context) (int, error) { t.Error("ran again"); return 0, nil }, nil))
	var rf *idem.RecordedFailure
	if !errors.Is(err, idem.ErrPreviousFailure) || !errors.As(err, &rf) || rf.Message != "declined" {
		t.Fatalf("replay err = %v, want the recorded failure", err)
	}
}

func TestRunTxLostOwnership(t *testing.T) {
	g, _ := memGuard[int](t)
	ctx := txCtx(g)
	v, err := runTx(ctx, g, "k", fakeTx(func(context.Context) (int, error) { return 1, nil }, idem.ErrLostOwnership))
	if !errors.Is(err, idem.ErrLostOwnership) || v != 0 {
		t.Fatalf("RunTx = %d, %v; want 0, ErrLostOwnership", v, err)
	}
	if rec := record(t, g, "k"); rec == nil || rec.Status != storekit.StatusInProgress {
		t.Fatalf("record = %+v, want the claim left in progress (not released)", rec)
	}
}

func TestRunTxOutcomeUnknown(t *testing.T) {
	g, _ := memGuard[int](t)
	ctx := txCtx(g)
	unknown := &storekit.OutcomeUnknownError{Err: errors.New("commit reply lost"), ReadErr: errors.New("read back failed")}
	v, err := runTx(ctx, g, "k", fakeTx(func(context.Context) (int, error) { return 5, nil }, unknown))
	if !errors.Is(err, idem.ErrOutcomeUnknown) || v != 5 {
		t.Fatalf("RunTx = %d, %v; want 5, ErrOutcomeUnknown", v, err)
	}
	if rec := record(t, g, "k"); rec == nil || rec.Status != storekit.StatusInProgress {
		t.Fatalf("record = %+v, want the claim left to go stale", rec)
	}
}

func TestRunTxCommitFailedReleases(t *testing.T) {
	g, _ := memGuard[int](t)
	ctx := txCtx(g)
	failed := errors.New("serialization failure")
	v, err := runTx(ctx, g, "k", fakeTx(func(context.Context) (int, error) { return 5, nil }, failed))
	var se *idem.StoreError
	if !errors.As(err, &se) || se.Op != "commit" || !errors.Is(err, failed) || v != 0 {
		t.Fatalf("RunTx = %d, %v; want 0 and a *StoreError{Op: commit} wrapping the failure", v, err)
	}
	if rec := record(t, g, "k"); rec != nil {
		t.Fatalf("record = %+v, want released", rec)
	}
	v, err = runTx(ctx, g, "k", fakeTx(func(context.Context) (int, error) { return 6, nil }, nil))
	if err != nil || v != 6 {
		t.Fatalf("retry = %d, %v; want 6, nil", v, err)
	}
}

func TestRunTxPanic(t *testing.T) {
	g, _ := memGuard[int](t)
	ctx := txCtx(g)
	func() {
		defer func() {
			if p := recover(); p != "tx boom" {
				t.Fatalf("recovered %v, want the runner's panic", p)
			}
		}()
		_, _ = g.Do(withRunner(ctx, func(context.Context, storekit.TxClaim, func(context.Context) (storekit.Completion, error)) error {
			panic("tx boom")
		}), "k", func(context.Context) (int, error) { return 1, nil })
	}()
	if rec := record(t, g, "k"); rec != nil {
		t.Fatalf("record after a panic = %+v, want released", rec)
	}
}

// A claim lost while the transaction runs: the completion is refused
// before it is handed to the runner, and the call returns ErrLostOwnership.
func TestRunTxCompleteAfterLoss(t *testing.T) {
	g, s := memGuard[int](t, idem.WithHeartbeat(5*time.Millisecond), idem.WithTakeoverAfter(time.Second))
	ctx := txCtx(g)
	sk := storageKey(t, g, "k")
	_, err := g.Do(withRunner(ctx, func(ctx context.Context, c storekit.TxClaim, body func(context.Context) (storekit.Completion, error)) error {
		_, err := body(ctx)
		if !errors.Is(err, idem.ErrLostOwnership) {
			t.Errorf("completion after the loss = %v, want ErrLostOwnership", err)
		}
		return err
	}), "k", func(ctx context.Context) (int, error) {
		if err := s.Delete(ctx, sk); err != nil { // another party removed the claim
			return 0, err
		}
		<-ctx.Done() // the next heartbeat finds the claim gone
		if !errors.Is(context.Cause(ctx), idem.ErrLostOwnership) {
			t.Errorf("cause = %v, want ErrLostOwnership", context.Cause(ctx))
		}
		return 1, nil
	})
	if !errors.Is(err, idem.ErrLostOwnership) {
		t.Fatalf("Do = %v, want ErrLostOwnership", err)
	}
}

// Same-process duplicates of a transactional call share its outcome.
func TestRunTxFollowersShareOutcome(t *testing.T) {
	g, _ := memGuard[int](t, idem.OnDuplicate(idem.Wait))
	ctx := txCtx(g)
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := runTx(ctx, g, "k", fakeTx(func(context.Context) (int, error) {
			close(started)
			<-release
			return 9, nil
		}, nil))
		done <- err
	}()
	<-started
	res := make(chan int, 1)
	go func() {
		v, err := g.Do(ctx, "k", func(context.Context) (int, error) { t.Error("follower ran"); return 0, nil })
		if err != nil {
			t.Error(err)
		}
		res <- v
	}()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := <-res; v != 9 {
		t.Fatalf("follower got %d, want 9", v)
	}
}

func TestGuardInfo(t *testing.T) {
	g, s := memGuard[int](t, idem.OnDuplicate(idem.Wait), idem.OnFailure(idem.Lock), idem.WithTTL(time.Hour),
		idem.WithTakeoverAfter(9*time.Second), idem.WithHeartbeat(2*time.Second))
	info, ok := guardinfo.Of(g)
	if !ok || !info.Wait || !info.Lock || info.TTL != time.Hour || info.Heartbeat != 2*time.Second || info.TakeoverAfter != 9*time.Second {
		t.Fatalf("info = %+v, %v", info, ok)
	}
	if info.Store != storekit.Store(s) {
		t.Fatal("info.Store is not the store the Guard was made with")
	}
	d, _ := memGuard[int](t)
	info, _ = guardinfo.Of(d)
	if info.Wait || info.Lock || info.TTL != 24*time.Hour || info.Heartbeat != 5*time.Second || info.TakeoverAfter != 30*time.Second {
		t.Fatalf("default info = %+v", info)
	}
	if _, ok := guardinfo.Of(struct{}{}); ok {
		t.Fatal("guardinfo.Of(struct{}{}) says it is a Guard")
	}
}
