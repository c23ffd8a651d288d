package storekit_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// mapBackend keeps records in a map under one mutex: the smallest
// storekit.Backend. A real backend would lock one key (a lock file, a row)
// and encode records with storekit.EncodeRecord.
type mapBackend struct {
	mu sync.Mutex
	m  map[string]*storekit.Record
}

func (b *mapBackend) Load(_ context.Context, key string) (*storekit.Record, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[key].Clone(), nil
}

func (b *mapBackend) Update(_ context.Context, key string, fn func(*storekit.Record) (*storekit.Record, error)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	next, err := fn(b.m[key].Clone())
	if err != nil || next == nil {
		return err
	}
	b.m[key] = next.Clone()
	return nil
}

func (b *mapBackend) Delete(_ context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
	return nil
}

// A store in three methods: the Backend stores records under a lock, and
// storekit.Locked makes every decision. Check it with storetest.Run.
func Example() {
	store := storekit.NewLocked(&mapBackend{m: map[string]*storekit.Record{}}, storekit.LockedConfig{Name: "mapstore"})
	g, err := idem.New[string](store)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 2 {
		v, err := g.Do(ctx, "greeting", func(context.Context) (string, error) {
			fmt.Println("running")
			return "hello", nil
		})
		fmt.Println(v, err)
	}
	// Output:
	// running
	// hello <nil>
	// hello <nil>
}

// DecideClaim says what a claim does and whether there is something to
// write; a store with a conditional write (compare-and-set) writes
// d.Record only if the key still holds the record it read.
func ExampleDecideClaim() {
	req := storekit.ClaimRequest{Key: "idem:k", Nonce: "n1", LeaseTTL: 10_000_000_000, TakeoverAfter: 1_000_000_000}
	d := storekit.DecideClaim(nil, req, 1000)
	fmt.Println(d.Outcome, d.Write, d.Record.Attempt)
	req.Nonce = "n2"
	d = storekit.DecideClaim(d.Record, req, 1500)
	fmt.Println(d.Outcome, d.Write, d.Record.Nonce)
	// Output:
	// claimed true 1
	// existing false n1
}
