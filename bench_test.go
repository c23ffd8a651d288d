package idem_test

import (
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/internal/benchkit"
)

// BenchmarkDo measures fresh calls and replays on the memory store,
// reporting store operations and heartbeats per call, next to the same
// store operations made directly (raw-*).
func BenchmarkDo(b *testing.B) {
	stores := []struct {
		name string
		new  func(b *testing.B) storekit.Store
	}{
		{"memstore", func(b *testing.B) storekit.Store { return newMem(b) }},
	}
	for _, s := range stores {
		b.Run(s.name+"/fresh", func(b *testing.B) { benchkit.Fresh(b, s.new(b)) })
		b.Run(s.name+"/replay", func(b *testing.B) { benchkit.Replay(b, s.new(b)) })
		b.Run(s.name+"/raw-fresh", func(b *testing.B) { benchkit.RawFresh(b, s.new(b)) })
		b.Run(s.name+"/raw-replay", func(b *testing.B) { benchkit.RawReplay(b, s.new(b)) })
	}
}
