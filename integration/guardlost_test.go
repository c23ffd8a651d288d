package integration

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/sqlstore"
)

// Guard histories with lost presence sessions.
//
// On the stores whose backend tells a dead owner (PostgreSQL, MySQL or
// MariaDB, Redis, NATS), TestGuardLinearizable also runs Guard histories
// whose four clients each have a store of their own, so a presence token
// of their own (sqlstore: its own *sql.DB; redisstore: its own client;
// natsstore: its own presence connection), and a killer that every 20 ms
// to a takeover threshold ends one client's presence session from outside
// while the process lives, as the stores' TestLostPresenceSession do:
// pg_terminate_backend or KILL of the session holding the presence lock,
// CLIENT KILL of the connection holding the sharded subscription, a
// forced reconnection of the presence connection. The Redis and NATS
// clients dial slowly for half a second after a kill, so that the session
// stays lost that long (the sqlstore presence takes its lock again within
// its one-second check). Meanwhile the other clients may take the killed
// client's claims over at once (Event.OwnerGone), while its fn runs: the
// model (gStep) lets the taker's run start before the old one is cut off
// only when the old owner's session was killed while its run held the
// key, and never records the old run's value. The filestore has no such
// runs: its presence is a flock its process holds for its whole life,
// which nothing outside the process can take from it.

var lostHistories = flag.Int("lin.lost", 3, "Guard histories with killed presence sessions per store with presence in TestGuardLinearizable")

// lostRotate gives the clients of the histories with killed sessions the
// two secrets in either order, as the other histories do. It is off by
// default: with a store object per client (even without presence and
// without kills), the two orders sometimes make a call's claims under
// its two storage keys lapse before fn starts, hundreds of times in a
// row, until the calls' 20 s deadlines, which makes a history last a
// minute.
var lostRotate = flag.Bool("lin.lost.rotate", false, "Guard histories with killed presence sessions: clients with either order of two secrets")

// lostHold is how long a Redis or NATS client dials slowly after its
// presence connection is killed.
const lostHold = 500 * time.Millisecond

// lostClient is one client's store, and how to kill its presence session.
type lostClient struct {
	store storekit.Store
	owner string
	// kill ends the store's presence session from outside and returns a
	// func that reports whether the store holds its presence again.
	kill func(ctx context.Context) (func(ctx context.Context) (bool, error), error)
}

// lostBackend opens, for a test, a maker of clients on one table, prefix
// or bucket, and a checker of owners' liveness there.
type lostBackend struct {
	name string
	open func(t testing.TB) (func(t testing.TB) lostClient, storekit.LivenessChecker)
}

var lostBackends = []lostBackend{
	{name: "postgres", open: func(t testing.TB) (func(testing.TB) lostClient, storekit.LivenessChecker) {
		return openLostSQL(t, sqlstore.Postgres)
	}},
	{name: "mysql", open: func(t testing.TB) (func(testing.TB) lostClient, storekit.LivenessChecker) {
		return openLostSQL(t, sqlstore.MySQL)
	}},
	{name: "redis", open: openLostRedis},
	{name: "nats", open: openLostNATS},
}

// openLostSQL makes clients on a table of their own, each over a pool of
// its own.
func openLostSQL(t testing.TB, d sqlstore.Dialect) (func(testing.TB) lostClient, storekit.LivenessChecker) {
	t.Helper()
	admin := sqlDB(t, d)
	table := "idem_lin_" + randHex(6)
	opts := []sqlstore.Option{sqlstore.WithTable(table), sqlstore.WithRetention(0)}
	checker, err := sqlstore.New(admin, d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := checker.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = checker.Close()
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + table)
		if d == sqlstore.MySQL {
			_, _ = admin.Exec("DROP PROCEDURE IF EXISTS " + table + "_claim_v2") // Migrate's claim procedure
		}
	})
	driver, source := "pgx", testenv.PostgresDSN(t)
	if d == sqlstore.MySQL {
		driver, source = "mysql", testenv.MySQLDSN(t)
	}
	return func(t testing.TB) lostClient {
		t.Helper()
		db, err := sql.Open(driver, source)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(8)
		t.Cleanup(func() { _ = db.Close() })
		s, err := sqlstore.New(db, d, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		owner := s.Owner()
		if owner == "" {
			t.Fatalf("%s: the store has no presence", d)
		}
		return lostClient{store: s, owner: owner, kill: func(ctx context.Context) (func(context.Context) (bool, error), error) {
			id, err := sqlPresenceSession(ctx, admin, d, owner)
			if err != nil || id == 0 {
				return nil, fmt.Errorf("presence session of %s: %d, %v", owner, id, err)
			}
			if d == sqlstore.Postgres {
				_, err = admin.ExecContext(ctx, "SELECT pg_terminate_backend($1)", id)
			} else {
				_, err = admin.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
			}
			return func(ctx context.Context) (bool, error) {
				again, err := sqlPresenceSession(ctx, admin, d, owner)
				return again != 0 && again != id, err
			}, err
		}}
	}, checker
}

// sqlPresenceSession returns the id of the session holding the presence
// lock of token (0: none), as sqlstore's presence.go names that lock: a
// PostgreSQL advisory lock (0x1de05eed, hashtext(token)), a MySQL lock
// "idem_owner:" + token.
func sqlPresenceSession(ctx context.Context, db *sql.DB, d sqlstore.Dialect, token string) (int64, error) {
	q := `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objid = hashtext($2)::oid AND objsubid = 2 AND granted`
	args := []any{0x1de05eed, token}
	if d == sqlstore.MySQL {
		q, args = `SELECT IS_USED_LOCK(?)`, []any{"idem_owner:" + token}
	}
	var id sql.NullInt64
	err := db.QueryRowContext(ctx, q, args...).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return id.Int64, err
}

// slowDial is a dialer that, until the time in until (Unix nanoseconds),
// waits that long first.
func slowDial(until *atomic.Int64, network, addr string) (net.Conn, error) {
	if d := time.Until(time.Unix(0, until.Load())); d > 0 {
		time.Sleep(d)
	}
	return net.DialTimeout(network, addr, 10*time.Second)
}

// openLostRedis makes clients on a prefix of their own on the test Redis,
// each a go-redis client of its own, named so that CLIENT LIST shows its
// presence connection.
func openLostRedis(t testing.TB) (func(testing.TB) lostClient, storekit.LivenessChecker) {
	t.Helper()
	addr := testenv.RedisAddr(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Ping(ctxT(t)).Err(); err != nil {
		testenv.Missing(t, "redis ping: "+err.Error())
	}
	prefix := "lin" + randHex(6) + ":"
	checker, err := redisstore.New(admin, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = checker.Close() })
	return func(t testing.TB) lostClient {
		t.Helper()
		name := "idemlin" + randHex(6)
		var until atomic.Int64
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16, ClientName: name,
			Dialer: func(_ context.Context, network, addr string) (net.Conn, error) {
				return slowDial(&until, network, addr)
			}})
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		owner := s.Owner()
		if owner == "" {
			t.Fatal("redis: the store has no presence")
		}
		return lostClient{store: s, owner: owner, kill: func(ctx context.Context) (func(context.Context) (bool, error), error) {
			id, err := redisPresenceConn(ctx, admin, name)
			if err != nil {
				return nil, err
			}
			until.Store(time.Now().Add(lostHold).UnixNano())
			if err := admin.Do(ctx, "client", "kill", "id", id).Err(); err != nil {
				return nil, err
			}
			return func(ctx context.Context) (bool, error) {
				again, err := redisPresenceConn(ctx, admin, name)
				return again != "" && again != id, err
			}, nil
		}}
	}, checker
}

// redisPresenceConn returns the id of the connection named name that holds
// a sharded subscription ("" none), as redisstore's TestLostPresenceSession
// finds it.
func redisPresenceConn(ctx context.Context, admin *redis.Client, name string) (string, error) {
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " ssub=1 ") {
			return strings.TrimPrefix(strings.Fields(line)[0], "id="), nil
		}
	}
	return "", nil
}

// natsDialer is a nats.CustomDialer that dials slowly for a while.
type natsDialer struct{ until atomic.Int64 }

func (d *natsDialer) Dial(network, addr string) (net.Conn, error) {
	return slowDial(&d.until, network, addr)
}

// openLostNATS makes clients on a bucket of their own, sharing its
// connection, each with a presence connection of its own (WithConn).
func openLostNATS(t testing.TB) (func(testing.TB) lostClient, storekit.LivenessChecker) {
	t.Helper()
	url := testenv.Lookup(t, "IDEM_NATS_URL", "nats")
	kv := natsBucket(t)
	checker, err := natsstore.New(kv, natsstore.WithoutCleanup())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = checker.Close() })
	return func(t testing.TB) lostClient {
		t.Helper()
		d := &natsDialer{}
		pc, err := nats.Connect(url, nats.SetCustomDialer(d), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pc.Close)
		s, err := natsstore.New(kv, natsstore.WithConn(pc), natsstore.WithRetention(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		owner := s.Owner()
		if owner == "" {
			t.Fatal("nats: the store has no presence")
		}
		return lostClient{store: s, owner: owner, kill: func(context.Context) (func(context.Context) (bool, error), error) {
			before := pc.Stats().Reconnects
			d.until.Store(time.Now().Add(lostHold).UnixNano())
			if err := pc.ForceReconnect(); err != nil {
				return nil, err
			}
			return func(context.Context) (bool, error) {
				return pc.Stats().Reconnects > before && pc.IsConnected(), nil
			}, nil
		}}
	}, checker
}

// lostCounts are the figures of the histories with killed sessions.
type lostCounts struct {
	kills     atomic.Int64 // presence sessions killed
	gone      atomic.Int64 // claims (calls and steps) taken over from an owner known gone
	lostOwner atomic.Int64 // fn runs told by their heartbeat that their claim was taken over
}

func (n *lostCounts) observe(_ context.Context, e idem.Event) {
	switch {
	case e.OwnerGone && (e.Kind == idem.EventTakeover || e.Kind == idem.EventStepRun):
		n.gone.Add(1)
	case e.Kind == idem.EventLostOwnership:
		n.lostOwner.Add(1)
	}
}

// killer returns a history's during func: it kills the presence session
// of a client whose fn runs (one at random), logging evLost on every key just before, and
// evBack a threshold after the session is back (a run of the client
// claimed while the session was dead has started by then: the Guard
// starts no fn on a claim older than the threshold); then it waits 20 ms
// to a threshold, and kills again (as soon as a fn runs). Its stop func waits for the kill under
// way.
func killer(t testing.TB, clients []lostClient, live storekit.LivenessChecker, seed uint64, n *lostCounts) func(*gLog, []string) func() {
	return func(log *gLog, keys []string) func() {
		rnd := rand.New(rand.NewPCG(seed, 7))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			pause := 5 * time.Millisecond
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(pause):
				}
				pause = 5 * time.Millisecond
				c := holder(log, rnd)
				if c == 0 {
					continue // look again in 5 ms
				}
				pause = 20*time.Millisecond + time.Duration(rnd.Int64N(int64(gThreshold-20*time.Millisecond)))
				killOne(t, log, keys, c, clients[c-1], live)
				n.kills.Add(1)
			}
		}()
		return func() {
			cancel()
			<-done
		}
	}
}

// holder returns a client whose fn has started and neither ended nor been
// cut off, one at random, or 0 if there is none.
func holder(log *gLog, rnd *rand.Rand) int {
	log.mu.Lock()
	runs := map[string]bool{} // client and key of a run under way
	for _, op := range log.ops {
		in := op.Input.(gInput)
		run := fmt.Sprint(in.Client, " ", in.Key)
		switch {
		case strings.HasSuffix(in.Key, "/charge"):
		case in.Kind == evStart:
			runs[run] = true
		case in.Kind == evEnd, in.Kind == evCut:
			delete(runs, run)
		}
	}
	log.mu.Unlock()
	var cs []int
	for run := range runs {
		var c int
		_, _ = fmt.Sscan(run, &c)
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return 0
	}
	sort.Ints(cs)
	return cs[rnd.IntN(len(cs))]
}

// killOne kills client c's presence session and waits until it is back.
func killOne(t testing.TB, log *gLog, keys []string, c int, cl lostClient, live storekit.LivenessChecker) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range keys {
		log.add(gInput{Key: k, Kind: evLost, Client: c})
	}
	back, err := cl.kill(ctx)
	if err != nil {
		t.Errorf("kill the presence session of client %d: %v", c, err)
	}
	for err == nil {
		ok, berr := back(ctx)
		if ok {
			var l storekit.Liveness
			if l, err = live.OwnerLiveness(ctx, cl.owner); l == storekit.Alive {
				break
			}
		}
		if berr != nil || ctx.Err() != nil {
			t.Errorf("the presence session of client %d is not back: %v, %v", c, berr, ctx.Err())
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(gThreshold)
	for _, k := range keys {
		log.add(gInput{Key: k, Kind: evBack, Client: c})
	}
}

// overlaps counts the runs that started while another client's run of
// their key (fn or step) had started and was neither cut off nor ended:
// the takeovers of a killed session's live claims that the model allows.
func overlaps(ops []porcupine.Operation) int {
	n := 0
	for _, part := range guardModel.Partition(ops) {
		sorted := append([]porcupine.Operation(nil), part...)
		sortByCall(sorted)
		holders := map[int]bool{}
		for _, op := range sorted {
			in := op.Input.(gInput)
			switch in.Kind {
			case evStart:
				if len(holders) > 0 {
					n++
				}
				holders[in.Client] = true
			case evCut, evEnd:
				delete(holders, in.Client)
			}
		}
	}
	return n
}

// lostGuardRuns runs the histories with killed sessions of lb (called by
// TestGuardLinearizable), on stores given by wrap.
func lostGuardRuns(t *testing.T, lb lostBackend, wrap func(storekit.Store) storekit.Store) (illegal int) {
	newClient, live := lb.open(t)
	seed := firstSeed()
	var n lostCounts
	var events, overlapping int
	var took []time.Duration
	clients := make([]lostClient, gClients)
	for c := range clients {
		clients[c] = newClient(t)
	}
	for i := range *lostHistories {
		hs := seed + uint64(i)
		began := time.Now()
		ops := guardHistoryOn(t, func(c int) storekit.Store { return wrap(clients[c-1].store) }, hs, fmt.Sprint("glost-", hs),
			*lostRotate, []idem.Option{idem.WithObserver(n.observe)}, killer(t, clients, live, hs, &n))
		took = append(took, time.Since(began).Round(time.Millisecond))
		events += len(ops)
		overlapping += overlaps(ops)
		if porcupine.CheckOperationsTimeout(guardModel, ops, checkTimeout) == porcupine.Illegal {
			illegal++
			t.Logf("%s: Guard history with killed sessions (seed %d) breaks at most once:\n%s", lb.name, hs, describeGuardIllegal(ops))
		}
	}
	t.Logf("%s: %d Guard histories with killed presence sessions (%d events, seeds %d..): %d sessions killed, %d claims taken over from a gone owner, "+
		"%d runs started while another run of their key was not yet cut off, %d old owners told of the loss by their heartbeat; %d illegal; took %v",
		lb.name, *lostHistories, events, seed, n.kills.Load(), n.gone.Load(), overlapping, n.lostOwner.Load(), illegal, took)
	return illegal
}

// sortByCall sorts ops by the time of their call.
func sortByCall(ops []porcupine.Operation) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
}

var lostBroken = flag.Bool("lin.lost.broken", false, "TestGuardLostSessionsBroken: run the histories with killed sessions on stores that ignore the nonce")

// nonceBlind is a broken store: its heartbeats and completions apply to
// the key's live claim, whichever nonce they bear, so an owner whose
// claim was taken over goes on and records its value.
type nonceBlind struct{ storekit.Store }

// live returns the nonce of key's claim in progress, or nonce.
func (s nonceBlind) live(ctx context.Context, key, nonce string) string {
	if rec, err := s.Store.Get(ctx, key); err == nil && rec != nil && rec.Status == storekit.StatusInProgress {
		return rec.Nonce
	}
	return nonce
}

func (s nonceBlind) Heartbeat(ctx context.Context, key, nonce string, lease time.Duration) error {
	return s.Store.Heartbeat(ctx, key, s.live(ctx, key, nonce), lease)
}

func (s nonceBlind) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	return s.Store.Complete(ctx, key, s.live(ctx, key, nonce), c)
}

func (s nonceBlind) Owner() string { return s.Store.(storekit.Presence).Owner() }

// TestGuardLostSessionsBroken (flag -lin.lost.broken) runs the histories
// with killed sessions on PostgreSQL through nonceBlind, and expects the
// check to find one illegal.
func TestGuardLostSessionsBroken(t *testing.T) {
	if !*lostBroken {
		t.Skip("-lin.lost.broken not set")
	}
	if lostGuardRuns(t, lostBackends[0], func(s storekit.Store) storekit.Store { return nonceBlind{s} }) == 0 {
		t.Errorf("no history on the nonce-blind store was found illegal")
	}
}
