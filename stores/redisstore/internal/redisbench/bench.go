// Package redisbench measures the Redis store under a Guard against raw go-redis
// doing the same commands, and the wait wake-up latency with push against a
// poll. It backs the benchmarks of package redisstore and the benchtable
// program.
package redisbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/benchkit"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
)

// Workers is the number of concurrent callers of every measurement.
const Workers = 64

// Invoice is the result the guarded function returns in the benchmarks.
type Invoice struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

var value = `{"id":"inv_0123456789","amount":4200}`

// RandPrefix returns a fresh key prefix.
func RandPrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "bench" + hex.EncodeToString(b) + ":"
}

// NewClient returns a client for addr with a pool large enough for Workers.
func NewClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: Workers, MinIdleConns: Workers})
}

// NewClusterClient returns a Cluster client for addrs with pools large
// enough for Workers.
func NewClusterClient(addrs []string) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: Workers, MinIdleConns: Workers})
}

// parallel runs op(i) for i in [0, n) on the Setup's callers (Workers
// unless a table says otherwise) and returns the elapsed time and the first
// error.
func (s *Setup) parallel(n int, op func(i int) error) (time.Duration, error) {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := op(i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if err, _ := first.Load().(error); err != nil {
		return el, err
	}
	return el, nil
}

// Pair is the throughput of the guarded and the raw variant of one
// workload, measured in one run (alternating rounds).
type Pair struct {
	Name     string
	GuardOps float64 // calls per second
	RawOps   float64
}

// Ratio is guarded throughput over raw throughput.
func (p Pair) Ratio() float64 { return p.GuardOps / p.RawOps }

// Setup holds what the measurements share.
type Setup struct {
	Guard  *idem.Guard[Invoice]
	Store  *redisstore.Store
	Raw    redis.UniversalClient
	prefix string
	// workers is the number of concurrent callers of every measurement.
	workers int
	// replayKeys are the storage keys of the completed replay keys
	// (PrepareReplays), so that a phase of Store.Claim calls does not hash
	// them on its time.
	replayKeys []string
}

// NewSetup builds a Guard over a redisstore on gc and uses rc for raw
// commands. gc and rc should be separate clients of the same server.
func NewSetup(ctx context.Context, gc, rc redis.UniversalClient) (*Setup, error) {
	pfx := RandPrefix()
	s, err := redisstore.New(gc, redisstore.WithPrefix(pfx))
	if err != nil {
		return nil, err
	}
	if err := s.LoadScripts(ctx); err != nil {
		return nil, err
	}
	g, err := idem.New[Invoice](s, idem.WithTTL(10*time.Minute))
	if err != nil {
		return nil, err
	}
	for _, c := range []redis.UniversalClient{gc, rc} {
		if err := c.Ping(ctx).Err(); err != nil {
			return nil, err
		}
	}
	return &Setup{Guard: g, Store: s, Raw: rc, prefix: pfx, workers: Workers}, nil
}

// Close closes the store (not the clients).
func (s *Setup) Close() error { return s.Store.Close() }

func (s *Setup) fn(ctx context.Context) (Invoice, error) {
	return Invoice{ID: "inv_0123456789", Amount: 4200}, nil
}

var round atomic.Int64

// GuardFresh runs n guarded calls on new keys: claim + complete each.
func (s *Setup) GuardFresh(ctx context.Context, n int) (time.Duration, error) {
	r := strconv.FormatInt(round.Add(1), 10)
	return s.parallel(n, func(i int) error {
		_, err := s.Guard.Do(ctx, "fresh-"+r+"-"+strconv.Itoa(i), s.fn)
		return err
	})
}

// RawFresh runs n pairs of SET NX PX (the claim) + SET PX (the result) on
// new keys.
func (s *Setup) RawFresh(ctx context.Context, n int) (time.Duration, error) {
	r := strconv.FormatInt(round.Add(1), 10)
	return s.parallel(n, func(i int) error {
		k := s.prefix + "raw-" + r + "-" + strconv.Itoa(i)
		if err := s.Raw.SetNX(ctx, k, "in_progress", 30*time.Second).Err(); err != nil {
			return err
		}
		return s.Raw.Set(ctx, k, value, 10*time.Minute).Err()
	})
}

const replayKeys = 4096

// PrepareReplays completes the keys the replay measurements read.
func (s *Setup) PrepareReplays(ctx context.Context) error {
	s.replayKeys = make([]string, replayKeys)
	for i := range s.replayKeys {
		k, err := guardinfo.StorageKey(s.Guard, "replay-"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		s.replayKeys[i] = k
	}
	_, err := s.parallel(replayKeys, func(i int) error {
		if _, err := s.Guard.Do(ctx, "replay-"+strconv.Itoa(i), s.fn); err != nil {
			return err
		}
		if err := s.Raw.Set(ctx, s.prefix+"rawreplay-"+strconv.Itoa(i), value, 10*time.Minute).Err(); err != nil {
			return err
		}
		return s.Raw.Set(ctx, s.floorKey(i), floorRecord, 10*time.Minute).Err()
	})
	return err
}

// The floor rows' values: a claim and a completed record of the sizes
// the store writes for this benchmark's keys and result (the header, a
// 32-character nonce, the 70-byte storage key, and the result).
var (
	floorClaim  = strings.Repeat("0", 122+32+70)
	floorRecord = strings.Repeat("1", 122+32+70+len(value))
)

func (s *Setup) floorKey(i int) string { return "idem:floor-replay-" + s.prefix + strconv.Itoa(i) }

// FloorReplay runs n claim-sized SET NX GET PX commands on keys that hold
// a record-sized value, with the raw client: a replay's command and bytes
// on the wire, without the Guard, the record's decoding or the result's.
func (s *Setup) FloorReplay(ctx context.Context, n int) (time.Duration, error) {
	return s.parallel(n, func(i int) error {
		return s.Raw.Do(ctx, "set", s.floorKey(i%replayKeys), floorClaim, "nx", "get", "px", 60000).Err()
	})
}

// GuardReplay runs n guarded calls on completed keys: one claim each.
func (s *Setup) GuardReplay(ctx context.Context, n int) (time.Duration, error) {
	return s.parallel(n, func(i int) error {
		v, err := s.Guard.Do(ctx, "replay-"+strconv.Itoa(i%replayKeys), s.fn)
		if err == nil && v.Amount != 4200 {
			err = fmt.Errorf("replay returned %+v", v)
		}
		return err
	})
}

// RawReplay runs n GETs of existing keys.
func (s *Setup) RawReplay(ctx context.Context, n int) (time.Duration, error) {
	return s.parallel(n, func(i int) error {
		return s.Raw.Get(ctx, s.prefix+"rawreplay-"+strconv.Itoa(i%replayKeys)).Err()
	})
}

// RawReplayDecoded runs n GETs of existing keys and decodes each value
// into an Invoice with encoding/json, as the Guard's default codec does: what
// a caller of the raw client pays to use the value it read.
func (s *Setup) RawReplayDecoded(ctx context.Context, n int) (time.Duration, error) {
	return s.parallel(n, func(i int) error {
		b, err := s.Raw.Get(ctx, s.prefix+"rawreplay-"+strconv.Itoa(i%replayKeys)).Bytes()
		if err != nil {
			return err
		}
		var v Invoice
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		if v.Amount != 4200 {
			return fmt.Errorf("decoded %+v", v)
		}
		return nil
	})
}

// LeastReplay runs n replays reduced to what any replay must do, with the
// raw client: the key's storage key derived (as the Guard derives it, an HMAC),
// one GET of a stored result, and its value decoded into an Invoice with
// encoding/json. No claim, no record, no Guard.
func (s *Setup) LeastReplay(ctx context.Context, n int) (time.Duration, error) {
	return s.parallel(n, func(i int) error {
		if _, err := guardinfo.StorageKey(s.Guard, "replay-"+strconv.Itoa(i%replayKeys)); err != nil {
			return err
		}
		b, err := s.Raw.Get(ctx, s.prefix+"rawreplay-"+strconv.Itoa(i%replayKeys)).Bytes()
		if err != nil {
			return err
		}
		var v Invoice
		return json.Unmarshal(b, &v)
	})
}

// LeastFresh runs n fresh calls reduced to what any claim-then-record call
// must do, with the raw client: the storage key derived, SET NX GET PX of a
// claim-sized value on a new key (which answers nil), the result encoded
// with encoding/json, and one SET PX of a record-sized value. No check
// that the claim is still held, no record built, no Guard.
func (s *Setup) LeastFresh(ctx context.Context, n int) (time.Duration, error) {
	r := strconv.FormatInt(round.Add(1), 10)
	return s.parallel(n, func(i int) error {
		key := "least-" + r + "-" + strconv.Itoa(i)
		if _, err := guardinfo.StorageKey(s.Guard, key); err != nil {
			return err
		}
		k := s.prefix + key
		if err := s.Raw.Do(ctx, "set", k, floorClaim, "nx", "get", "px", 60000).Err(); err != redis.Nil {
			return fmt.Errorf("least fresh claim: %v", err)
		}
		b, err := json.Marshal(Invoice{ID: "inv_0123456789", Amount: 4200})
		if err != nil {
			return err
		}
		return s.Raw.Set(ctx, k, floorRecord[:len(floorRecord)-len(value)]+string(b), 10*time.Minute).Err()
	})
}

// Compare measures guard and raw with n calls each per round, alternating
// for rounds rounds so both see the same machine load, and reports the
// median round of each.
func Compare(ctx context.Context, name string, n, rounds int,
	guard, raw func(context.Context, int) (time.Duration, error)) (Pair, error) {
	var gs, rs []float64
	for range rounds {
		d, err := raw(ctx, n)
		if err != nil {
			return Pair{}, fmt.Errorf("%s raw: %w", name, err)
		}
		rs = append(rs, float64(n)/d.Seconds())
		d, err = guard(ctx, n)
		if err != nil {
			return Pair{}, fmt.Errorf("%s guard: %w", name, err)
		}
		gs = append(gs, float64(n)/d.Seconds())
	}
	slices.Sort(gs)
	slices.Sort(rs)
	return Pair{Name: name, GuardOps: gs[len(gs)/2], RawOps: rs[len(rs)/2]}, nil
}

// noWatch hides the store's Watcher, so a Guard over it polls.
type noWatch struct{ storekit.Store }

// WakeLatency measures how long after the owner's call returns a waiter in
// another Guard (its own store, as another process would have) returns,
// with push (the store's pub/sub) or, when poll is set, with the Guard's
// polling. The waiter has been waiting a random 100-300ms when the owner
// finishes. takeover sets the Guard's takeover threshold, which bounds the
// poll interval.
func WakeLatency(ctx context.Context, owner, waiter *redis.Client, poll bool, samples int, takeover time.Duration) ([]time.Duration, error) {
	pfx := RandPrefix()
	sa, err := redisstore.New(owner, redisstore.WithPrefix(pfx))
	if err != nil {
		return nil, err
	}
	sb, err := redisstore.New(waiter, redisstore.WithPrefix(pfx))
	if err != nil {
		return nil, err
	}
	defer sa.Close()
	defer sb.Close()
	var storeB storekit.Store = sb
	if poll {
		storeB = noWatch{sb}
	}
	return benchkit.WakeLatency(ctx, sa, storeB, samples, takeover)
}

// Median returns the middle of sorted durations.
func Median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[len(d)/2]
}

// StoreReplay runs n Store.Claim calls on the completed keys of
// PrepareReplays, without a Guard: the store's share of a replay (the
// claim's value built, the command, the record decoded; no result decoded).
func (s *Setup) StoreReplay(ctx context.Context, n int) (time.Duration, error) {
	if len(s.replayKeys) == 0 {
		return 0, errors.New("redisbench: StoreReplay before PrepareReplays")
	}
	return s.parallel(n, func(i int) error {
		res, err := s.Store.Claim(ctx, storekit.ClaimRequest{Key: s.replayKeys[i%replayKeys], Nonce: "bench-nonce-" + strconv.Itoa(i),
			LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second})
		if err == nil && res.Outcome != storekit.Existing {
			err = fmt.Errorf("claim of a completed key: %v", res.Outcome)
		}
		return err
	})
}

// StoreFresh runs n Store.Claim + Store.Complete pairs on new keys, without
// a Guard: the store's share of a fresh call.
func (s *Setup) StoreFresh(ctx context.Context, n int) (time.Duration, error) {
	r := strconv.FormatInt(round.Add(1), 10)
	res := []byte(value)
	return s.parallel(n, func(i int) error {
		k := "idem:storefresh-" + s.prefix + r + "-" + strconv.Itoa(i)
		nonce := "nonce-" + r + "-" + strconv.Itoa(i)
		if _, err := s.Store.Claim(ctx, storekit.ClaimRequest{Key: k, Nonce: nonce, LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second}); err != nil {
			return err
		}
		return s.Store.Complete(ctx, k, nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: res, TTL: 10 * time.Minute})
	})
}

// TxReplay runs n of the transactions a claim sends (MULTI, SET NX GET PX,
// PEXPIRETIME, PTTL, EXEC) on completed keys with the raw client, the
// value a claim's size, and decodes nothing: the floor of a replay.
func (s *Setup) TxReplay(ctx context.Context, n int) (time.Duration, error) {
	value := strings.Repeat("0", 122+32+70)
	return s.parallel(n, func(i int) error {
		k := s.prefix + "rawreplay-" + strconv.Itoa(i%replayKeys)
		p := s.Raw.TxPipeline()
		set := p.Do(ctx, "set", k, value, "nx", "get", "px", 120000)
		p.Do(ctx, "pexpiretime", k)
		p.Do(ctx, "pttl", k)
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		return set.Err()
	})
}

// SetNXReplay runs n single SET NX GET PX commands on completed keys with
// the raw client, a claim's size of value: a claim that reads no clock, the
// floor of a design whose completed records expire at their expires_at
// exactly (which would end the attempt count there, not a retention later).
func (s *Setup) SetNXReplay(ctx context.Context, n int) (time.Duration, error) {
	value := strings.Repeat("0", 122+32+70)
	return s.parallel(n, func(i int) error {
		k := s.prefix + "rawreplay-" + strconv.Itoa(i%replayKeys)
		return s.Raw.Do(ctx, "set", k, value, "nx", "get", "px", 120000).Err()
	})
}

// Table prints, for the deployment gc and rc reach, raw fresh, raw GET,
// idem fresh and idem replay with their ratios, and where a call's cost
// goes (the replay floor, the store without a Guard), measured in one run
// with alternating rounds. calls is per variant per round.
func Table(ctx context.Context, w io.Writer, name string, gc, rc redis.UniversalClient, calls, rounds int) error {
	s, err := NewSetup(ctx, gc, rc)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.PrepareReplays(ctx); err != nil {
		return err
	}
	rows := []struct {
		name, target string
		guard, raw   func(context.Context, int) (time.Duration, error)
	}{
		{"fresh: SET NX PX + SET vs claim + complete", ">= 0.70", s.GuardFresh, s.RawFresh},
		{"replay: GET vs claim", ">= 0.85", s.GuardReplay, s.RawReplay},
		{"floor: GET vs the claim's transaction, nothing decoded", "", s.TxReplay, s.RawReplay},
		{"prototype: GET vs SET NX GET PX alone, no clock read", "", s.SetNXReplay, s.RawReplay},
		{"store: GET vs Store.Claim (no Guard)", "", s.StoreReplay, s.RawReplay},
		{"store: SET NX PX + SET vs Store.Claim + Complete (no Guard)", "", s.StoreFresh, s.RawFresh},
	}
	pairs := make([]Pair, len(rows))
	for i, r := range rows {
		if pairs[i], err = Compare(ctx, r.name, calls, rounds, r.guard, r.raw); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\n%s: %d goroutines, %d calls per variant per round, %d alternating rounds, median round\n",
		name, Workers, calls, rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\traw calls/s\tidem calls/s\tidem/raw\ttarget\t")
	for i, r := range rows {
		p := pairs[i]
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%s\t\n", r.name, p.RawOps, p.GuardOps, p.Ratio(), r.target)
	}
	return tw.Flush()
}
