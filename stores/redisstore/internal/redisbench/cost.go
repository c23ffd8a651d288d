package redisbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/redis/go-redis/v9"
)

// servers runs fn on every server that takes the benchmark's commands: the
// one server of a Client, every master of a ClusterClient.
func servers(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("redisbench: client %T not supported", c)
}

// CommandStats returns the microseconds each command spent executing since
// the last CONFIG RESETSTAT, and its calls, summed over the servers (INFO commandstats;
// a script's time includes the commands it runs, which are also counted
// under their own names).
func CommandStats(ctx context.Context, c redis.UniversalClient) (map[string]float64, map[string]int64, error) {
	var mu sync.Mutex
	usec, calls := map[string]float64{}, map[string]int64{}
	err := servers(ctx, c, func(ctx context.Context, s *redis.Client) error {
		info, err := s.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			name = strings.TrimPrefix(name, "cmdstat_")
			for _, kv := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "usec":
					f, _ := strconv.ParseFloat(v, 64)
					usec[name] += f
				case "calls":
					n, _ := strconv.ParseInt(v, 10, 64)
					calls[name] += n
				}
			}
		}
		return nil
	})
	return usec, calls, err
}

func resetStats(ctx context.Context, c redis.UniversalClient) error {
	return servers(ctx, c, func(ctx context.Context, s *redis.Client) error { return s.ConfigResetStat(ctx).Err() })
}

// cpuTimes is the process's user CPU time so far, and its user and system
// CPU time together. A kernel that accounts by ticks (CONFIG_TICK_CPU_ACCOUNTING,
// as on the machines these tables were made on) measures the total
// exactly and splits it into user and system by sampling at each tick, so
// the user time of a short phase scatters by tens of percent and the total
// does not.
func cpuTimes() (user, total time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Cost is what one phase of calls cost, per call.
type Cost struct {
	Name       string
	ServerUsec float64 // server command time (top-level commands)
	ClientUsec float64 // the client process's user CPU
	ClientAll  float64 // the client process's user and system CPU
	Rate       float64 // calls per second
}

// measure runs n calls of run and reads the server's command time of the
// top-level commands (top: which commands were sent by the client, not
// from a script) and the client's user CPU and its user and system CPU.
func measure(ctx context.Context, admin redis.UniversalClient, name string, n int,
	run func(context.Context, int) (time.Duration, error), top func(usec map[string]float64) float64) (Cost, error) {
	if err := resetStats(ctx, admin); err != nil {
		return Cost{}, err
	}
	runtime.GC() // the garbage of the phase before is collected on its time, not this one's
	user, all := cpuTimes()
	el, err := run(ctx, n)
	user1, all1 := cpuTimes()
	user, all = user1-user, all1-all
	if err != nil {
		return Cost{}, fmt.Errorf("%s: %w", name, err)
	}
	usec, _, err := CommandStats(ctx, admin)
	if err != nil {
		return Cost{}, err
	}
	return Cost{Name: name, ServerUsec: top(usec) / float64(n),
		ClientUsec: float64(user.Microseconds()) / float64(n), ClientAll: float64(all.Microseconds()) / float64(n),
		Rate: float64(n) / el.Seconds()}, nil
}

func sum(names ...string) func(map[string]float64) float64 {
	return func(u map[string]float64) float64 {
		t := 0.0
		for _, n := range names {
			t += u[n]
		}
		return t
	}
}

// checkAndSet is the least a completion that only its claim may make costs
// on a Redis without SET ... IFEQ (before 8.4): one script that compares the
// value the claim wrote and writes the record, reading no clock and
// building nothing.
var checkAndSet = redis.NewScript(`if redis.pcall('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0`)

// FloorFresh runs n pairs of a claim-sized SET NX GET PX and checkAndSet
// with a record-sized value on new keys, with the raw client: the floor of
// a fresh call whose completion is checked against its claim, decoding
// nothing.
func (s *Setup) FloorFresh(ctx context.Context, n int) (time.Duration, error) {
	r := strconv.FormatInt(round.Add(1), 10)
	return s.parallel(n, func(i int) error {
		k := "idem:floor-" + s.prefix + r + "-" + strconv.Itoa(i)
		if err := s.Raw.Do(ctx, "set", k, floorClaim, "nx", "get", "px", 60000).Err(); err != nil && err != redis.Nil {
			return err
		}
		return checkAndSet.Run(ctx, s.Raw, []string{k}, floorClaim, floorRecord, 600000).Err()
	})
}

// StoreClaims runs n Store.Claim calls on new keys (claims only): the
// server's time of a claim that writes, which a fresh call's top-level SET
// costs.
func (s *Setup) StoreClaims(ctx context.Context, n int) (time.Duration, error) {
	r := strconv.FormatInt(round.Add(1), 10)
	return s.parallel(n, func(i int) error {
		k := "idem:claims-" + s.prefix + r + "-" + strconv.Itoa(i)
		_, err := s.Store.Claim(ctx, storekit.ClaimRequest{Key: k, Nonce: "nonce-" + strconv.Itoa(i), LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second})
		return err
	})
}

// CostRounds is how many alternating rounds CostTable splits its calls
// into: every phase runs once per round, so a drift of the machine (another
// process, a frequency change, the heap's growth) falls on all phases
// alike instead of on whichever ran when it happened.
const CostRounds = 4

// CostTable prints, for the deployment gc (the Guard's client) and rc (raw
// commands, and INFO/CONFIG RESETSTAT on every master) reach, per call:
// the server's command time (INFO commandstats, reset between phases) and
// the client process's user CPU and user + system CPU (rusage), for raw GET, idem replay, raw
// SET NX PX + SET and idem fresh, calls calls each, with the ratios and
// the targets. Rows between them split a replay's cost: its command alone
// from the raw client (the floor), Store.Claim without a Guard, a raw
// GET whose value is decoded as the Guard decodes a result, and the least
// any replay does (that, and the key's storage key derived). Rows after
// idem fresh give the least a fresh call's commands cost on the server
// without SET ... IFEQ (a claim-checking script), and the least any fresh
// call does on the client (the storage key, the claim's SET NX GET PX, the
// result encoded, the record's SET). The calls of each phase are split
// over CostRounds
// alternating rounds; a row is the phase's total over the rounds divided
// by its calls, and the ratio columns also give the lowest and highest
// round's ratio. A fresh call's top-level commands are its claim's SET and
// the complete script's EVALSHA (which includes the commands it runs); the
// claim SET's time comes from a phase of claims alone, since INFO counts
// it under "set" together with the script's own SET. On a server whose SET
// has IFEQ, where the store completes with SET ... IFEQ and no script runs,
// a fresh call's time is its two SETs.
func CostTable(ctx context.Context, w io.Writer, name string, gc, rc redis.UniversalClient, calls int) error {
	s, err := NewSetup(ctx, gc, rc)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.PrepareReplays(ctx); err != nil {
		return err
	}
	const (
		get = iota
		getDecoded
		leastReplay
		replay
		replayFloor
		storeReplay
		pair
		claims
		fresh
		floor
		leastFresh
		phases
	)
	type phase struct {
		name string
		run  func(context.Context, int) (time.Duration, error)
		top  func(usec map[string]float64, claimUsec float64) float64 // claimUsec: this round's server time per claim
	}
	plain := func(names ...string) func(map[string]float64, float64) float64 {
		f := sum(names...)
		return func(u map[string]float64, _ float64) float64 { return f(u) }
	}
	per := max(calls/CostRounds, 1)
	ps := [phases]phase{
		get:         {"raw GET", s.RawReplay, plain("get")},
		getDecoded:  {"raw GET + json.Unmarshal of the value", s.RawReplayDecoded, plain("get")},
		leastReplay: {"least a replay does: storage key + raw GET + json.Unmarshal", s.LeastReplay, plain("get")},
		replay:      {"idem replay", s.GuardReplay, plain("set")},
		replayFloor: {"floor: SET NX GET PX of a claim on a record", s.FloorReplay, plain("set")},
		storeReplay: {"Store.Claim alone (no Guard, no result decoded)", s.StoreReplay, plain("set")},
		pair:        {"raw SET NX PX + SET", s.RawFresh, plain("set", "setnx")},
		claims:      {"claims alone", s.StoreClaims, plain("set")},
		fresh: {"idem fresh", s.GuardFresh, func(u map[string]float64, c float64) float64 {
			if u["evalsha"]+u["eval"] == 0 {
				// Completed by SET ... IFEQ: the claim's SET and the
				// completion's, no script.
				return u["set"]
			}
			return u["evalsha"] + c*float64(per)
		}},
		floor: {"floor: SET NX GET PX + check-and-SET script", s.FloorFresh, func(u map[string]float64, c float64) float64 {
			return u["evalsha"] + u["eval"] + c*float64(per)
		}},
		leastFresh: {"least a fresh call does: storage key + SET NX GET PX + json.Marshal + SET", s.LeastFresh, plain("set")},
	}
	var total [phases]Cost
	var rounds [CostRounds][phases]Cost
	for r := range CostRounds {
		for i, p := range ps {
			claimUsec := rounds[r][claims].ServerUsec
			c, err := measure(ctx, rc, p.name, per, p.run, func(u map[string]float64) float64 { return p.top(u, claimUsec) })
			if err != nil {
				return err
			}
			rounds[r][i] = c
			total[i].Name = p.name
			total[i].ServerUsec += c.ServerUsec / CostRounds
			total[i].ClientUsec += c.ClientUsec / CostRounds
			total[i].ClientAll += c.ClientAll / CostRounds
			total[i].Rate += c.Rate / CostRounds
		}
	}
	fmt.Fprintf(w, "\n%s: cost per call, %d calls per phase in %d alternating rounds, %d goroutines (server: INFO commandstats usec of the commands the client sent; client: user CPU, and user + system CPU, from rusage; ratio: all rounds [lowest round, highest round])\n",
		name, per*CostRounds, CostRounds, Workers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tserver µs\tclient user µs\tclient user+sys µs\tcalls/s\tserver ratio\tclient user ratio\tclient user+sys ratio\ttargets\t")
	spread := func(i, base int, f func(Cost) float64) string {
		lo, hi := math.Inf(1), math.Inf(-1)
		for r := range rounds {
			x := f(rounds[r][i]) / f(rounds[r][base])
			lo, hi = min(lo, x), max(hi, x)
		}
		return fmt.Sprintf("%.2fx [%.2f, %.2f]", f(total[i])/f(total[base]), lo, hi)
	}
	srv := func(c Cost) float64 { return c.ServerUsec }
	cli := func(c Cost) float64 { return c.ClientUsec }
	all := func(c Cost) float64 { return c.ClientAll }
	row := func(i, base int, target string) {
		c := total[i]
		if base < 0 {
			fmt.Fprintf(tw, "%s\t%.2f\t%.1f\t%.1f\t%.0f\t\t\t\t\t\n", c.Name, c.ServerUsec, c.ClientUsec, c.ClientAll, c.Rate)
			return
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t\n", c.Name, c.ServerUsec, c.ClientUsec, c.ClientAll, c.Rate,
			spread(i, base, srv), spread(i, base, cli), spread(i, base, all), target)
	}
	row(get, -1, "")
	row(replay, get, "server <= 1.5x, client <= 1.3x")
	row(replayFloor, get, "a replay's command and bytes, without the Guard and decoding")
	row(storeReplay, get, "the floor + the store's work: claim value, key, record decoded")
	row(getDecoded, get, "what the raw client's caller pays to use the value")
	row(leastReplay, get, "and to derive the key: the least any replay does")
	row(pair, -1, "")
	row(fresh, pair, "server <= 1.5x, client <= 1.0x")
	row(floor, pair, "least a claim-checked completion costs without SET IFEQ")
	row(leastFresh, pair, "claim read back, result encoded, record written: the least any fresh call does")
	row(claims, -1, "")
	return tw.Flush()
}

// LatencyTable prints the throughput ratio idem/raw for replays and fresh
// calls with delay added to every chunk in each direction (an in-process
// delaying pipe under every connection), rounds alternating rounds of
// calls calls each, median round, once for each number of concurrent
// callers. newPair makes the Guard's and the raw client with the given
// dialer. A few callers are limited by the network, as most services are;
// many callers on a small machine are limited by its CPU, so their ratio
// is the CPU ratio of CostTable rather than the network's.
func LatencyTable(ctx context.Context, w io.Writer, name string, delay time.Duration,
	newPair func(dial func(ctx context.Context, network, addr string) (net.Conn, error)) (gc, rc redis.UniversalClient),
	calls, rounds int, callers ...int) error {
	gc, rc := newPair(DelayDialer(delay))
	defer gc.Close()
	defer rc.Close()
	s, err := NewSetup(ctx, gc, rc)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.PrepareReplays(ctx); err != nil {
		return err
	}
	if len(callers) == 0 {
		callers = []int{Workers}
	}
	added, err := addedLatency(ctx, rc, newPair)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %v requested each way; the delaying pipe added %v each way (one caller, GET round trips with and without it: this machine's timers)\n",
		name, delay, added.Round(time.Microsecond))
	for _, c := range callers {
		if c < 1 || c > Workers {
			return fmt.Errorf("redisbench: %d callers: want 1 to %d", c, Workers)
		}
		s.workers = c
		rp, err := Compare(ctx, "replay", calls, rounds, s.GuardReplay, s.RawReplay)
		if err != nil {
			return err
		}
		fp, err := Compare(ctx, "fresh", calls, rounds, s.GuardFresh, s.RawFresh)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %v requested each way, %d goroutines, %d calls x %d alternating rounds, median: replay %.0f vs GET %.0f calls/s = %.2f; fresh %.0f vs SET NX PX + SET %.0f = %.2f (target >= 0.95)\n",
			name, delay, c, calls, rounds, rp.GuardOps, rp.RawOps, rp.Ratio(), fp.GuardOps, fp.RawOps, fp.Ratio())
	}
	return nil
}

// addedLatency measures what the delaying pipe under delayed adds to one
// round trip, each way: sequential GETs from one caller through a client
// of newPair without the pipe and through delayed, half the difference of
// the medians. Timers decide it: on a machine whose sleeps are coarse, it
// is more than the delay asked for.
func addedLatency(ctx context.Context, delayed redis.UniversalClient,
	newPair func(dial func(ctx context.Context, network, addr string) (net.Conn, error)) (gc, rc redis.UniversalClient)) (time.Duration, error) {
	gc, rc := newPair(nil)
	defer gc.Close()
	defer rc.Close()
	median := func(c redis.UniversalClient) (time.Duration, error) {
		var d []time.Duration
		for range 101 {
			start := time.Now()
			if err := c.Get(ctx, "idem:latency-probe").Err(); err != nil && err != redis.Nil {
				return 0, err
			}
			d = append(d, time.Since(start))
		}
		slices.Sort(d)
		return d[len(d)/2], nil
	}
	plain, err := median(rc)
	if err != nil {
		return 0, err
	}
	slow, err := median(delayed)
	if err != nil {
		return 0, err
	}
	return max(slow-plain, 0) / 2, nil
}

// DelayDialer dials the server and puts an in-process pipe in front of the
// connection that delivers every chunk, in each direction, delay after it
// was sent: a network with that one-way latency.
func DelayDialer(delay time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		srv, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cli, mine := net.Pipe()
		go delayCopy(srv, mine, delay)
		go delayCopy(mine, srv, delay)
		return cli, nil
	}
}

type chunk struct {
	b   []byte
	due time.Time
}

// delayCopy copies src to dst, each chunk delay after it was read.
func delayCopy(dst io.WriteCloser, src io.ReadCloser, delay time.Duration) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	wait := func(t time.Time) error { time.Sleep(time.Until(t)); return nil }
	if sl, err := newSleeper(); err == nil {
		defer sl.Close()
		wait = sl.until
	} // else the coarser sleep: addedLatency reports what it adds
	for c := range q {
		if wait(c.due) != nil {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	for range q {
		// drain, so the reader is not blocked
	}
}
