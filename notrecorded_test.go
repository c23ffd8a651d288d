package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// delayedCompletes holds Complete requests as a slow network would: the
// caller's request times out (its context ends), and the request reaches
// the store later, when deliver is called. With first set only the first
// Complete is held; the others go through.
type delayedCompletes struct {
	storekit.Store
	first bool

	mu      sync.Mutex
	held    int
	deliver chan struct{}
	landed  sync.WaitGroup
	results []error
}

func newDelayed(s storekit.Store, first bool) *delayedCompletes {
	return &delayedCompletes{Store: s, first: first, deliver: make(chan struct{})}
}

func (d *delayedCompletes) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	d.mu.Lock()
	hold := !d.first || d.held == 0
	if hold {
		d.held++
		d.landed.Add(1)
	}
	d.mu.Unlock()
	if !hold {
		return d.Store.Complete(ctx, key, nonce, c)
	}
	go func() {
		defer d.landed.Done()
		<-d.deliver
		err := d.Store.Complete(context.Background(), key, nonce, c)
		d.mu.Lock()
		d.results = append(d.results, err)
		d.mu.Unlock()
	}()
	<-ctx.Done() // the reply never comes in time
	return ctx.Err()
}

// deliverAll lets every held request reach the store and waits for it.
func (d *delayedCompletes) deliverAll() {
	close(d.deliver)
	d.landed.Wait()
}

// A completion delayed past the Guard's patience and then delivered must
// never leave a record completed behind an ErrNotRecorded answer.
func TestNotRecordedOnlyWhenTrue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		first   bool // only the first Complete is delayed
		wantErr error
	}{
		{"first completion delayed", true, nil},
		// The Guard's completion under the fencing nonce is delayed too:
		// it fences that one off as well and releases, so the answer
		// ErrNotRecorded is true, and both late completions are refused.
		{"every completion delayed", false, idem.ErrNotRecorded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := mustMemStore(t)
			d := newDelayed(mem, tc.first)
			g, err := idem.New[int](d, idem.WithTakeoverAfter(200*time.Millisecond), idem.WithHeartbeat(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			v, err := g.Do(context.Background(), "k", func(context.Context) (int, error) { return 7, nil })
			d.deliverAll()
			rec, gerr := mem.Get(context.Background(), storageKey(t, g, "k"))
			completed := gerr == nil && rec.Status == storekit.StatusCompleted
			if errors.Is(err, idem.ErrNotRecorded) && completed {
				t.Fatalf("Do answered %v, and the record ended completed: %+v (late results %v)", err, rec, d.results)
			}
			if v != 7 {
				t.Errorf("Do's value = %d, want fn's 7", v)
			}
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Do = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				for _, r := range d.results {
					if !errors.Is(r, idem.ErrLostOwnership) {
						t.Errorf("a late completion landed or failed otherwise: %v", r)
					}
				}
			}
			if tc.wantErr == nil && !completed {
				t.Errorf("record = %+v, %v; want it completed (recorded after all)", rec, gerr)
			}
			if tc.wantErr == nil {
				if got, err := g.Do(context.Background(), "k", func(context.Context) (int, error) { return 0, errors.New("ran again") }); err != nil || got != 7 {
					t.Errorf("replay = %d, %v; want 7", got, err)
				}
			}
		})
	}
}
