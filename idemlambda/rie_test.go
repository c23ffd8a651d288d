package idemlambda_test

// The tests in this file run the package the way Lambda runs it: a
// function binary (internal/testfn) under the AWS Lambda Runtime Interface
// Emulator, built from its Go module, invoked over the emulator's HTTP API,
// with its records in DynamoDB Local. They need Linux (the emulator runs
// nowhere else), Go and its module proxy or cache (to build the emulator),
// and IDEM_DYNAMODB_ENDPOINT (scripts/backends.sh); what is missing skips
// them, or fails them when IDEM_REQUIRE_BACKENDS=1.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idem-go/idem/idemlambda"
	"github.com/idem-go/idem/internal/dynamotest"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/dynamostore"
)

// rieModule is the emulator's module at the version the tests build.
const rieModule = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

var (
	buildOnce  sync.Once
	buildDir   string
	buildErr   error
	buildNotes string
)

// binaries builds the emulator and the test function once per test binary
// run, into a directory removed when the run ends (TestMain).
func binaries(t *testing.T) (rie, fn string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		testenv.Missing(t, "the Lambda Runtime Interface Emulator runs on Linux only")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "idemlambda-rie-")
		if buildErr != nil {
			return
		}
		// The emulator, from its module (the module cache, or the module
		// proxy on a fresh machine), outside this workspace.
		cmd := exec.Command("go", "install", rieModule)
		cmd.Env = append(os.Environ(), "GOBIN="+buildDir, "GOWORK=off", "GOFLAGS=-mod=mod")
		cmd.Dir = buildDir
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr, buildNotes = fmt.Errorf("go install %s: %v", rieModule, err), string(out)
			return
		}
		cmd = exec.Command("go", "build", "-o", filepath.Join(buildDir, "bootstrap"), "./internal/testfn")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr, buildNotes = fmt.Errorf("go build ./internal/testfn: %v", err), string(out)
		}
	})
	if buildErr != nil {
		t.Log(buildNotes)
		testenv.Missing(t, "building the Runtime Interface Emulator and the test function: "+buildErr.Error())
	}
	return filepath.Join(buildDir, "aws-lambda-rie"), filepath.Join(buildDir, "bootstrap")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// function is a test function's setting: one table, one log.
type function struct {
	t        *testing.T
	endpoint string
	table    string
	log      string
	env      []string
}

// newFunction makes a table in DynamoDB Local and a run log for a function
// of mode (testfn's TESTFN_MODE).
func newFunction(t *testing.T, mode string, env ...string) *function {
	endpoint := testenv.DynamoDBEndpoint(t)
	binaries(t)
	table := fmt.Sprintf("idemlambda_%s_%d", mode, time.Now().UnixNano())
	if err := dynamostore.CreateTable(context.Background(), dynamotest.NewLocalClient(endpoint), table); err != nil {
		t.Fatalf("create table: %v", err)
	}
	f := &function{t: t, endpoint: endpoint, table: table, log: filepath.Join(t.TempDir(), "runs.jsonl")}
	f.env = append([]string{
		"TESTFN_MODE=" + mode, "TESTFN_TABLE=" + table, "TESTFN_LOG=" + f.log,
		"IDEM_DYNAMODB_ENDPOINT=" + endpoint, "AWS_LAMBDA_FUNCTION_NAME=idemlambda-test",
	}, env...)
	return f
}

// instance is one emulator process, one execution environment.
type instance struct {
	url string
}

// start starts an emulator running the function with a timeout of
// timeout seconds.
func (f *function) start(timeout int) *instance {
	t := f.t
	rie, fn := binaries(t)
	// Two ports: the invocation API the test calls, and the Runtime API
	// the function polls (9001 by default, which two emulators cannot share).
	addr, api := freePort(t), freePort(t)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr, "--runtime-api-address", api, fn)
	cmd.Env = append(os.Environ(), f.env...)
	cmd.Env = append(cmd.Env, fmt.Sprintf("AWS_LAMBDA_FUNCTION_TIMEOUT=%d", timeout), "LOG_LEVEL=error")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Dir = t.TempDir()
	// Its own process group, so that the function process it started (which
	// may be sleeping in a timed-out invocation) ends with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the emulator: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the group of the emulator started above
		<-done
		if t.Failed() {
			t.Logf("emulator %s output:\n%s", addr, out.String())
		}
	})
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			t.Fatalf("the emulator exited: %s", out.String())
		default:
		}
		if i > 100 {
			t.Fatalf("the emulator does not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &instance{url: "http://" + addr + "/2015-03-31/functions/function/invocations"}
}

// freePort returns a loopback address nothing listens on now.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// invoke sends one invocation and returns the function's response body
// (nil, the test marked failed, when it cannot be sent or read).
func (in *instance) invoke(t *testing.T, event any) []byte {
	t.Helper()
	b, err := json.Marshal(event)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(in.url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Errorf("invoke: %v", err) // not Fatal: called from goroutines too
		return nil
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("invoke: %v", err)
		return nil
	}
	return out
}

// run is a line of testfn's log.
type run struct {
	Key      string `json:"key"`
	Start    int64  `json:"start"`
	Deadline int64  `json:"deadline"`
	Token    int64  `json:"token"`
	Pid      int    `json:"pid"`
}

// runs returns the function's runs so far.
func (f *function) runs() []run {
	fl, err := os.Open(f.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	defer fl.Close()
	var rs []run
	sc := bufio.NewScanner(fl)
	for sc.Scan() {
		var r run
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			f.t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		rs = append(rs, r)
	}
	return rs
}

func countKey(rs []run, key string) int {
	n := 0
	for _, r := range rs {
		if r.Key == key {
			n++
		}
	}
	return n
}

// lambdaError is the body of an invocation whose function returned an error.
type lambdaError struct {
	Message string `json:"errorMessage"`
	Type    string `json:"errorType"`
}

func asError(b []byte) (lambdaError, bool) {
	var e lambdaError
	return e, json.Unmarshal(b, &e) == nil && e.Message != ""
}

// TestRIEConcurrentOneRun: invocations of one key in six execution
// environments at once (six emulators, one table; an emulator serves one
// invocation at a time, as an execution environment does) run the work
// once, and every one of them gets its result (the function's Guard waits,
// idem.Wait); later ones replay it.
func TestRIEConcurrentOneRun(t *testing.T) {
	f := newFunction(t, "event", "TESTFN_WAIT=1")
	const n = 6
	ins := make([]*instance, n)
	for i := range ins {
		ins[i] = f.start(20)
	}
	order := map[string]any{"order_id": "ord-1", "amount": 100, "sleep_ms": 1500}
	outs := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i] = ins[i].invoke(t, order) })
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		outs = append(outs, ins[i].invoke(t, order)) // replays
	}
	for i, out := range outs {
		if e, ok := asError(out); ok {
			t.Fatalf("invocation %d failed: %s: %s", i, e.Type, e.Message)
		}
		if string(out) != string(outs[0]) {
			t.Fatalf("invocation %d returned %s, invocation 0 %s", i, out, outs[0])
		}
	}
	if c := countKey(f.runs(), "ord-1"); c != 1 {
		t.Fatalf("the work ran %d times for %d invocations, want once", c, len(outs))
	}
	t.Logf("%d invocations in %d environments, the work ran once: %s", len(outs), n, outs[0])

	// The key with another amount (the payload) is refused, not run.
	out := ins[0].invoke(t, map[string]any{"order_id": "ord-1", "amount": 999})
	if e, ok := asError(out); !ok || !strings.Contains(e.Message, "payload") {
		t.Fatalf("another payload under the key: %s, want a payload mismatch error", out)
	}
	if c := countKey(f.runs(), "ord-1"); c != 1 {
		t.Fatalf("the work ran %d times, want once", c)
	}
}

// TestRIETimeoutRetry: an invocation that runs into its timeout inside the
// work leaves a claim that is alive until its deadline (a duplicate then is
// told it is in progress) and dead just after (the deadline plus the
// grace, 250ms): a retry that keeps trying runs the work within the grace,
// the emulator's invocation overhead and one retry interval of the
// deadline, and far sooner than the takeover threshold (30s).
func TestRIETimeoutRetry(t *testing.T) {
	f := newFunction(t, "event")
	first, second := f.start(2), f.start(20)
	order := map[string]any{"order_id": "ord-timeout", "amount": 5, "sleep_ms": 60_000}

	timedOut := make(chan []byte, 1)
	go func() { timedOut <- first.invoke(t, order) }()

	// While the first invocation runs (well before its deadline), a
	// duplicate is refused: a live invocation is never taken over.
	firstRun := f.firstRun()
	out := second.invoke(t, order)
	if e, ok := asError(out); !ok || !strings.Contains(e.Message, "in progress") {
		t.Fatalf("a duplicate while the first invocation runs: %s, want in progress", out)
	}
	if now := time.Now().UnixMilli(); now >= firstRun.Deadline {
		t.Fatalf("the duplicate was answered %dms after the first invocation's deadline: too late to tell", now-firstRun.Deadline)
	}

	out = <-timedOut
	t.Logf("first invocation: %s (deadline %s)", out, time.UnixMilli(firstRun.Deadline).Format("15:04:05.000"))
	if !strings.Contains(string(out), "timed out") {
		t.Fatalf("the first invocation returned %s, want a timeout", out)
	}

	// Retry at once, and every interval while the key is in progress. The
	// retry's work does not sleep (sleep_ms is not part of the payload).
	order["sleep_ms"] = 0
	const interval = 20 * time.Millisecond
	tries, sent, prevTrip := retryUntilRun(t, second, order, firstRun, interval)
	rs := f.runs()
	if len(rs) != 2 {
		t.Fatalf("%d runs, want 2 (the timed-out one and the retry): %+v", len(rs), rs)
	}
	retry := rs[1]
	delay := time.Duration(retry.Start-firstRun.Deadline) * time.Millisecond
	overhead := time.Duration(retry.Start-sent.UnixMilli()) * time.Millisecond // the retry's request to its work's start
	grace := idemlambda.DefaultDeadlineGrace
	// The key turns free at deadline+grace; the try before the successful
	// one was refused, so it was sent before that, and the successful one
	// prevTrip after it (both measured).
	bound := grace + prevTrip + overhead + 50*time.Millisecond // 50ms: clock reads in ms, scheduling
	t.Logf("retry ran %v after the deadline (grace %v, %d tries, from the last refused try to the successful one %v, the successful one's request to work %v; bound %v); its fencing token %d, the first's %d",
		delay, grace, tries, prevTrip, overhead, bound, retry.Token, firstRun.Token)
	if delay > bound {
		t.Fatalf("the retry ran %v after the deadline, want at most %v", delay, bound)
	}
	if delay < grace-50*time.Millisecond {
		t.Fatalf("the retry ran %v after the deadline, before the grace (%v) had passed", delay, grace)
	}
	if retry.Token <= firstRun.Token {
		t.Fatalf("the retry's fencing token %d is not above the first's %d", retry.Token, firstRun.Token)
	}
}

// TestRIESQSBatch: a batch with a duplicate (two messages, one body key)
// and one failing record answers with that record alone in
// batchItemFailures; its redelivery runs nothing that succeeded again.
func TestRIESQSBatch(t *testing.T) {
	f := newFunction(t, "sqs")
	in := f.start(20)
	msg := func(id, body string) events.SQSMessage {
		return events.SQSMessage{MessageId: id, Body: body, EventSource: "aws:sqs", ReceiptHandle: "rh-" + id}
	}
	batch := events.SQSEvent{Records: []events.SQSMessage{
		msg("m1", `{"id":"a"}`),
		msg("m2", `{"id":"b"}`),
		msg("m3", `{"id":"a"}`), // a duplicate of m1: the producer sent it twice
		msg("m4", `{"id":"c","fail":true}`),
		msg("m5", `{"id":"d"}`),
	}}
	for round := 1; round <= 2; round++ { // the second: SQS redelivers the batch
		out := in.invoke(t, batch)
		var resp events.SQSEventResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatalf("round %d: %s: %v", round, out, err)
		}
		if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m4" {
			t.Fatalf("round %d: batchItemFailures %s, want m4 alone", round, out)
		}
		t.Logf("round %d: %s", round, out)
	}
	rs := f.runs()
	for key, want := range map[string]int{"a": 1, "b": 1, "c": 2, "d": 1} {
		if got := countKey(rs, key); got != want {
			t.Errorf("key %s ran %d times, want %d", key, got, want)
		}
	}
}

// TestRIEAPIGatewayReplay: a REST API request's replay is the first
// response byte for byte (plus Idempotent-Replayed), a concurrent one is a
// 409, another body under the key a 422; an HTTP API's binary body and
// cookies replay too.
func TestRIEAPIGatewayReplay(t *testing.T) {
	t.Run("rest", testRIERESTReplay)
	t.Run("http", testRIEHTTPReplay)
}

// testRIERESTReplay: a REST API request while the first runs is 409, the
// replays from both environments are the first response byte for byte, and
// another body under the key is 422; the handler ran once.
func testRIERESTReplay(t *testing.T) {
	f := newFunction(t, "rest")
	a, b := f.start(20), f.start(20)
	req := func(body string) events.APIGatewayProxyRequest {
		return events.APIGatewayProxyRequest{
			HTTPMethod: "POST", Path: "/payments", Resource: "/payments",
			Headers: map[string]string{"Idempotency-Key": "pay-1", "Content-Type": "application/json"},
			Body:    body,
		}
	}
	var first, dup events.APIGatewayProxyResponse
	done := make(chan struct{})
	go func() {
		defer close(done)
		json.Unmarshal(a.invoke(t, req(`{"amount":100,"sleep":true}`)), &first)
	}()
	for len(f.runs()) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	json.Unmarshal(b.invoke(t, req(`{"amount":100,"sleep":true}`)), &dup)
	<-done
	if dup.StatusCode != http.StatusConflict || dup.Headers["Retry-After"] == "" {
		t.Fatalf("a request while the first runs: %+v, want 409 with Retry-After", dup)
	}
	if first.StatusCode != 201 {
		t.Fatalf("first response %+v", first)
	}
	firstJSON, _ := json.Marshal(first)
	for i, in := range []*instance{b, a} {
		var again events.APIGatewayProxyResponse
		raw := in.invoke(t, req(`{"amount":100,"sleep":true}`))
		json.Unmarshal(raw, &again)
		if again.Headers["Idempotent-Replayed"] != "true" {
			t.Fatalf("replay %d: %s, want Idempotent-Replayed", i, raw)
		}
		delete(again.Headers, "Idempotent-Replayed")
		againJSON, _ := json.Marshal(again)
		if !bytes.Equal(againJSON, firstJSON) {
			t.Fatalf("replay %d differs:\n%s\nfirst:\n%s", i, againJSON, firstJSON)
		}
	}
	t.Logf("first response and its replays: %s", firstJSON)
	var other events.APIGatewayProxyResponse
	json.Unmarshal(a.invoke(t, req(`{"amount":999}`)), &other)
	if other.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another body under the key: %+v, want 422", other)
	}
	if c := countKey(f.runs(), "pay-1"); c != 1 {
		t.Fatalf("the handler ran %d times, want once", c)
	}
}

// testRIEHTTPReplay: an HTTP API request with a binary body and a cookie is
// replayed byte for byte; the handler ran once.
func testRIEHTTPReplay(t *testing.T) {
	f := newFunction(t, "http")
	a, b := f.start(20), f.start(20)
	req := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RawPath: "/uploads", Headers: map[string]string{"idempotency-key": "up-1"},
		Body: "aGVsbG8=", IsBase64Encoded: true,
	}
	req.RequestContext.HTTP.Method = "POST"
	first := a.invoke(t, req)
	var resp events.APIGatewayV2HTTPResponse
	json.Unmarshal(first, &resp)
	if resp.StatusCode != 200 || !resp.IsBase64Encoded || resp.Body != "AAEC/w==" || len(resp.Cookies) != 1 {
		t.Fatalf("first response %s", first)
	}
	var again events.APIGatewayV2HTTPResponse
	json.Unmarshal(b.invoke(t, req), &again)
	if again.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("replay %+v, want Idempotent-Replayed", again)
	}
	delete(again.Headers, "Idempotent-Replayed")
	againJSON, _ := json.Marshal(again)
	firstJSON, _ := json.Marshal(resp)
	if !bytes.Equal(againJSON, firstJSON) {
		t.Fatalf("replay differs:\n%s\nfirst:\n%s", againJSON, firstJSON)
	}
	t.Logf("first response and its replay: %s", firstJSON)
	if c := countKey(f.runs(), "up-1"); c != 1 {
		t.Fatalf("the handler ran %d times, want once", c)
	}
}

// firstRun waits for the function's first run to start and returns it.
func (f *function) firstRun() run {
	for {
		if rs := f.runs(); len(rs) > 0 {
			return rs[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// retryUntilRun invokes in with order at once, and every interval while
// the key is in progress, until it runs; it returns the tries, when the
// successful one was sent, and how long before that the try before it was
// sent (its round trip and the pause after it, as measured: a loaded
// machine oversleeps). It fails the test when the retry is refused for 30s
// after first's deadline.
func retryUntilRun(t *testing.T, in *instance, order map[string]any, first run, interval time.Duration) (tries int, sent time.Time, prevTrip time.Duration) {
	t.Helper()
	var prevSent time.Time
	for {
		tries++
		s := time.Now()
		if !prevSent.IsZero() {
			prevTrip = s.Sub(prevSent)
		}
		prevSent = s
		out := in.invoke(t, order)
		e, ok := asError(out)
		if !ok {
			return tries, s, prevTrip
		}
		if !strings.Contains(e.Message, "in progress") {
			t.Fatalf("retry %d: %s", tries, out)
		}
		if time.Since(time.UnixMilli(first.Deadline)) > 30*time.Second {
			t.Fatalf("the retry was refused for 30s after the deadline")
		}
		time.Sleep(interval)
	}
}
