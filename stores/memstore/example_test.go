package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
)

// A memory store coordinates the goroutines of one process: eight
// concurrent calls of one key run the function once, and under
// OnDuplicate(idem.Wait) every duplicate gets its result.
func ExampleNew() {
	store, err := memstore.New(memstore.WithRetention(time.Minute))
	if err != nil {
		panic(err)
	}
	g, err := idem.New[string](store, idem.OnDuplicate(idem.Wait))
	if err != nil {
		panic(err)
	}

	var runs atomic.Int32
	send := func(ctx context.Context) (string, error) {
		runs.Add(1)
		time.Sleep(20 * time.Millisecond) // the duplicates arrive meanwhile
		return "report sent", nil
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers = map[string]int{}
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := g.Do(context.Background(), "daily-report-2026-11-24", send)
			mu.Lock()
			defer mu.Unlock()
			answers[fmt.Sprint(v, " ", err)]++
		}()
	}
	wg.Wait()
	fmt.Println("runs:", runs.Load())
	fmt.Println("answers:", answers)
	fmt.Println("records:", store.Len())
	// Output:
	// runs: 1
	// answers: map[report sent <nil>:8]
	// records: 1
}

// Under the default duplicate policy (idem.Return) a duplicate that
// arrives while the first call runs is told so at once, with an error
// matching idem.ErrInProgress, instead of waiting for the result.
func ExampleNew_return() {
	store, _ := memstore.New() // no options: cannot fail
	g, _ := idem.New[string](store)

	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = g.Do(context.Background(), "k", func(context.Context) (string, error) {
			close(started)
			<-release
			return "done", nil
		})
	}()
	<-started
	_, err := g.Do(context.Background(), "k", func(context.Context) (string, error) { return "again", nil })
	fmt.Println(errors.Is(err, idem.ErrInProgress))
	close(release)
	// Output: true
}

// A store for a job that removes expired records itself: WithoutCleanup
// starts no goroutine, and Purge removes what has expired (here on a clock
// the example moves).
func ExampleWithoutCleanup() {
	now := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	store, _ := memstore.New(
		memstore.WithoutCleanup(),
		memstore.WithRetention(0),
		memstore.WithClock(func() time.Time { return now }),
	)
	g, _ := idem.New[string](store, idem.WithTTL(time.Hour))
	for _, key := range []string{"a", "b", "c"} {
		_, _ = g.Do(context.Background(), key, func(context.Context) (string, error) { return "done", nil })
	}
	fmt.Println("records:", store.Len())

	now = now.Add(2 * time.Hour)
	n, err := store.Purge(context.Background())
	fmt.Println("purged:", n, err)
	fmt.Println("records:", store.Len())
	// Output:
	// records: 3
	// purged: 3 <nil>
	// records: 0
}

// Close stops a store's clean-up goroutine; the store stays usable.
func ExampleStore_Close() {
	store, _ := memstore.New(memstore.WithCleanup(10 * time.Second))
	g, _ := idem.New[string](store)
	defer store.Close()

	v, err := g.Do(context.Background(), "k", func(context.Context) (string, error) { return "sent", nil })
	fmt.Println(v, err)
	fmt.Println(store.Close()) // stops the clean-up; a second Close is harmless
	v, err = g.Do(context.Background(), "k", func(context.Context) (string, error) { return "again", nil })
	fmt.Println(v, err)
	// Output:
	// sent <nil>
	// <nil>
	// sent <nil>
}
