package dynamostore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/memstore"
)

// rowsTable creates a fresh table for the rows fn writes (pk, sk).
func rowsTable(t testing.TB, c *dynamodb.Client) string {
	t.Helper()
	name := "idem_dotx_rows_" + randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamostore.CreateTable(ctx, c, name); err != nil {
		t.Fatalf("create rows table: %v", err)
	}
	t.Cleanup(func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return name
}

// putRow is fn's write: a row for key with a sort key unique to this run
// of fn, so every committed run leaves one row.
func putRow(tx *dynamostore.Tx, table, key, by string) error {
	return tx.Put(types.Put{
		TableName: aws.String(table),
		Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "row#" + key},
			"sk": &types.AttributeValueMemberS{Value: by + "#" + randHex(8)},
		},
	})
}

// rows returns the sort keys of key's rows (a consistent read).
func rows(t testing.TB, c *dynamodb.Client, table, key string) []string {
	t.Helper()
	out, err := c.Query(context.Background(), &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "row#" + key}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	var sks []string
	for _, it := range out.Items {
		sks = append(sks, it["sk"].(*types.AttributeValueMemberS).Value)
	}
	return sks
}

func countOps(ops []string, name string) int {
	n := 0
	for _, op := range ops {
		if op == name {
			n++
		}
	}
	return n
}

func TestDoTxCommitsWritesWithTheOutcome(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store)
	ctx := context.Background()
	var runs atomic.Int32
	fn := func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		runs.Add(1)
		if err := putRow(tx, table, "k1", "a"); err != nil {
			return "", err
		}
		if len(rows(t, e.client, table, "k1")) != 0 {
			t.Error("fn's write is visible before the commit")
		}
		return "done", nil
	}
	e.log.Take()
	v, err := dynamostore.DoTx(ctx, g, "k1", fn)
	if err != nil || v != "done" {
		t.Fatalf("DoTx = %q, %v", v, err)
	}
	ops := e.log.Take()
	if countOps(ops, "TransactWriteItems") != 1 || countOps(ops, "UpdateItem") != 0 {
		t.Fatalf("requests %v: want the claim and one TransactWriteItems, no separate completion", ops)
	}
	v, err = dynamostore.DoTx(ctx, g, "k1", fn)
	if err != nil || v != "done" || runs.Load() != 1 {
		t.Fatalf("replay = %q, %v, runs %d", v, err, runs.Load())
	}
	if got := rows(t, e.client, table, "k1"); len(got) != 1 {
		t.Fatalf("rows = %v, want 1", got)
	}
	// Plain Do replays the outcome DoTx recorded.
	if v, err := g.Do(ctx, "k1", func(context.Context) (string, error) { return "again", nil }); err != nil || v != "done" {
		t.Fatalf("Do after DoTx = %q, %v", v, err)
	}
}

func TestDoTxBadInput(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store)
	ctx := context.Background()

	checkTxTooLarge(t, e, g, table)
	checkInvalidTxItems(t, g, table)
	// Not a DynamoDB store; nil fn.
	if _, err := dynamostore.DoTx(ctx, newGuard[string](t, memStore(t)), "k", func(context.Context, *dynamostore.Tx) (string, error) { return "", nil }); !errors.Is(err, storekit.ErrInvalidOption) {
		t.Errorf("DoTx on a memstore Guard = %v", err)
	}
	if _, err := dynamostore.DoTx[string](ctx, g, "k", nil); !errors.Is(err, storekit.ErrInvalidOption) {
		t.Errorf("DoTx with nil fn = %v", err)
	}
}

// checkTxTooLarge checks a transaction of more than MaxTxItems items is
// refused before anything is sent, and the call can then run with
// MaxTxItems.
func checkTxTooLarge(t *testing.T, e *env, g *idem.Guard[string], table string) {
	t.Helper()
	ctx := context.Background()
	e.log.Take()
	var tooMany error
	_, err := dynamostore.DoTx(ctx, g, "many", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		for i := range 100 {
			if err := putRow(tx, table, "many", strconv.Itoa(i)); err != nil {
				tooMany = err
				if i != dynamostore.MaxTxItems {
					t.Errorf("item %d refused: %v", i, err)
				}
			}
		}
		return "x", nil // ignores the refusal: DoTx still fails
	})
	if !errors.Is(err, dynamostore.ErrTxTooLarge) || !errors.Is(tooMany, dynamostore.ErrTxTooLarge) {
		t.Fatalf("DoTx with 100 items = %v (item error %v), want ErrTxTooLarge", err, tooMany)
	}
	var ie *dynamostore.TxItemError
	if !errors.As(err, &ie) || ie.Index != 99 {
		t.Fatalf("error %v, want a *TxItemError for item 99", err)
	}
	if ops := e.log.Take(); countOps(ops, "TransactWriteItems") != 0 {
		t.Fatalf("requests %v: a transaction was sent", ops)
	}
	if got := rows(t, e.client, table, "many"); len(got) != 0 {
		t.Fatalf("rows = %v", got)
	}
	// The claim was released (OnFailure Unlock): 99 items commit.
	v, err := dynamostore.DoTx(ctx, g, "many", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		for i := range dynamostore.MaxTxItems {
			if err := putRow(tx, table, "many", strconv.Itoa(i)); err != nil {
				return "", err
			}
		}
		return "ok", nil
	})
	if err != nil || v != "ok" {
		t.Fatalf("DoTx with 99 items = %q, %v", v, err)
	}
	if got := rows(t, e.client, table, "many"); len(got) != 99 {
		t.Fatalf("rows = %d, want 99", len(got))
	}
}

// checkInvalidTxItems checks items DoTx cannot send, and a Tx used on nil
// or past its fn, are ErrInvalidTxItem.
func checkInvalidTxItems(t *testing.T, g *idem.Guard[string], table string) {
	t.Helper()
	ctx := context.Background()
	for name, add := range map[string]func(tx *dynamostore.Tx) error{
		"no table": func(tx *dynamostore.Tx) error {
			return tx.Put(types.Put{Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}})
		},
		"no key": func(tx *dynamostore.Tx) error { return tx.Delete(types.Delete{TableName: aws.String(table)}) },
	} {
		_, err := dynamostore.DoTx(ctx, g, "bad-"+name, func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
			return "", add(tx)
		})
		if !errors.Is(err, dynamostore.ErrInvalidTxItem) {
			t.Errorf("%s: DoTx = %v, want ErrInvalidTxItem", name, err)
		}
	}
	var nilTx *dynamostore.Tx
	if err := nilTx.Put(types.Put{}); !errors.Is(err, dynamostore.ErrInvalidTxItem) {
		t.Errorf("nil Tx Put = %v", err)
	}
	// A Tx kept past fn.
	var kept *dynamostore.Tx
	if _, err := dynamostore.DoTx(ctx, g, "kept", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		kept = tx
		return "", nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := putRow(kept, table, "kept", "late"); !errors.Is(err, dynamostore.ErrInvalidTxItem) {
		t.Errorf("Put after fn returned = %v", err)
	}
}

func TestDoTxOwnConditionFails(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store)
	ctx := context.Background()
	check := func(tx *dynamostore.Tx) error {
		// Requires a row "gate" that does not exist yet.
		return tx.ConditionCheck(types.ConditionCheck{
			TableName: aws.String(table),
			Key: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "gate"}, "sk": &types.AttributeValueMemberS{Value: "gate"},
			},
			ConditionExpression: aws.String("attribute_exists(pk)"),
		})
	}
	fn := func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		if err := putRow(tx, table, "c", "a"); err != nil {
			return "", err
		}
		return "ok", check(tx)
	}
	_, err := dynamostore.DoTx(ctx, g, "c", fn)
	var ce *dynamostore.TxCanceledError
	if !errors.As(err, &ce) || ce.Index != 1 || ce.Kind != "ConditionCheck" || ce.Table != table || ce.Code != "ConditionalCheckFailed" {
		t.Fatalf("DoTx = %v (%+v), want a *TxCanceledError naming item 1", err, ce)
	}
	if errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("DoTx = %v: fn's condition is not a lost claim", err)
	}
	if got := rows(t, e.client, table, "c"); len(got) != 0 {
		t.Fatalf("rows = %v", got)
	}
	// Released: once the gate exists, a retry runs fn and commits.
	if _, err := e.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "gate"}, "sk": &types.AttributeValueMemberS{Value: "gate"},
	}}); err != nil {
		t.Fatal(err)
	}
	if v, err := dynamostore.DoTx(ctx, g, "c", fn); err != nil || v != "ok" {
		t.Fatalf("retry = %q, %v", v, err)
	}
	if got := rows(t, e.client, table, "c"); len(got) != 1 {
		t.Fatalf("rows = %v", got)
	}
}

// TestDoTxStolenClaim: the claim is taken over while fn runs; fn's
// transaction is refused with ErrLostOwnership and nothing of it is
// written; the new owner's commits.
func TestDoTxStolenClaim(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	ctx := context.Background()
	clock := newFakeClock()
	slow := newGuard[string](t, mustNew(t, e.client, testTable, dynamostore.WithKeyPrefix(e.prefix), dynamostore.WithClock(clock.Now)),
		idem.WithHeartbeat(time.Hour), idem.WithTakeoverAfter(2*time.Hour))
	thief := newGuard[string](t, mustNew(t, e.client, testTable, dynamostore.WithKeyPrefix(e.prefix),
		dynamostore.WithClock(func() time.Time { return clock.Now().Add(3 * time.Hour) })))
	// The thief takes the claim over while the owner's fn runs, and
	// commits only after the owner tried to: the owner's transaction meets
	// a live claim of another nonce.
	claimed, ownerDone := make(chan struct{}), make(chan struct{})
	thiefDone := make(chan error, 1)
	_, err := dynamostore.DoTx(ctx, slow, "s", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		if err := putRow(tx, table, "s", "slow"); err != nil {
			return "", err
		}
		go func() {
			v, err := dynamostore.DoTx(context.Background(), thief, "s", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
				close(claimed)
				<-ownerDone
				return "thief", putRow(tx, table, "s", "thief")
			})
			if err == nil && v != "thief" {
				err = fmt.Errorf("takeover returned %q", v)
			}
			thiefDone <- err
		}()
		<-claimed
		return "slow", nil
	})
	before := rows(t, e.client, table, "s")
	close(ownerDone)
	if !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("stale owner's DoTx = %v, want ErrLostOwnership", err)
	}
	if len(before) != 0 {
		t.Fatalf("rows after the refused commit = %v", before)
	}
	if err := <-thiefDone; err != nil {
		t.Fatalf("takeover: %v", err)
	}
	got := rows(t, e.client, table, "s")
	if len(got) != 1 || !strings.HasPrefix(got[0], "thief#") {
		t.Fatalf("rows = %v, want the thief's only", got)
	}
}

// The child processes of the multi-process tests.
const (
	envChild    = "IDEM_DOTX_CHILD"
	envEndpoint = "IDEM_DOTX_ENDPOINT"
	envPrefix   = "IDEM_DOTX_PREFIX"
	envRows     = "IDEM_DOTX_ROWS"
	envKey      = "IDEM_DOTX_KEY"
)

// txGuardOptions are the Guard options of every process of a
// multi-process test: a short takeover so a killed owner is taken over
// within seconds.
func txGuardOptions() []idem.Option {
	return []idem.Option{idem.OnDuplicate(idem.Wait), idem.WithHeartbeat(300 * time.Millisecond), idem.WithTakeoverAfter(2 * time.Second)}
}

// TestDoTxHelperProcess is a child process: "crash" claims the key, adds
// its row and blocks before the transaction is sent (the parent kills
// it); "race" runs 16 goroutines of DoTx on the key and prints each
// result.
func TestDoTxHelperProcess(t *testing.T) {
	mode := os.Getenv(envChild)
	if mode == "" {
		t.Skip("child process only")
	}
	client := newClient(clientConfig{endpoint: os.Getenv(envEndpoint)})
	s := mustNew(t, client, testTable, dynamostore.WithKeyPrefix(os.Getenv(envPrefix)))
	g := newGuard[string](t, s, txGuardOptions()...)
	table, key := os.Getenv(envRows), os.Getenv(envKey)
	ctx := context.Background()
	switch mode {
	case "crash":
		_, _ = dynamostore.DoTx(ctx, g, key, func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
			if err := putRow(tx, table, key, "crashed"); err != nil {
				return "", err
			}
			fmt.Println("READY")
			select {} // killed here, before the transaction is sent
		})
	case "race":
		pid := strconv.Itoa(os.Getpid())
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := dynamostore.DoTx(ctx, g, key, func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
					return pid, putRow(tx, table, key, pid)
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					fmt.Println("ERR", err)
					return
				}
				fmt.Println("OK", v)
			}()
		}
		wg.Wait()
	}
}

func child(t *testing.T, mode string, e *env, table, key string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDoTxHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envEndpoint+"="+e.endpoint, envPrefix+"="+e.prefix, envRows+"="+table, envKey+"="+key)
	cmd.Stderr = os.Stderr
	return cmd
}

// TestDoTxOwnerKilledBeforeCommit: the owner process is SIGKILLed after
// fn added its row and before the transaction was sent; the claim is taken
// over and fn runs again: exactly one row per key.
func TestDoTxOwnerKilledBeforeCommit(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store, txGuardOptions()...)
	for i := range 3 {
		key := "kill-" + strconv.Itoa(i)
		cmd := child(t, "crash", e, table, key)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "READY" {
			_ = cmd.Process.Kill()
			t.Fatalf("child: %q, %v", line, err)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		v, err := dynamostore.DoTx(ctx, g, key, func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
			if tok, _ := idem.FencingToken(ctx); tok != 2 {
				t.Errorf("fencing token %d, want 2 (a takeover)", tok)
			}
			return "taken over", putRow(tx, table, key, "survivor")
		})
		cancel()
		if err != nil || v != "taken over" {
			t.Fatalf("takeover = %q, %v", v, err)
		}
		got := rows(t, e.client, table, key)
		if len(got) != 1 || !strings.HasPrefix(got[0], "survivor#") {
			t.Fatalf("rows of %s = %v, want the survivor's only", key, got)
		}
	}
}

// TestDoTxProcessesOneKey: 4 processes x 16 goroutines call DoTx on one
// key: one row, and every caller gets the one result.
func TestDoTxProcessesOneKey(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	key := "race-" + randHex(4)
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for range 4 {
		cmd := child(t, "race", e, table, key)
		var b strings.Builder
		cmd.Stdout = &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &b)
	}
	results := map[string]int{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
		for _, line := range strings.Split(strings.TrimSpace(outs[i].String()), "\n") {
			if !strings.HasPrefix(line, "OK ") {
				if strings.HasPrefix(line, "ERR") {
					t.Errorf("child %d: %s", i, line)
				}
				continue
			}
			results[strings.TrimPrefix(line, "OK ")]++
		}
	}
	got := rows(t, e.client, table, key)
	if len(got) != 1 {
		t.Fatalf("rows = %v, want 1", got)
	}
	if len(results) != 1 {
		t.Fatalf("results %v: want one result for every caller", results)
	}
	for v, n := range results {
		if n != 64 || !strings.HasPrefix(got[0], v+"#") {
			t.Fatalf("results %v, row %v: want 64 callers told the row's writer", results, got)
		}
	}
}

func memStore(t testing.TB) storekit.Store {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// txFaults is a Client whose TransactWriteItems fails once as a lost
// request would (not sent) or as a lost reply would (sent, answer
// dropped); a held one is sent after the fence, as a late delivery.
type txFaults struct {
	dynamostore.Client
	mode string // "request", "reply" or "late"
	mu   sync.Mutex
	late *dynamodb.TransactWriteItemsInput
	used bool
}

var errCut = errors.New("connection cut")

func (c *txFaults) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.mu.Lock()
	first := !c.used
	c.used = true
	c.mu.Unlock()
	if !first {
		return c.Client.TransactWriteItems(ctx, in, opts...)
	}
	switch c.mode {
	case "reply":
		if _, err := c.Client.TransactWriteItems(ctx, in, opts...); err != nil {
			return nil, err
		}
	case "late":
		c.mu.Lock()
		c.late = in
		c.mu.Unlock()
	}
	return nil, errCut
}

// TestDoTxUnknownOutcome: a transaction whose request or reply is lost is
// settled by the fence: a lost reply of an applied transaction is the
// call's success; a lost request releases the claim (a retry runs fn
// again); a request held and delivered after the fence never applies.
// The same WithOneRequest, where the transaction is the claim.
func TestDoTxUnknownOutcome(t *testing.T) {
	for _, name := range []string{"reply", "request", "late", "one-request/reply", "one-request/request", "one-request/late"} {
		mode, one := strings.TrimPrefix(name, "one-request/"), strings.HasPrefix(name, "one-request/")
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			table := rowsTable(t, e.client)
			fc := &txFaults{Client: e.client, mode: mode}
			opts := []dynamostore.Option{dynamostore.WithKeyPrefix(e.prefix)}
			if one { // the fresh key's transaction carries the record's Put: its fence is a Put
				opts = append(opts, dynamostore.WithOneRequest())
			}
			g := newGuard[string](t, mustNew(t, fc, testTable, opts...))
			ctx := context.Background()
			var runs atomic.Int32
			fn := func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
				runs.Add(1)
				return "v", putRow(tx, table, "u", mode)
			}
			v, err := dynamostore.DoTx(ctx, g, "u", fn)
			switch mode {
			case "reply":
				if err != nil || v != "v" {
					t.Fatalf("DoTx with a lost reply = %q, %v; want the committed result", v, err)
				}
			default:
				var se *storekit.StoreError
				if !errors.As(err, &se) || se.Op != "commit" || errors.Is(err, storekit.ErrNotRecorded) || errors.Is(err, storekit.ErrOutcomeUnknown) {
					t.Fatalf("DoTx with a lost request = %q, %v; want a commit StoreError (nothing committed, for certain)", v, err)
				}
			}
			if mode == "late" {
				fc.mu.Lock()
				in := fc.late
				fc.mu.Unlock()
				_, lerr := e.client.TransactWriteItems(ctx, in)
				var tce *types.TransactionCanceledException
				if !errors.As(lerr, &tce) {
					t.Fatalf("the late delivery = %v, want it cancelled by the fence", lerr)
				}
				if got := rows(t, e.client, table, "u"); len(got) != 0 {
					t.Fatalf("rows after the late delivery = %v", got)
				}
			}
			if mode != "reply" {
				// Released: the retry runs fn again and commits.
				if v, err := dynamostore.DoTx(ctx, g, "u", fn); err != nil || v != "v" {
					t.Fatalf("retry = %q, %v", v, err)
				}
			}
			if got := rows(t, e.client, table, "u"); len(got) != 1 {
				t.Fatalf("rows = %v, want 1", got)
			}
			if v, err := dynamostore.DoTx(ctx, g, "u", fn); err != nil || v != "v" {
				t.Fatalf("replay = %q, %v", v, err)
			}
		})
	}
}

// TestDoTxGoroutinesOneKey: 64 goroutines over 8 Guards (so they meet in
// the store, not only in a Guard's flight) call DoTx on one key: one row,
// one run, every caller told its result.
func TestDoTxGoroutinesOneKey(t *testing.T) {
	count := duplicates(t)
	if rows, values, runs := count(); rows != 1 || values != 1 || runs != 1 {
		t.Fatalf("%d rows, %d values, %d runs; want 1, 1 and 1", rows, values, runs)
	}
}

// TestDoTxLockRecordsFnError: under OnFailure(Lock) fn's error is recorded
// (outside the unsent transaction) and replayed; nothing of fn's is
// written.
func TestDoTxLockRecordsFnError(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store, idem.OnFailure(idem.Lock))
	boom := errors.New("card declined")
	fn := func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		if err := putRow(tx, table, "l", "x"); err != nil {
			return "", err
		}
		return "", boom
	}
	if _, err := dynamostore.DoTx(context.Background(), g, "l", fn); !errors.Is(err, boom) {
		t.Fatalf("DoTx = %v, want fn's error", err)
	}
	if _, err := dynamostore.DoTx(context.Background(), g, "l", fn); !errors.Is(err, storekit.ErrPreviousFailure) {
		t.Fatalf("replay = %v, want ErrPreviousFailure", err)
	}
	if got := rows(t, e.client, table, "l"); len(got) != 0 {
		t.Fatalf("rows = %v", got)
	}
}
