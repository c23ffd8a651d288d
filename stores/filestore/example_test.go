package filestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

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
	// records: a key runs once across all of them.
	store, err := filestore.New(filepath.Join(dir, "idem"))
	if err != nil {
		log.Fatal(err)
	}
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

	// Purge, run from time to time, removes expired records.
	n, err := store.Purge(ctx)
	fmt.Println("purged", n, err)
	// Output:
	// sending
	// sent <nil>
	// sent <nil>
	// sent <nil>
	// purged 0 <nil>
}
