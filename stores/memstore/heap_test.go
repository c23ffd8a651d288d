package memstore

import (
	"math/rand/v2"
	"testing"

	"github.com/idem-go/idem/storekit"
)

// TestExpiryHeap checks the heap's order and every entry's index after
// random pushes, changes, removals and pops.
func TestExpiryHeap(t *testing.T) {
	var h expiryHeap
	live := map[*entry]bool{}
	check := func(step int) {
		t.Helper()
		if len(h) != len(live) {
			t.Fatalf("step %d: %d items, %d entries", step, len(h), len(live))
		}
		for i, it := range h {
			if it.e.index != i || it.exp != it.e.rec.ExpiresAt || !live[it.e] {
				t.Fatalf("step %d: item %d: index %d, exp %d, record %d", step, i, it.e.index, it.exp, it.e.rec.ExpiresAt)
			}
			if i > 0 && h[(i-1)/2].exp > it.exp {
				t.Fatalf("step %d: item %d is smaller than its parent", step, i)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	pick := func() *entry {
		for e := range live {
			return e
		}
		return nil
	}
	for step := range 20_000 {
		switch op := r.IntN(4); {
		case op == 0 || len(h) == 0:
			e := &entry{rec: &storekit.Record{ExpiresAt: r.Int64N(1000)}}
			live[e] = true
			h.push(e)
		case op == 1:
			e := pick()
			e.rec = &storekit.Record{ExpiresAt: r.Int64N(1000)}
			h.fix(e.index)
		case op == 2:
			e := pick()
			delete(live, e)
			h.remove(e.index)
		default:
			min := h[0].exp
			for _, it := range h {
				if it.exp < min {
					t.Fatalf("step %d: root %d, item %d", step, min, it.exp)
				}
			}
			delete(live, h[0].e)
			h.remove(0)
		}
		if step%97 == 0 || len(h) < 20 {
			check(step)
		}
	}
	check(-1)
}
