package dynamoisr_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/isr/dynamoisr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
	"github.com/idem-go/idem/isr/isrtest"
)

func handlerDynamo(t testing.TB) *dynamodb.Client {
	t.Helper()
	return dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(testenv.DynamoDBEndpoint(t)),
		Credentials:      credentials.NewStaticCredentialsProvider("local", "local", ""),
		RetryMaxAttempts: 3,
	})
}

func handlerTable(t testing.TB, client *dynamodb.Client) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "isr-handler-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamoisr.CreateTable(ctx, client, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return name
}

// TestHandlerDynamoS3: the handler on DynamoDB Local and the S3-compatible
// server: miss, hit, 304, stale, regeneration.
func TestHandlerDynamoS3(t *testing.T) {
	ddb := handlerDynamo(t)
	s3c := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(testenv.S3Endpoint(t)),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("S3RVER", "S3RVER", ""),
	})
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	bucket := "isr-handler-" + hex.EncodeToString(b[:])
	if err := dynamoisr.CreateBucket(ctx, s3c, bucket); err != nil {
		t.Fatal(err)
	}
	clock := isrtest.NewClock(time.Now())
	coord := mustCoordinator(t, mustDynamoTable(t, ddb, handlerTable(t, ddb)), isr.WithClock(clock.Now))
	h := mustHandler(t, coord, mustS3(t, s3c, bucket), renderPage(), isr.WithBodyCache(0))
	r := get(h, "/ds")
	if r.Code != 200 || r.Cache != isr.CacheMiss || r.Body != "v1 /ds" {
		t.Fatalf("miss: %+v", r)
	}
	r = get(h, "/ds")
	if r.Code != 200 || r.Cache != isr.CacheHit || r.Body != "v1 /ds" {
		t.Fatalf("hit: %+v", r)
	}
	if r2 := get(h, "/ds", "If-None-Match", r.Hdr.Get("ETag")); r2.Code != http.StatusNotModified {
		t.Fatalf("304: %+v", r2)
	}
	clock.Advance(2 * time.Minute)
	if r = get(h, "/ds"); r.Code != 200 || r.Cache != isr.CacheStale || r.Body != "v1 /ds" {
		t.Fatalf("stale: %+v", r)
	}
	if err := h.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if r = get(h, "/ds"); r.Code != 200 || r.Cache != isr.CacheHit || r.Body != "v2 /ds" {
		t.Fatalf("regenerated: %+v", r)
	}
}

// --- several processes ------------------------------------------------------

const handlerChildEnv = "ISR_HANDLER_CHILD"

// startHandlerChild starts a re-executed test binary running
// TestHandlerHelperProcess: its own Handler and HTTP server on the shared
// DynamoDB table and body directory. Its RENDERING lines count renders in
// rendering.
func startHandlerChild(t *testing.T, rendering *atomic.Int64, env ...string) *testenv.Child {
	t.Helper()
	return testenv.StartChild(t, testenv.ChildConfig{
		Run: "^TestHandlerHelperProcess$",
		Env: append([]string{handlerChildEnv + "=1"}, env...),
		OnLine: func(line string) bool {
			if line == "RENDERING" {
				rendering.Add(1)
				return true
			}
			return false
		},
	})
}

// handlerChildTimeout bounds each wait for a handler child's answer.
const handlerChildTimeout = 90 * time.Second

func fields(t *testing.T, s string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("bad summary %q", s)
		}
		m[k] = v
	}
	return m
}

// TestHandlerStaleAcrossProcesses: four child processes, each with its own
// Handler and HTTP server on one DynamoDB Local table and one shared file
// body directory, send 250 concurrent requests each (1,000 in all) for one
// stale page. Every request is answered with the stale page while the
// regeneration is still held inside its render (the render is released only
// after every child has reported all its answers), and the total number of
// renders across the processes is exactly 1.
func TestHandlerStaleAcrossProcesses(t *testing.T) {
	const procs, perProc = 4, 250
	ddb := handlerDynamo(t)
	table := handlerTable(t, ddb)
	dir := t.TempDir()
	bodies, err := body.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	tb := mustDynamoTable(t, ddb, table)
	// Seed: render the page an hour ago, so it is stale for everyone now.
	past := func() time.Time { return time.Now().Add(-time.Hour) }
	seed := mustHandler(t, mustCoordinator(t, tb, isr.WithClock(past)), bodies,
		func(context.Context, string, string) ([]byte, string, error) {
			return []byte("old page"), "text/plain", nil
		}, isr.WithRevalidate(time.Minute))
	if r := get(seed, "/shared"); r.Code != 200 || r.Body != "old page" {
		t.Fatalf("seed: %+v", r)
	}
	pk := mustPK(t, "/shared")
	before, err := tb.GetMeta(context.Background(), pk)
	if err != nil || before.Fresh(time.Now()) {
		t.Fatalf("seeded META %+v, %v", before, err)
	}

	var rendering atomic.Int64
	var children []*testenv.Child
	for i := 0; i < procs; i++ {
		c := startHandlerChild(t, &rendering, "ISR_TABLE="+table, "ISR_BODY_DIR="+dir,
			"ISR_CACHE_KEY=/shared", "ISR_REQUESTS="+strconv.Itoa(perProc))
		c.Expect(t, "READY", handlerChildTimeout)
		children = append(children, c)
	}
	for _, c := range children {
		c.Send(t, "GO")
	}
	served := 0
	for i, c := range children {
		s := fields(t, c.Expect(t, "SERVED", handlerChildTimeout))
		t.Logf("process %d: %v", i, s)
		if s["ok"] != strconv.Itoa(perProc) || s["stale"] != strconv.Itoa(perProc) || s["oldbody"] != strconv.Itoa(perProc) {
			t.Fatalf("process %d answered %v, want all %d stale with the old body", i, s, perProc)
		}
		served += perProc
	}
	// All 1,000 answered; the regeneration is still inside its render.
	deadline := time.Now().Add(30 * time.Second)
	for rendering.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if rendering.Load() != 1 {
		t.Fatalf("%d renders running once every request was answered, want 1", rendering.Load())
	}
	for _, c := range children {
		c.Send(t, "RELEASE")
	}
	var renders int64
	for i, c := range children {
		s := fields(t, c.Expect(t, "DONE", handlerChildTimeout))
		n, _ := strconv.ParseInt(s["renders"], 10, 64)
		t.Logf("process %d: %v", i, s)
		renders += n
	}
	if renders != 1 || rendering.Load() != 1 {
		t.Fatalf("%d renders across %d processes (%d started), want exactly 1", renders, procs, rendering.Load())
	}
	after, err := tb.GetMeta(context.Background(), pk)
	if err != nil || !after.Fresh(time.Now()) || after.ETag == before.ETag {
		t.Fatalf("META after regeneration %+v, %v", after, err)
	}
	o, err := bodies.Get(context.Background(), after.S3Key)
	if err != nil || !strings.HasPrefix(string(o.Content), "new page from ") {
		t.Fatalf("published body %v, %v", o, err)
	}
	t.Logf("%d requests in %d processes answered stale without waiting; 1 regeneration", served, procs)
}

// stdinGates returns a channel per name, closed when the process reads
// that name as a line of its standard input.
func stdinGates(names ...string) map[string]chan struct{} {
	gate := make(map[string]chan struct{}, len(names))
	for _, n := range names {
		gate[n] = make(chan struct{})
	}
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if ch, ok := gate[sc.Text()]; ok {
				close(ch)
			}
		}
	}()
	return gate
}

// raiseTo sets m to v if v is larger.
func raiseTo(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// TestHandlerHelperProcess is the body of a child process of
// TestHandlerStaleAcrossProcesses. It skips unless started as one.
func TestHandlerHelperProcess(t *testing.T) {
	if os.Getenv(handlerChildEnv) == "" {
		t.Skip("child process only")
	}
	fail := func(err error) { fmt.Println("ERROR", err); os.Exit(1) }
	ddb := handlerDynamo(t)
	bodies, err := body.NewFile(os.Getenv("ISR_BODY_DIR"))
	if err != nil {
		fail(err)
	}
	n, _ := strconv.Atoi(os.Getenv("ISR_REQUESTS"))
	key := os.Getenv("ISR_CACHE_KEY")

	gate := stdinGates("GO", "RELEASE")
	var out sync.Mutex
	say := func(s string) { out.Lock(); fmt.Println(s); out.Unlock() }
	var renders, attempts atomic.Int64
	render := func(ctx context.Context, _, _ string) ([]byte, string, error) {
		renders.Add(1)
		say("RENDERING")
		select {
		case <-gate["RELEASE"]:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
		return []byte(fmt.Sprintf("new page from %d", os.Getpid())), "text/plain", nil
	}
	coord := mustCoordinator(t, mustDynamoTable(t, ddb, os.Getenv("ISR_TABLE")))
	h := mustHandler(t, coord, bodies, render, isr.WithRevalidate(time.Hour),
		isr.WithRegenerateHook(func(string, isr.Result, error) { attempts.Add(1) }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}, Timeout: time.Minute}

	say("READY")
	<-gate["GO"]
	var ok, stale, oldBody, maxMS atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			res, err := client.Get(srv.URL + key)
			if err != nil {
				say("ERROR " + err.Error())
				return
			}
			b, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			ms := time.Since(start).Milliseconds()
			raiseTo(&maxMS, ms)
			if res.StatusCode == 200 {
				ok.Add(1)
			}
			if res.Header.Get(isr.HeaderCache) == isr.CacheStale {
				stale.Add(1)
			}
			if string(b) == "old page" {
				oldBody.Add(1)
			}
		}()
	}
	wg.Wait()
	say(fmt.Sprintf("SERVED ok=%d stale=%d oldbody=%d maxms=%d", ok.Load(), stale.Load(), oldBody.Load(), maxMS.Load()))
	<-gate["RELEASE"]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Wait(ctx); err != nil {
		fail(err)
	}
	say(fmt.Sprintf("DONE renders=%d attempts=%d", renders.Load(), attempts.Load()))
	os.Exit(0)
}

// --- benchmarks ---------------------------------------------------------

// BenchmarkHandlerFreshHitDynamoFile measures fresh hits with META on
// DynamoDB Local (one GetItem per request) and bodies in a file store.
func BenchmarkHandlerFreshHitDynamoFile(b *testing.B) {
	ddb := handlerDynamo(b)
	bodies, err := body.NewFile(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	coord := mustCoordinator(b, mustDynamoTable(b, ddb, handlerTable(b, ddb)))
	h := mustHandler(b, coord, bodies, renderPage(), isr.WithRevalidate(time.Hour))
	isrtesting.BenchFresh(b, h)
}

// renderPage returns a PageFunc whose nth render of key is "v<n> <key>".
func renderPage() isr.PageFunc {
	var n atomic.Int64
	return func(_ context.Context, _, key string) ([]byte, string, error) {
		return []byte(fmt.Sprintf("v%d %s", n.Add(1), key)), "text/html; charset=utf-8", nil
	}
}
