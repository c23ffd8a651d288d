// Command benchtable measures the DynamoDB store and a Guard over it against
// the raw DynamoDB requests they stand for, in one run against one table,
// and prints throughput, latency, requests per call, the ratio to the raw
// requests and the capacity units consumed per call.
//
//	IDEM_DYNAMODB_ENDPOINT=http://127.0.0.1:8765 go run ./stores/dynamostore/internal/benchtable
//	go run ./stores/dynamostore/internal/benchtable -endpoint http://127.0.0.1:8765 -c 32 -n 2000
//	go run ./stores/dynamostore/internal/benchtable -endpoint "" -table idem-bench -region eu-west-1   # real DynamoDB
//
// Every variant runs n calls spread over c goroutines, once per round; the
// rounds rotate the order of the variants so that none always runs on a
// warmer or a busier server. The ratio is the variant's throughput over the
// raw requests' (1.0 = as fast as raw; higher is faster).
//
// Raw fresh is the conditional PutItem (attribute_not_exists) a hand-written
// client would send to claim, plus the nonce-conditioned UpdateItem that
// records the outcome; raw replay is that PutItem refused, returning the
// item through ReturnValuesOnConditionCheckFailure=ALL_OLD.
//
// Capacity: after the timed rounds every variant runs a few more calls with
// ReturnConsumedCapacity=TOTAL on each request, and the table prints the
// write (WCU) and read (RCU) units reported per call. A request refused by
// its condition reports nothing (DynamoDB returns no ConsumedCapacity with a
// ConditionalCheckFailedException, though it charges the write: one WCU per
// KB of the larger of the old and new item); those requests are counted in
// the "refused" column, with that charge estimated from the item sizes.
//
// With -endpoint it uses static dummy credentials (DynamoDB Local);
// without, the default AWS credential chain. The table is created if
// missing (pk/sk strings, on-demand, TTL on ttl); items are written under a
// random prefix and, with real DynamoDB, expire through TTL.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
)

func main() {
	endpoint := flag.String("endpoint", os.Getenv("IDEM_DYNAMODB_ENDPOINT"), "DynamoDB endpoint URL (e.g. DynamoDB Local); empty = AWS")
	region := flag.String("region", "us-east-1", "AWS region")
	table := flag.String("table", "idem_bench", "table name")
	n := flag.Int("n", 200, "calls per variant per round")
	c := flag.Int("c", 32, "concurrent callers")
	rounds := flag.Int("rounds", 15, "measured rounds (short, interleaved: the load of a shared machine changes by the second)")

	serverPID := flag.Int("server-pid", 0, "process id of the DynamoDB server (e.g. DynamoDB Local's java) whose CPU time per call to print (Linux)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the client process to this file")
	flag.Parse()
	if *n < 1 || *c < 1 || *rounds < 1 {
		log.Fatal("benchtable: -n, -c and -rounds must be positive")
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*endpoint, *region, *table, *n, *c, *rounds, *serverPID); err != nil {
		log.Print(err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

type variant struct {
	name string
	fn   func(ctx context.Context, i int) error
	d    time.Duration // wall time of the measured rounds
	reqs int64
	// CPU time of this process and of the server during the measured rounds
	clientCPU, serverCPU time.Duration
	// capacity pass
	calls, unreported int
	wcu, rcu          float64
	refusedWCU        float64
}

// meter counts requests and, while capture is set, asks every request for
// its consumed capacity and adds it up.
type meter struct {
	requests   atomic.Int64
	capture    atomic.Bool
	mu         sync.Mutex
	wcu, rcu   float64
	unreported int
	refusedWCU float64 // estimated charge of the refused writes
}

func (m *meter) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		if err := s.Finalize.Add(middleware.FinalizeMiddlewareFunc("benchCountRequests",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				m.requests.Add(1)
				return next.HandleFinalize(ctx, in)
			}), middleware.After); err != nil {
			return err
		}
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("benchConsumedCapacity",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if !m.capture.Load() {
					return next.HandleInitialize(ctx, in)
				}
				switch p := in.Parameters.(type) {
				case *dynamodb.PutItemInput:
					p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
				case *dynamodb.UpdateItemInput:
					p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
				case *dynamodb.GetItemInput:
					p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
				case *dynamodb.DeleteItemInput:
					p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
				}
				out, md, err := next.HandleInitialize(ctx, in)
				var cc *types.ConsumedCapacity
				switch r := out.Result.(type) {
				case *dynamodb.PutItemOutput:
					cc = r.ConsumedCapacity
				case *dynamodb.UpdateItemOutput:
					cc = r.ConsumedCapacity
				case *dynamodb.GetItemOutput:
					cc = r.ConsumedCapacity
				case *dynamodb.DeleteItemOutput:
					cc = r.ConsumedCapacity
				}
				m.mu.Lock()
				defer m.mu.Unlock()
				switch {
				case cc == nil:
					m.unreported++
					var ccf *types.ConditionalCheckFailedException
					if errors.As(err, &ccf) {
						size := itemSize(ccf.Item)
						if p, ok := in.Parameters.(*dynamodb.PutItemInput); ok {
							size = max(size, itemSize(p.Item))
						}
						m.refusedWCU += float64((size + 1023) / 1024)
					}
				case cc.WriteCapacityUnits != nil || cc.ReadCapacityUnits != nil:
					m.wcu += aws.ToFloat64(cc.WriteCapacityUnits)
					m.rcu += aws.ToFloat64(cc.ReadCapacityUnits)
				default: // only the total: a write for writes, a read for GetItem
					if _, read := in.Parameters.(*dynamodb.GetItemInput); read {
						m.rcu += aws.ToFloat64(cc.CapacityUnits)
					} else {
						m.wcu += aws.ToFloat64(cc.CapacityUnits)
					}
				}
				return out, md, err
			}), middleware.Before)
	})
}

func (m *meter) take() (wcu, rcu float64, unreported int, refusedWCU float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	wcu, rcu, unreported, refusedWCU = m.wcu, m.rcu, m.unreported, m.refusedWCU
	m.wcu, m.rcu, m.unreported, m.refusedWCU = 0, 0, 0, 0
	return
}

// itemSize is an item's size as DynamoDB bills it: attribute names plus
// values (strings and binaries by length, numbers about one byte per two
// digits plus one).
func itemSize(item map[string]types.AttributeValue) int {
	size := 0
	for name, v := range item {
		size += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			size += len(v.Value)
		case *types.AttributeValueMemberB:
			size += len(v.Value)
		case *types.AttributeValueMemberN:
			size += (len(v.Value)+1)/2 + 1
		default:
			size += 1
		}
	}
	return size
}

func run(endpoint, region, table string, n, c, rounds int, serverPID int) error {
	ctx := context.Background()
	m := &meter{}
	client, err := newClient(ctx, endpoint, region, c, m)
	if err != nil {
		return err
	}
	if err := dynamostore.CreateTable(ctx, client, table); err != nil {
		return err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "bench" + hex.EncodeToString(b) + "#"
	store, err := dynamostore.New(client, table, dynamostore.WithKeyPrefix(prefix))
	if err != nil {
		return err
	}
	g, err := idem.New[int](store)
	if err != nil {
		return err
	}
	raw := rawClient{client: client, table: table}

	// Replays go to keys completed beforehand, a different one on every
	// concurrent call (callers of one key in one process would share a
	// claim, and a hot item is not what a replay usually hits).
	keys := min(n, 1000)
	var offset int
	prep, fresh, replay := variants(raw, store, g, prefix, keys, &offset)
	for _, v := range prep {
		if err := burst(ctx, v, keys, c); err != nil {
			return err
		}
	}

	fmt.Printf("DynamoDB %s, table %s, %d callers, %d rounds x %d calls per variant\n\n",
		or(endpoint, "(AWS, region "+region+")"), table, c, rounds, n)
	mc := measurement{m: m, n: n, c: c, rounds: rounds, serverPID: serverPID, offset: &offset}
	for _, set := range [][]*variant{fresh, replay} {
		if err := mc.measure(ctx, set); err != nil {
			return err
		}
	}
	mc.print(fresh, replay)
	return nil
}

// variants returns the calls that prepare the replayed keys (keys of
// them), and the fresh and replay variants: each the raw requests, the
// store's, and the Guard's. Fresh calls take their keys from *offset on.
func variants(raw rawClient, store *dynamostore.Store, g *idem.Guard[int], prefix string, keys int, offset *int) (prep, fresh, replay []*variant) {
	fn := func(context.Context) (int, error) { return 42, nil }
	refused := func(err error) error {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) && len(ccf.Item) > 0 {
			return nil
		}
		return fmt.Errorf("want a refused condition with the item, got %v", err)
	}
	rk := func(i int) string { return "replay-" + strconv.Itoa(i%keys) }
	prep = []*variant{
		{name: "prepare raw", fn: func(ctx context.Context, i int) error {
			if err := raw.put(ctx, prefix+"raw-"+rk(i), "n"); err != nil {
				return err
			}
			return raw.complete(ctx, prefix+"raw-"+rk(i))
		}},
		{name: "prepare store", fn: func(ctx context.Context, i int) error {
			k := "idem:store-" + rk(i)
			if _, err := store.Claim(ctx, storekit.ClaimRequest{Key: k, Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second}); err != nil {
				return err
			}
			return store.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("42"), TTL: time.Hour})
		}},
		{name: "prepare guard", fn: func(ctx context.Context, i int) error {
			_, err := g.Do(ctx, "guard-"+rk(i), fn)
			return err
		}},
	}

	// Fresh calls go to new keys: the round's offset plus the call's index.
	id := func(i int) string { return "fresh-" + strconv.Itoa(*offset+i) }
	fresh = []*variant{
		{name: "raw PutItem+UpdateItem", fn: func(ctx context.Context, i int) error {
			pk := prefix + "raw-" + id(i)
			if err := raw.put(ctx, pk, "n"); err != nil {
				return err
			}
			return raw.complete(ctx, pk)
		}},
		{name: "store Claim+Complete", fn: func(ctx context.Context, i int) error {
			k := "idem:store-" + id(i)
			if _, err := store.Claim(ctx, storekit.ClaimRequest{Key: k, Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second}); err != nil {
				return err
			}
			return store.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("42"), TTL: time.Hour})
		}},
		{name: "guard Do (fresh)", fn: func(ctx context.Context, i int) error {
			_, err := g.Do(ctx, "guard-"+id(i), fn)
			return err
		}},
	}
	replay = []*variant{
		{name: "raw refused PutItem", fn: func(ctx context.Context, i int) error {
			return refused(raw.put(ctx, prefix+"raw-"+rk(i), "m"))
		}},
		{name: "store Claim (existing)", fn: func(ctx context.Context, i int) error {
			res, err := store.Claim(ctx, storekit.ClaimRequest{Key: "idem:store-" + rk(i), Nonce: "m", LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second})
			if err == nil && res.Outcome != storekit.Existing {
				return fmt.Errorf("outcome %v", res.Outcome)
			}
			return err
		}},
		{name: "guard Do (replay)", fn: func(ctx context.Context, i int) error {
			v, err := g.Do(ctx, "guard-"+rk(i), fn)
			if err == nil && v != 42 {
				return fmt.Errorf("replayed %d", v)
			}
			return err
		}},
	}

	return prep, fresh, replay
}

// newClient is a DynamoDB client for endpoint (DynamoDB Local, with static
// dummy credentials) or, without one, for AWS in region, its requests
// counted by m and its connection pool sized for c callers.
func newClient(ctx context.Context, endpoint, region string, c int, m *meter) (*dynamodb.Client, error) {
	if endpoint != "" {
		return dynamodb.New(dynamodb.Options{
			Region: region, BaseEndpoint: aws.String(endpoint),
			Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		}, m.option, pool(c)), nil
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, err
	}
	return dynamodb.NewFromConfig(cfg, m.option, pool(c)), nil
}

// measurement is one run's settings: n calls over c goroutines per round,
// the server process to read CPU time from, and the offset that makes the
// keys of fresh calls new in every round.
type measurement struct {
	m            *meter
	n, c, rounds int
	serverPID    int
	offset       *int
}

// measure runs set's variants for the rounds, rotating their order, then
// a few calls each with ConsumedCapacity captured.
func (mc measurement) measure(ctx context.Context, set []*variant) error {
	m, n, c := mc.m, mc.n, mc.c
	// One unmeasured round warms the connections, the server and the JIT.
	for _, v := range set {
		*mc.offset += n
		if err := burst(ctx, v, min(n, 200), c); err != nil {
			return err
		}
	}
	for r := range mc.rounds {
		for j := range set {
			v := set[(j+r)%len(set)]
			*mc.offset += n
			before := m.requests.Load()
			cl0, sv0 := selfCPU(), procCPU(mc.serverPID)
			start := time.Now()
			if err := burst(ctx, v, n, c); err != nil {
				return err
			}
			v.d += time.Since(start)
			v.clientCPU += selfCPU() - cl0
			v.serverCPU += procCPU(mc.serverPID) - sv0
			v.reqs += m.requests.Load() - before
		}
	}
	// Capacity pass.
	m.capture.Store(true)
	defer m.capture.Store(false)
	for _, v := range set {
		*mc.offset += n
		m.take()
		const calls = 20
		for i := range calls {
			if err := v.fn(ctx, i); err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
		}
		w, rd, un, est := m.take()
		v.calls, v.wcu, v.rcu, v.unreported, v.refusedWCU = calls, w, rd, un, est
	}
	return nil
}

// print writes the table of the fresh and replay variants.
func (mc measurement) print(fresh, replay []*variant) {
	calls := float64(mc.n * mc.rounds)
	for si, set := range [][]*variant{fresh, replay} {
		if si == 0 {
			fmt.Printf("%-28s %8s %9s %8s %6s %11s %11s %8s %8s %s\n", "fresh", "calls/s", "latency", "req/call", "x raw",
				"client-CPU", "server-CPU", "WCU/call", "RCU/call", "refused/call (est. WCU)")
		} else {
			fmt.Printf("%-28s\n", "replay")
		}
		base := calls / set[0].d.Seconds()
		for _, v := range set {
			tput := calls / v.d.Seconds()
			lat := time.Duration(float64(v.d) * float64(mc.c) / calls)
			server := "-"
			if mc.serverPID != 0 {
				server = perCall(v.serverCPU, calls)
			}
			fmt.Printf("%-28s %8.0f %9v %8.2f %6.3f %11s %11s %8.2f %8.2f %.2f (%.2f)\n", v.name, tput, lat.Round(10*time.Microsecond),
				float64(v.reqs)/calls, tput/base, perCall(v.clientCPU, calls), server,
				v.wcu/float64(v.calls), v.rcu/float64(v.calls), float64(v.unreported)/float64(v.calls),
				v.refusedWCU/float64(v.calls))
		}
		fmt.Println()
	}
	fmt.Println("CPU columns: CPU time per call of this process and of the server process (-server-pid).")
	fmt.Println("x raw: throughput over the first row's (>= 1 is as fast as raw). WCU/RCU: ConsumedCapacity (TOTAL) per call.")
	fmt.Println("Refused: requests refused by their condition, for which DynamoDB returns no ConsumedCapacity; it charges")
	fmt.Println("them 1 WCU per KB of the larger of the old and new item (the estimate in parentheses).")
}

// burst runs n calls of v over c goroutines.
func burst(ctx context.Context, v *variant, n, c int) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(c, n) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := v.fn(ctx, int(i)); err != nil {
					once.Do(func() { first = fmt.Errorf("%s: %w", v.name, err) })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

func perCall(d time.Duration, calls float64) string {
	return fmt.Sprintf("%.0fus", float64(d.Microseconds())/calls)
}

// selfCPU is the CPU time (user + system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the CPU time (user + system) process pid has used, read from
// /proc (Linux; 0 elsewhere or for pid 0).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name (which is in parentheses and may
	// hold spaces): state is field 3, utime 14, stime 15, in clock ticks.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / clockTicks)
}

// clockTicks is USER_HZ, 100 on every Linux platform Go supports.
const clockTicks = 100

// pool gives the HTTP client enough idle connections for c callers, so the
// benchmark does not measure connection setup.
func pool(c int) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.HTTPClient = awshttpClient(c)
	}
}

func awshttpClient(c int) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = 2 * c
		t.MaxIdleConnsPerHost = 2 * c
	})
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

type rawClient struct {
	client *dynamodb.Client
	table  string
}

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// put is the claim a hand-written client would send: a conditional PutItem
// of an in-progress record.
func (r rawClient) put(ctx context.Context, pk, nonce string) error {
	now := time.Now().UnixMilli()
	_, err := r.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(r.table),
		Item: map[string]types.AttributeValue{
			"pk": str(pk), "sk": str("IDEM"), "record_version": num(1), "status": str("in_progress"),
			"nonce": str(nonce), "payload_hash": str(""), "attempt": num(1), "started_at": num(now),
			"heartbeat_at": num(now), "expires_at": num(now + 60_000), "ttl": num(now/1000 + 3660),
		},
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return err
}

// complete is the nonce-conditioned UpdateItem that records the outcome.
func (r rawClient) complete(ctx context.Context, pk string) error {
	now := time.Now().UnixMilli()
	_, err := r.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(r.table),
		Key:                      map[string]types.AttributeValue{"pk": str(pk), "sk": str("IDEM")},
		UpdateExpression:         aws.String("SET #st = :st, #res = :res, completed_at = :now, expires_at = :exp, #ttl = :ttl"),
		ConditionExpression:      aws.String("nonce = :n"),
		ExpressionAttributeNames: map[string]string{"#st": "status", "#res": "result", "#ttl": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":st": str("completed"), ":res": &types.AttributeValueMemberB{Value: []byte("42")},
			":now": num(now), ":exp": num(now + 3_600_000), ":ttl": num(now/1000 + 7200), ":n": str("n"),
		},
	})
	return err
}
