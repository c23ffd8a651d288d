package dynamostore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
)

// TestStepTx: a StepTx runs fn once and commits its items with the step's
// record in one TransactWriteItems: a second StepTx of the name in the
// same attempt, and a later attempt of the call, replay the value without
// running fn, one row. An error from fn sends nothing and leaves no
// record; a later StepTx runs fn again. One of fn's own conditions failing
// is a *TxCanceledError, and the step is released.
func TestStepTx(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store)
	ctx := context.Background()
	var runs atomic.Int32
	order := func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		runs.Add(1)
		return "ordered", putRow(tx, table, "o", "a")
	}
	again := errors.New("the call fails after its step")
	_, err := g.Do(ctx, "k", func(ctx context.Context) (string, error) {
		for i := range 2 {
			if v, err := dynamostore.StepTx(ctx, "order", order); err != nil || v != "ordered" {
				t.Errorf("StepTx %d = %q, %v", i, v, err)
			}
		}
		return "", again
	})
	if !errors.Is(err, again) {
		t.Fatalf("Do = %v", err)
	}
	v, err := g.Do(ctx, "k", func(ctx context.Context) (string, error) { return dynamostore.StepTx(ctx, "order", order) })
	if err != nil || v != "ordered" || runs.Load() != 1 {
		t.Fatalf("a later attempt = %q, %v, runs %d; want the replay, fn run once", v, err, runs.Load())
	}
	if got := rows(t, e.client, table, "o"); len(got) != 1 {
		t.Fatalf("rows = %v, want 1", got)
	}

	boom := errors.New("boom")
	_, err = g.Do(ctx, "f", func(ctx context.Context) (string, error) {
		return dynamostore.StepTx(ctx, "order", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
			if err := putRow(tx, table, "f", "a"); err != nil {
				return "", err
			}
			return "", boom
		})
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if got := rows(t, e.client, table, "f"); len(got) != 0 {
		t.Fatalf("rows after fn's error = %v", got)
	}
	gate := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "gate"}, "sk": &types.AttributeValueMemberS{Value: "gate"}}
	gated := func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
		if key, ok := idem.StepKey(ctx); !ok || len(key) != 64 {
			t.Errorf("StepKey = %q, %v", key, ok)
		}
		if err := putRow(tx, table, "f", "b"); err != nil {
			return "", err
		}
		tok, _ := idem.FencingToken(ctx)
		return strconv.FormatInt(tok, 10), tx.ConditionCheck(types.ConditionCheck{
			TableName: aws.String(table), Key: gate, ConditionExpression: aws.String("attribute_exists(pk)"),
		})
	}
	_, err = g.Do(ctx, "f", func(ctx context.Context) (string, error) { return dynamostore.StepTx(ctx, "order", gated) })
	var ce *dynamostore.TxCanceledError
	if !errors.As(err, &ce) || ce.Index != 1 || ce.Code != "ConditionalCheckFailed" {
		t.Fatalf("Do = %v, want a *TxCanceledError naming item 1", err)
	}
	if _, err := e.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: gate}); err != nil {
		t.Fatal(err)
	}
	v, err = g.Do(ctx, "f", func(ctx context.Context) (string, error) { return dynamostore.StepTx(ctx, "order", gated) })
	if err != nil || v != "3" {
		t.Fatalf("Do = %q, %v; want the step's third claim (the first two released)", v, err)
	}
	if got := rows(t, e.client, table, "f"); len(got) != 1 || !strings.HasPrefix(got[0], "b#") {
		t.Fatalf("rows = %v, want the last run's only", got)
	}
}

// TestStepTxInvalid: outside a guarded fn ErrNoCall; on a call whose store
// is not a dynamostore, or with a nil fn, ErrInvalidOption.
func TestStepTxInvalid(t *testing.T) {
	fn := func(context.Context, *dynamostore.Tx) (int, error) { return 1, nil }
	if _, err := dynamostore.StepTx(context.Background(), "s", fn); !errors.Is(err, idem.ErrNoCall) {
		t.Errorf("StepTx outside a call = %v", err)
	}
	g := newGuard[int](t, memStore(t))
	if _, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return dynamostore.StepTx(ctx, "s", fn) }); !errors.Is(err, storekit.ErrInvalidOption) {
		t.Errorf("StepTx on a memstore call = %v", err)
	}
	if _, err := g.Do(context.Background(), "k2", func(ctx context.Context) (int, error) { return dynamostore.StepTx[int](ctx, "s", nil) }); !errors.Is(err, storekit.ErrInvalidOption) {
		t.Errorf("StepTx with nil fn = %v", err)
	}
}

// TestStepTxStolenClaim: the step's claim is taken over while fn runs (the
// owner's heartbeat is far off): the nonce condition cancels the
// transaction, StepTx answers ErrLostOwnership, nothing of fn's is
// written, and the thief's claim is untouched.
func TestStepTxStolenClaim(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	ctx := context.Background()
	var stepKey atomic.Value
	obs := idem.WithObserver(idem.Observer(func(_ context.Context, ev idem.Event) {
		if ev.Kind == idem.EventStepRun {
			stepKey.Store(ev.StorageKey)
		}
	}))
	g := newGuard[string](t, e.store, obs, idem.WithHeartbeat(time.Hour), idem.WithTakeoverAfter(2*time.Hour))
	thief := mustNew(t, e.client, testTable, dynamostore.WithKeyPrefix(e.prefix),
		dynamostore.WithClock(func() time.Time { return time.Now().Add(3 * time.Hour) }))
	var stolen storekit.ClaimResult
	_, err := g.Do(ctx, "s", func(ctx context.Context) (string, error) {
		return dynamostore.StepTx(ctx, "order", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
			if err := putRow(tx, table, "s", "owner"); err != nil {
				return "", err
			}
			var err error
			stolen, err = thief.Claim(ctx, storekit.ClaimRequest{Key: stepKey.Load().(string), Nonce: randHex(16), PayloadHash: storekit.StepPayload, LeaseTTL: time.Hour, TakeoverAfter: time.Hour})
			if err != nil {
				t.Error(err)
			}
			return "owner", nil
		})
	})
	if stolen.Outcome != storekit.TookOver {
		t.Fatalf("thief's claim: %v", stolen.Outcome)
	}
	if !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("owner's StepTx = %v, want ErrLostOwnership", err)
	}
	if got := rows(t, e.client, table, "s"); len(got) != 0 {
		t.Fatalf("rows = %v, want none", got)
	}
	rec, err := thief.Get(ctx, stolen.Record.Key)
	if err != nil || rec.Status != storekit.StatusInProgress || rec.Nonce != stolen.Record.Nonce {
		t.Fatalf("thief's record = %+v, %v; want its claim untouched", rec, err)
	}
}

// TestStepTxRoundTrips: a StepTx that runs is its claim and one
// TransactWriteItems (no separate completion); replayed, one request.
func TestStepTxRoundTrips(t *testing.T) {
	e := newEnv(t)
	table := rowsTable(t, e.client)
	g := newGuard[string](t, e.store)
	var ran, replayed []string
	_, err := g.Do(context.Background(), "r", func(ctx context.Context) (string, error) {
		// The attempt's steps epoch is read by its first step.
		if _, err := idem.Step(ctx, "first", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		order := func(ctx context.Context, tx *dynamostore.Tx) (string, error) { return "v", putRow(tx, table, "r", "a") }
		e.log.Take()
		if _, err := dynamostore.StepTx(ctx, "order", order); err != nil {
			return "", err
		}
		ran = e.log.Take()
		if _, err := dynamostore.StepTx(ctx, "order", order); err != nil {
			return "", err
		}
		replayed = e.log.Take()
		return "v", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("StepTx that runs: %v; replayed: %v", ran, replayed)
	if len(ran) != 2 || countOps(ran, "TransactWriteItems") != 1 {
		t.Errorf("StepTx that runs sent %v; want the claim and one TransactWriteItems", ran)
	}
	if len(replayed) != 1 {
		t.Errorf("a replayed StepTx sent %v; want one request", replayed)
	}
}

// TestStepTxUnknownOutcome: a StepTx whose transaction's reply is lost is
// settled by DoTx's fence: applied, the step's value (replayed after);
// a lost request, a commit StoreError, nothing written, and a later
// attempt runs fn again; one row either way.
func TestStepTxUnknownOutcome(t *testing.T) {
	for _, mode := range []string{"reply", "request"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			table := rowsTable(t, e.client)
			fc := &txFaults{Client: e.client, mode: mode}
			g := newGuard[string](t, mustNew(t, fc, testTable, dynamostore.WithKeyPrefix(e.prefix)))
			ctx := context.Background()
			var runs atomic.Int32
			call := func() (string, error) {
				return g.Do(ctx, "u", func(ctx context.Context) (string, error) {
					return dynamostore.StepTx(ctx, "order", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
						runs.Add(1)
						return "v", putRow(tx, table, "u", mode)
					})
				})
			}
			v, err := call()
			switch mode {
			case "reply":
				if err != nil || v != "v" {
					t.Fatalf("StepTx with a lost reply = %q, %v; want the committed value", v, err)
				}
			default:
				var se *storekit.StoreError
				if !errors.As(err, &se) || se.Op != "commit" || errors.Is(err, storekit.ErrOutcomeUnknown) {
					t.Fatalf("StepTx with a lost request = %q, %v; want a commit StoreError", v, err)
				}
				if got := rows(t, e.client, table, "u"); len(got) != 0 {
					t.Fatalf("rows = %v", got)
				}
				if v, err := call(); err != nil || v != "v" || runs.Load() != 2 {
					t.Fatalf("later attempt = %q, %v, runs %d; want fn run again", v, err, runs.Load())
				}
			}
			if got := rows(t, e.client, table, "u"); len(got) != 1 {
				t.Fatalf("rows = %v, want 1", got)
			}
		})
	}
}

// The child processes of TestStepTxProcesses.
const (
	envStepTxChild = "IDEM_STEPTX_CHILD"
	stepTxOwnerTO  = time.Second // the owner's takeover threshold
)

// heldTx is a Client whose TransactWriteItems says so and blocks (the
// process is killed there, before the request is sent).
type heldTx struct{ dynamostore.Client }

func (c heldTx) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	fmt.Println("sending")
	select {}
}

// stepTxCheckout is the call of the process tests: a step "charge" (a row
// "charge" written at once stands for the external call), then a StepTx
// "order" whose fn adds the row "order" (its sort key names the process
// and the step's fencing token) and then runs inOrder.
func stepTxCheckout(g *idem.Guard[string], client dynamostore.Client, table string, inOrder, afterOrder func()) (string, error) {
	pid := strconv.Itoa(os.Getpid())
	return g.Do(context.Background(), "checkout", func(ctx context.Context) (string, error) {
		if _, err := idem.Step(ctx, "charge", func(ctx context.Context) (int, error) {
			_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "row#charge"}, "sk": &types.AttributeValueMemberS{Value: pid + "#" + randHex(8)},
			}})
			return 1, err
		}); err != nil {
			return "", err
		}
		v, err := dynamostore.StepTx(ctx, "order", func(ctx context.Context, tx *dynamostore.Tx) (string, error) {
			tok, _ := idem.FencingToken(ctx)
			by := pid + "-" + strconv.FormatInt(tok, 10)
			if err := putRow(tx, table, "order", by); err != nil {
				return "", err
			}
			inOrder()
			return by, nil
		})
		if err != nil {
			return "", err
		}
		afterOrder()
		return v, nil
	})
}

// TestStepTxHelperProcess is the owner of a TestStepTxProcesses case.
func TestStepTxHelperProcess(t *testing.T) {
	mode := os.Getenv(envStepTxChild)
	if mode == "" {
		t.Skip("child process only")
	}
	client := newClient(clientConfig{endpoint: os.Getenv(envEndpoint)})
	var sc dynamostore.Client = client
	if mode == "killed-before-commit" {
		sc = heldTx{client}
	}
	g := newGuard[string](t, mustNew(t, sc, testTable, dynamostore.WithKeyPrefix(os.Getenv(envPrefix))), idem.WithTakeoverAfter(stepTxOwnerTO))
	table := os.Getenv(envRows)
	nothing := func() {}
	var err error
	switch mode {
	case "killed-in-fn", "killed-before-commit":
		_, err = stepTxCheckout(g, client, table, func() {
			if mode == "killed-in-fn" {
				fmt.Println("inserted")
				select {}
			}
		}, nothing)
	case "killed-after-commit":
		_, err = stepTxCheckout(g, client, table, nothing, func() { fmt.Println("committed"); select {} })
	case "stopped-in-fn":
		_, err = stepTxCheckout(g, client, table, func() {
			fmt.Println("inserted")
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		}, nothing)
		if errors.Is(err, storekit.ErrLostOwnership) {
			fmt.Println("result lost")
		} else {
			fmt.Println("result", err)
		}
		return
	}
	fmt.Println("error", err)
	os.Exit(2)
}

// TestStepTxProcesses: the owner of a checkout (Step charge, StepTx order)
// is a child process, SIGKILLed or SIGSTOPped at a point of StepTx; this
// process then takes the call over and runs it to the end. killed-in-fn
// (after fn added its row) and killed-before-commit (as the transaction
// was about to be sent): the takeover runs the order again, one row, the
// takeover's; killed-after-commit: replayed, one row, the owner's;
// stopped-in-fn (until this process finished the call): the resumed
// owner's transaction is refused (ErrLostOwnership), one row, this
// process's. charge is never repeated.
func TestStepTxProcesses(t *testing.T) {
	for _, mode := range []string{"killed-in-fn", "killed-before-commit", "killed-after-commit", "stopped-in-fn"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			table := rowsTable(t, e.client)
			o := startStepTxOwner(t, e, table, mode)
			o.waitFor(map[string]string{"killed-in-fn": "inserted", "killed-before-commit": "sending", "killed-after-commit": "committed", "stopped-in-fn": "inserted"}[mode])
			if mode == "stopped-in-fn" {
				o.signal(syscall.SIGSTOP)
			} else {
				o.signal(syscall.SIGKILL)
				_ = o.cmd.Wait()
			}
			var orderRuns atomic.Int32
			g := newGuard[string](t, e.store, idem.OnDuplicate(idem.Wait), idem.WithTakeoverAfter(20*time.Second))
			v, err := stepTxCheckout(g, e.client, table, func() { orderRuns.Add(1) }, func() {})
			if err != nil {
				t.Fatalf("takeover: %v", err)
			}
			if got := rows(t, e.client, table, "charge"); len(got) != 1 {
				t.Errorf("charge rows = %v, want 1: the takeover replays it", got)
			}
			me, owner := strconv.Itoa(os.Getpid()), strconv.Itoa(o.cmd.Process.Pid)
			check := func(wantBy string, wantRuns int32) {
				t.Helper()
				got := rows(t, e.client, table, "order")
				if len(got) != 1 || !strings.HasPrefix(got[0], wantBy+"#") || orderRuns.Load() != wantRuns {
					t.Errorf("order rows = %v, runs here %d; want one row by %s, %d runs", got, orderRuns.Load(), wantBy, wantRuns)
				}
				if v != wantBy {
					t.Errorf("takeover's result %q, want %q", v, wantBy)
				}
			}
			switch mode {
			case "killed-after-commit":
				check(owner+"-1", 0)
			default:
				check(me+"-2", 1)
			}
			if mode == "stopped-in-fn" {
				o.resumeRefused()
				check(me+"-2", 1)
			}
		})
	}
}

// A stepTxOwner is the child process that owns the checkout, and the lines
// it prints as it goes.
type stepTxOwner struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startStepTxOwner starts the owner of a checkout on e's table and rows
// table, to be stopped or killed as mode says.
func startStepTxOwner(t *testing.T, e *env, table, mode string) *stepTxOwner {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStepTxHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envStepTxChild+"="+mode, envEndpoint+"="+e.endpoint, envPrefix+"="+e.prefix, envRows+"="+table)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	o := &stepTxOwner{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			o.lines <- sc.Text()
		}
		close(o.lines)
	}()
	return o
}

// next is the owner's next line.
func (o *stepTxOwner) next() string {
	select {
	case l, ok := <-o.lines:
		if !ok {
			o.t.Fatal("the owner exited")
		}
		return l
	case <-time.After(time.Minute):
		o.t.Fatal("no word from the owner")
	}
	return ""
}

// waitFor reads the owner's lines up to want, failing on an error.
func (o *stepTxOwner) waitFor(want string) {
	for l := o.next(); l != want; l = o.next() {
		if strings.HasPrefix(l, "error") {
			o.t.Fatalf("owner: %s", l)
		}
	}
}

func (o *stepTxOwner) signal(sig syscall.Signal) {
	if err := o.cmd.Process.Signal(sig); err != nil {
		o.t.Fatal(err)
	}
}

// resumeRefused resumes the stopped owner, lets it send its transaction,
// and checks it is refused (ErrLostOwnership).
func (o *stepTxOwner) resumeRefused() {
	o.signal(syscall.SIGCONT)
	if _, err := io.WriteString(o.stdin, "go\n"); err != nil {
		o.t.Fatal(err)
	}
	res := o.next()
	for !strings.HasPrefix(res, "result") {
		res = o.next()
	}
	if res != "result lost" {
		o.t.Errorf("the resumed owner: %q, want its transaction refused (ErrLostOwnership)", res)
	}
	_ = o.cmd.Wait()
}
