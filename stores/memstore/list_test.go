package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"

	"github.com/idem-go/idem/stores/memstore"
)

// TestRecordsSteps: a call's steps are records of their own, listed with
// the call's: a call with two steps lists more than the call's record, and
// every record listed is a completed one.
func TestRecordsSteps(t *testing.T) {
	s, err := memstore.New(memstore.WithoutCleanup())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, err := idem.New[int](s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := g.Do(ctx, "call", func(ctx context.Context) (int, error) {
		a, err := idem.Step(ctx, "a", func(context.Context) (int, error) { return 1, nil })
		if err != nil {
			return 0, err
		}
		b, err := idem.Step(ctx, "b", func(context.Context) (int, error) { return 2, nil })
		return a + b, err
	}); err != nil {
		t.Fatal(err)
	}
	sk, _ := guardinfo.StorageKey(g, "call")
	keys := map[string]storekit.RecordState{}
	for rec, err := range s.Records(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		keys[rec.Key] = rec.State(time.Now().UnixMilli(), time.Minute)
	}
	if keys[sk] != storekit.StateCompleted || len(keys) < 3 {
		t.Errorf("listed %v; want the call %s and its two steps, completed", keys, sk)
	}
	t.Logf("a call with two steps lists %d records", len(keys))
}
