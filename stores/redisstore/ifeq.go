package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/redis/go-redis/v9"
)

// The conditional completion. The completion of a fresh claim that nothing
// touched since its SET NX (no heartbeat, no waiter, no takeover, no
// release: the key holds exactly the value the claim wrote) is one command
// that writes the record the client built, and only if the key still holds
// the claim's value:
//
//	SET key record IFEQ claim PXAT expires_at
//
// natively where SET has IFEQ (Valkey 8.1 and later, Redis 8.4 and later),
// and elsewhere lua/set_ifeq.lua, which does the same in four lines (one
// GET, one SET: the least a script can do; the complete script's fast
// path also reads the claim's times and the server's clock and builds the
// record in Lua, which cost a Redis 7.0 about half again as much server
// time per fresh call). The claim's value carries the claim's random
// nonce, so a paused owner whose claim was taken over, released or expired
// writes nothing.
// The record is the one lua/complete.lua would build, with its times
// from the server's clock as the store reads it (serverClock): a native
// expiry that is its expires_at exactly, as for every completed
// record. Anything else (the values differ: a waiter marked the key, or
// the claim is no longer there) runs the complete script, which decides as
// always: one more round trip, only for a key that someone waits on or
// that this caller no longer owns.
//
// The path is taken on a standalone or Sentinel client (*redis.Client) and
// on a Cluster (each master's clock read apart), with WAIT pipelined behind
// the SET under WithReplicaAck, once the store has read the server's
// version and clock (in LoadScripts, or in the background at the first
// completion on it; again every clockMaxAge); until then, and on a Ring,
// the complete script runs.

// clockMaxAge is how long a reading of the server's clock serves before the
// store reads it again (in the background; completions meanwhile use the
// reading they have).
const clockMaxAge = 10 * time.Second

// clockMaxUse is the oldest reading a completion uses (when reading again
// keeps failing): past it, the complete script reads the server's clock.
// A reading ages only by the rate difference of two clocks (parts per
// million) and by a step of the server's clock, which the next reading
// takes in.
const clockMaxUse = 5 * time.Minute

// clockMaxRTT is the slowest TIME round trip whose reading the store keeps
// (the best of three tries): the reading is the middle of the round trip,
// so half of it bounds the reading's error. A busy client's round trip
// includes its wait for a pooled connection.
const clockMaxRTT = 100 * time.Millisecond

// serverClock is a reading of the server's clock: the server's Unix time
// at a local instant with a monotonic reading, so later server times are
// that time plus the local monotonic time elapsed since (the local wall
// clock, which may be set or skewed, is never read). ifeq is whether the
// server's SET has IFEQ (else the store runs lua/set_ifeq.lua).
type serverClock struct {
	serverUs int64     // the server's Unix time, µs (TIME)
	at       time.Time // the local instant it was read at (mid round trip)
	ifeq     bool
}

// ms returns the server's Unix time in ms at the local instant t.
func (c *serverClock) ms(t time.Time) int64 {
	return (c.serverUs + t.Sub(c.at).Microseconds()) / 1000
}

// nodeClock is the reading of one server's clock and whether a new
// reading is under way.
type nodeClock struct {
	c       atomic.Pointer[serverClock]
	reading atomic.Bool
}

// clock returns the reading of the clock of the server that holds the
// Redis key rk, for a conditional completion, or nil when there is none
// that serves (not yet read, or the deployment is one the path is not
// taken on). A reading older than clockMaxAge is read again in the
// background. On a Cluster each master has its own reading.
func (s *Store) clock(ctx context.Context, rk string, now time.Time) *serverClock {
	node, nc := s.nodeClock(ctx, rk)
	if node == nil {
		return nil
	}
	c := nc.c.Load()
	if c == nil || now.Sub(c.at) >= clockMaxAge {
		s.readClock(nc, node)
	}
	if c == nil || now.Sub(c.at) >= clockMaxUse {
		return nil
	}
	return c
}

// nodeClock returns the server that holds the Redis key rk (the client
// itself, or the key's master on a Cluster) and the store's reading of its
// clock; node is nil on a deployment the conditional completion is not
// taken on, or when a Cluster cannot say which master holds rk.
func (s *Store) nodeClock(ctx context.Context, rk string) (node *redis.Client, nc *nodeClock) {
	switch c := s.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, rk)
		if err != nil {
			return nil, nil
		}
		node = n
	default:
		return nil, nil
	}
	v, ok := s.clocks.Load(node.Options().Addr)
	if !ok {
		v, _ = s.clocks.LoadOrStore(node.Options().Addr, &nodeClock{})
	}
	return node, v.(*nodeClock)
}

// readClock starts one background reading of node's version and clock
// into nc, unless one runs or the store is closed.
func (s *Store) readClock(nc *nodeClock, node *redis.Client) {
	if !nc.reading.CompareAndSwap(false, true) {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.reading.Store(false)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer nc.reading.Store(false)
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		defer cancel()
		if c, err := readServerClock(ctx, node); err == nil {
			nc.c.Store(c)
		}
	}()
}

// readServerClock reads whether c's server has SET ... IFEQ (INFO server)
// and its clock (TIME).
func readServerClock(ctx context.Context, c *redis.Client) (*serverClock, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return nil, err
	}
	ifeq := hasIfEq(info)
	var best *serverClock
	bestRTT := clockMaxRTT + 1
	for range 3 {
		t0 := time.Now()
		tm, err := c.Time(ctx).Result()
		rtt := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if rtt < bestRTT {
			best, bestRTT = &serverClock{serverUs: tm.UnixMicro(), at: t0.Add(rtt / 2), ifeq: ifeq}, rtt
		}
	}
	if best == nil {
		return nil, errors.New("redisstore: the server's clock took too long to read")
	}
	return best, nil
}

// hasIfEq reports whether the server INFO server describes has SET ...
// IFEQ: Valkey 8.1 or later, Redis 8.4 or later.
func hasIfEq(info string) bool {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	if v, ok := fields["valkey_version"]; ok {
		return versionAtLeast(v, 8, 1)
	}
	if name := fields["server_name"]; name != "" && name != "redis" {
		return false
	}
	return versionAtLeast(fields["redis_version"], 8, 4)
}

// versionAtLeast reports whether the version v ("8.1.1") is at least
// major.minor; a version that does not parse is not.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// completedRecord is the record a completion of the fresh claim whose value
// is claim writes (as lua/complete.lua builds it): sf, lens and body
// from outcome, times in Unix ms.
func completedRecord(claim, sf, lens, body string, expires, now, started int64) string {
	b := make([]byte, 0, len(claim)+len(body))
	b = append(b, magic...)
	b = append(b, sf...)
	b = pad(b, expires, numWidth)
	b = pad(b, now, numWidth) // heartbeat_at
	b = pad(b, started, numWidth)
	b = pad(b, now, numWidth)                        // completed_at
	b = append(b, claim[offAttempt:offResultLen]...) // attempt, takeover, three lengths
	b = append(b, lens...)
	b = append(b, claim[headerLen:claimEnd(claim)]...) // nonce, payload hash, key; not the owner
	b = append(b, body...)
	return string(b)
}

// claimEnd returns where the nonce, payload hash and key of a claim's value
// (one claimBytes built) end: the end of the value, or where its owner
// starts.
func claimEnd(claim string) int {
	end := headerLen
	for _, off := range []int{offNonceLen, offHashLen, offKeyLen} {
		n, _ := digits(claim[off : off+smallWidth])
		end += int(n)
	}
	return min(end, len(claim))
}

// completeIfEq tries the conditional completion of the fresh claim f of key.
// done is true when the record was written. It is false with a nil error
// when the store has no reading of the server's clock, or the conditional
// SET wrote nothing: the key no longer holds the claim's value, or the
// server refused the command (then, for a refused IFEQ, the store stops
// using it until it reads the server again). Then the complete script
// decides.
func (s *Store) completeIfEq(ctx context.Context, key string, f freshClaim, comp storekit.Completion, sf, lens, body string) (done bool, err error) {
	rk := s.Key(key)
	c := s.clock(ctx, rk, time.Now())
	if c == nil || len(f.value) < headerLen {
		return false, nil
	}
	now := c.ms(time.Now())
	expires := now + comp.TTL.Milliseconds()
	started := min(c.ms(f.sent), now)
	rec := completedRecord(f.value, sf, lens, body, expires, now, started)
	if !c.ifeq {
		return s.setIfEqScript(ctx, key, f.value, rec, expires)
	}
	cmd := redis.NewStatusCmd(ctx, "set", rk, rec, "ifeq", f.value, "pxat", expires)
	var wait *redis.Cmd
	if s.ackN > 0 {
		// WithReplicaAck: WAIT in the same pipeline, on the key's master.
		pl, err := s.ackPipeliner(ctx, rk)
		if err != nil {
			return false, nil // the script's own try reports it
		}
		p := pl.Pipeline()
		_ = p.Process(ctx, cmd)
		wait = p.Do(ctx, "wait", s.ackN, s.ackTimeout.Milliseconds())
		_, _ = p.Exec(ctx)
	} else {
		_ = s.proc.Process(ctx, cmd)
	}
	switch err := cmd.Err(); {
	case err == nil:
		if wait != nil {
			acked, werr := wait.Int64()
			var ackErr *ReplicaAckError
			if werr != nil {
				ackErr = &ReplicaAckError{Op: "complete", Key: key, Want: s.ackN, Err: werr}
			}
			return true, s.notAcked("complete", key, acked, ackErr)
		}
		return true, nil
	case err == redis.Nil:
		return false, nil
	default:
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return false, checked("complete", key, err)
		}
		if strings.HasPrefix(err.Error(), "ERR syntax") {
			// The server does not take IFEQ after all (a failover to an
			// older server): no IFEQ until it is read again.
			s.clocks.Clear()
		}
		// A server's error (the key holds another type, say): the script
		// reports it.
		return false, nil
	}
}

// setIfEqScript is completeIfEq on a server whose SET has no IFEQ:
// lua/set_ifeq.lua, run as every script of the store is (EVALSHA, EVAL
// when the server lost it; WAIT behind it under WithReplicaAck).
func (s *Store) setIfEqScript(ctx context.Context, key, claim, rec string, expires int64) (done bool, err error) {
	v, acked, err := s.run(ctx, "complete", scriptSetIfEq, key, true, claim, rec, expires)
	var ackErr *ReplicaAckError
	if err != nil && !errors.As(err, &ackErr) {
		var rerr redis.Error
		if errors.As(err, &rerr) {
			return false, nil // the key holds another type, say: the script reports it
		}
		return false, err
	}
	if v == nil {
		return false, nil // the key holds something else
	}
	return true, s.notAcked("complete", key, acked, ackErr)
}
