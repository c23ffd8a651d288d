package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
)

// failingWatch is a store whose Watch always fails, as a pub/sub
// subscription does while the server refuses it.
type failingWatch struct {
	*memstore.Store
	calls atomic.Int32
}

func (s *failingWatch) Watch(context.Context, string) (<-chan struct{}, func(), error) {
	s.calls.Add(1)
	return nil, nil, errors.New("injected: cannot subscribe")
}

// TestWatchFailureRemembered: a waiter whose Watch failed polls for the
// rest of its wait without calling Watch again. Before, it called Watch on
// every poll (8 times in this wait).
func TestWatchFailureRemembered(t *testing.T) {
	s := &failingWatch{Store: newMem(t)}
	g, err := idem.New[int](s, idem.OnDuplicate(idem.Wait), idem.WithTakeoverAfter(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sk, err := guardinfo.StorageKey(g, "k")
	if err != nil {
		t.Fatal(err)
	}
	// A live claim held by someone else, for the whole wait.
	if _, err := s.Claim(context.Background(), storekit.ClaimRequest{Key: sk, Nonce: "other", LeaseTTL: time.Hour, TakeoverAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err = g.Do(ctx, "k", func(context.Context) (int, error) { return 1, nil })
	if !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("Do: %v, want ErrInProgress when the wait times out", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("Watch called %d times in one wait, want 1", n)
	}
	// The next flight tries Watch again.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	_, _ = g.Do(ctx2, "k", func(context.Context) (int, error) { return 1, nil })
	if n := s.calls.Load(); n != 2 {
		t.Fatalf("Watch called %d times after a second wait, want 2", n)
	}
}
