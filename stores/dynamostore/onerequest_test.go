package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/dynamostore"
)

// TestDoTxOneRequest: WithOneRequest, a fresh DoTx is one request (the
// TransactWriteItems with fn's item and the record's Put) with fencing
// token 1, a replay is one request (the same transaction, refused by the
// record's condition, carrying the record), and nothing of the replay's
// fn is written; a failing fn sends nothing and leaves nothing.
func TestDoTxOneRequest(t *testing.T) {
	e := newEnv(t, dynamostore.WithOneRequest())
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store)
	ctx := context.Background()
	var runs atomic.Int32
	fn := func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		runs.Add(1)
		if tok, ok := idem.FencingToken(ctx); !ok || tok != 1 {
			return "", fmt.Errorf("fencing token %d %v, want 1", tok, ok)
		}
		return "done", putRow(tx, table, "k", "w")
	}
	e.log.Take()
	if v, err := dynamostore.DoTx(ctx, g, "k", fn); err != nil || v != "done" {
		t.Fatalf("fresh DoTx = %q, %v", v, err)
	}
	wantOps(t, e, "TransactWriteItems")
	if v, err := dynamostore.DoTx(ctx, g, "k", fn); err != nil || v != "done" {
		t.Fatalf("replay = %q, %v", v, err)
	}
	wantOps(t, e, "TransactWriteItems")
	if got := rows(t, e.client, table, "k"); len(got) != 1 {
		t.Fatalf("rows %v, want one: the replay's item is not written", got)
	}
	e.log.Take()
	if runs.Load() != 2 {
		t.Fatalf("fn ran %d times, want 2 (the replay builds its items, unsent)", runs.Load())
	}

	boom := errors.New("declined")
	_, err := dynamostore.DoTx(ctx, g, "f", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		if err := putRow(tx, table, "f", "w"); err != nil {
			return "", err
		}
		return "", boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failing fn: %v", err)
	}
	wantOps(t, e) // nothing sent
	if v, err := dynamostore.DoTx(ctx, g, "f", fn); err != nil || v != "done" {
		t.Fatalf("after a failure = %q, %v", v, err)
	}
}

// TestDoTxOneRequestDuplicates: 8 Guards (Wait), 64 goroutines, one fresh
// key: one transaction commits (one row), every caller gets its value,
// and the others' items are never written.
func TestDoTxOneRequestDuplicates(t *testing.T) {
	rowsAndValues := duplicates(t, dynamostore.WithOneRequest())
	if rows, values, _ := rowsAndValues(); rows != 1 || values != 1 {
		t.Fatalf("%d rows, %d values: want one of each", rows, values)
	}
}

// TestDoTxOneRequestBroken: the same with the record's Put unconditioned
// (the broken variant) commits several runs: the check above fails.
func TestDoTxOneRequestBroken(t *testing.T) {
	defer dynamostore.SetFreshConditioned(false)()
	rowsAndValues := duplicates(t, dynamostore.WithOneRequest())
	if rows, values, _ := rowsAndValues(); rows == 1 && values == 1 {
		t.Fatalf("%d rows, %d values: the unconditioned Put was not caught", rows, values)
	}
}

// duplicates makes 64 DoTx calls on one fresh key over 8 Guards (Wait) of
// a store with opts, and returns how to count the rows written, the
// distinct values returned and the runs of fn.
func duplicates(t *testing.T, opts ...dynamostore.Option) func() (rows, values, runs int) {
	e := newEnv(t, opts...)
	table := rowsTable(t, e.client)
	var guards []*idem.Guard[string]
	for range 8 {
		guards = append(guards, newGuard[string](t, e.store, idem.OnDuplicate(idem.Wait)))
	}
	var wg sync.WaitGroup
	var runs atomic.Int32
	values := make(chan string, 64)
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := dynamostore.DoTx(context.Background(), guards[i%8], "g", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
				n := runs.Add(1)
				return fmt.Sprint("run ", n), putRow(tx, table, "g", fmt.Sprint("w", n))
			})
			if err != nil {
				errs <- err
				return
			}
			values <- v
		}()
	}
	wg.Wait()
	close(values)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[string]int{}
	for v := range values {
		seen[v]++
	}
	got := rows(t, e.client, table, "g")
	t.Logf("%d runs of fn, values %v, rows %v", runs.Load(), seen, got)
	return func() (int, int, int) { return len(got), len(seen), int(runs.Load()) }
}

// TestDoTxOneRequestRefusesSteps: inside a one-request DoTx, idem.Step is
// refused (two runs of fn may be live at once) and nothing is written.
func TestDoTxOneRequestRefusesSteps(t *testing.T) {
	e := newEnv(t, dynamostore.WithOneRequest())
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store)
	_, err := dynamostore.DoTx(context.Background(), g, "s", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		if _, err := idem.Step(ctx, "charge", func(context.Context) (string, error) { return "charged", nil }); err != nil {
			return "", err
		}
		return "done", putRow(tx, table, "s", "w")
	})
	if !errors.Is(err, storekit.ErrInvalidOption) {
		t.Fatalf("Step inside a one-request DoTx: %v, want ErrInvalidOption", err)
	}
	if got := rows(t, e.client, table, "s"); len(got) != 0 {
		t.Fatalf("rows %v", got)
	}
}

// TestDoTxOneRequestExpired: a key whose record expired is claimed first
// (its attempt goes on: fencing token 2), then committed by the
// transaction conditioned on that claim.
func TestDoTxOneRequestExpired(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, dynamostore.WithOneRequest(), dynamostore.WithClock(clock.Now))
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store, idem.WithTTL(time.Minute))
	ctx := context.Background()
	var tokens []int64
	fn := func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		tok, _ := idem.FencingToken(ctx)
		tokens = append(tokens, tok)
		return fmt.Sprint("token ", tok), putRow(tx, table, "x", "w")
	}
	if _, err := dynamostore.DoTx(ctx, g, "x", fn); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	e.log.Take()
	v, err := dynamostore.DoTx(ctx, g, "x", fn)
	if err != nil || v != "token 2" {
		t.Fatalf("after expiry = %q, %v (tokens %v)", v, err, tokens)
	}
	t.Logf("after expiry: %v", e.log.Take())
	if got := rows(t, e.client, table, "x"); len(got) != 2 {
		t.Fatalf("rows %v, want two (one per live record)", got)
	}
}
