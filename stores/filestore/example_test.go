package filestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/filestore"
)

func Example() {
	dir, err := os.MkdirTemp("", "idem-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Every process on this host that opens the same directory shares the
	// records: a key runs once across all of them. Expired records are
	// removed by the store itself while it is open, until Close.
	store, err := filestore.New(filepath.Join(dir, "idem"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	g, err := idem.New[string](store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		v, err := g.Do(ctx, "send-welcome-mail:42", func(ctx context.Context) (string, error) {
			fmt.Println("sending")
			return "sent", nil
		})
		fmt.Println(v, err)
	}

	// Output:
	// sending
	// sent <nil>
	// sent <nil>
	// sent <nil>
}

// ExampleWithoutCleanup runs no clean-up in the store: a job of the
// user's own calls Purge.
func ExampleWithoutCleanup() {
	dir, err := os.MkdirTemp("", "idem-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	store, err := filestore.New(dir, filestore.WithoutCleanup(), filestore.WithRetention(0))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	g, err := idem.New[string](store, idem.WithTTL(time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	_, _ = g.Do(ctx, "k", func(ctx context.Context) (string, error) { return "done", nil })
	time.Sleep(5 * time.Millisecond)

	n, err := store.Purge(ctx)
	fmt.Println("purged", n, err)
	// Output:
	// purged 1 <nil>
}

// ExampleWithCleanup tunes how often the store removes expired records
// by itself.
func ExampleWithCleanup() {
	dir, err := os.MkdirTemp("", "idem-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	store, err := filestore.New(dir, filestore.WithCleanup(10*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.Close())
	// Output:
	// <nil>
}
