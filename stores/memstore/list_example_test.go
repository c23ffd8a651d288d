package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
)

// ExampleStore_Records counts a store's live records by state, as idem
// stats does.
func ExampleStore_Records() {
	ctx := context.Background()
	store, _ := memstore.New(memstore.WithoutCleanup())
	defer store.Close()
	g, _ := idem.New[string](store)
	for _, key := range []string{"a", "b", "c"} {
		_, _ = g.Do(ctx, key, func(context.Context) (string, error) { return "done", nil })
	}

	counts := map[storekit.RecordState]int{}
	for rec, err := range store.Records(ctx) {
		if err != nil {
			fmt.Println(err)
			return
		}
		counts[rec.State(time.Now().UnixMilli(), (30*time.Second))]++
	}
	for _, s := range storekit.RecordStates() {
		fmt.Println(s, counts[s])
	}
	// Output:
	// in_progress 0
	// stale 0
	// failed 0
	// completed 3
	// steps_epoch 0
}
