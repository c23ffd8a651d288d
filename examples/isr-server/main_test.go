package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testenv"
)

var addrRE = regexp.MustCompile(`listening on (http://\S+)`)

// start runs the server in-process with args and returns its base URL and a
// function that stops it and returns run's error.
func start(t *testing.T, args []string, env map[string]string) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, args, pw, func(k string) string { return env[k] })
		_ = pw.Close()
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		m := addrRE.FindStringSubmatch(line)
		if m == nil {
			cancel()
			t.Fatalf("unexpected first line %q", line)
		}
		t.Log(line)
		return m[1], func() error { cancel(); return <-errc }
	case err := <-errc:
		cancel()
		t.Fatalf("run: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("no address printed")
	}
	return "", nil
}

func fetch(t *testing.T, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// smoke checks miss, hit, 304, stale + background regeneration and 404.
func smoke(t *testing.T, base string) {
	t.Helper()
	// -revalidate 1s: a page's generated_at is whole seconds (the table's
	// schema), so a page rendered late in a second is stale at the next
	// one, which may come before it is served. The first check allows
	// that only when the clock says so: a second boundary passed after the
	// request was sent, so after no earlier than the page was generated.
	sent := time.Now()
	res, page := fetch(t, base+"/hello")
	status := res.Header.Get("X-Isr-Cache")
	if res.StatusCode != 200 || !strings.Contains(page, "<h1>/hello</h1>") ||
		!(status == "MISS" || status == "STALE" && time.Now().Unix() > sent.Unix()) {
		t.Fatalf("first request: %d %v %q", res.StatusCode, res.Header, page)
	}
	etag := res.Header.Get("ETag")
	if etag == "" || !strings.Contains(res.Header.Get("Cache-Control"), "s-maxage=") || !strings.Contains(res.Header.Get("Cache-Control"), "stale-while-revalidate=") {
		t.Fatalf("headers: %v", res.Header)
	}
	res, again := fetch(t, base+"/hello")
	switch status := res.Header.Get("X-Isr-Cache"); {
	case res.StatusCode != 200:
		t.Fatalf("second request: %d %v", res.StatusCode, res.Header)
	case status == "HIT" && again != page:
		t.Fatalf("second request: a HIT of another page: %q, want %q", again, page)
	case status != "HIT" && status != "STALE":
		t.Fatalf("second request: %d %v, want the cached page (a HIT, or STALE once it aged past 1s)", res.StatusCode, res.Header)
	}
	if res, _ := fetch(t, base+"/hello", "If-None-Match", etag); res.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", res.StatusCode)
	}
	if res, _ := fetch(t, base+"/favicon.ico"); res.StatusCode != http.StatusNotFound {
		t.Fatalf("favicon: %d", res.StatusCode)
	}
	// -revalidate 1s: after two seconds the page (or a regeneration the
	// requests above triggered once a second boundary passed) is stale,
	// served as is, and regenerated in the background.
	time.Sleep(2100 * time.Millisecond)
	res, stale := fetch(t, base+"/hello")
	if res.StatusCode != 200 || res.Header.Get("X-Isr-Cache") != "STALE" || !strings.Contains(stale, "<h1>/hello</h1>") {
		t.Fatalf("stale request: %d %v", res.StatusCode, res.Header)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, fresh := fetch(t, base+"/hello")
		if res.Header.Get("X-Isr-Cache") == "HIT" && fresh != stale {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("page not regenerated: %v", res.Header)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var fastArgs = []string{"-addr", "127.0.0.1:0", "-revalidate", "1s", "-render-delay", "10ms"}

func TestSmokeDefault(t *testing.T) {
	base, stop := start(t, fastArgs, nil)
	smoke(t, base)
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestSmokeDynamoDBAndS3(t *testing.T) {
	ddb := testenv.DynamoDBEndpoint(t)
	s3 := testenv.S3Endpoint(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "S3RVER")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "S3RVER")
	t.Setenv("AWS_REGION", "us-east-1")
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "isr-server-" + hex.EncodeToString(b[:])
	env := map[string]string{"FACETHEORY_CACHE_TABLE_NAME": name, "ISR_S3_BUCKET": name, "ISR_S3_ENDPOINT": s3}
	args := append([]string{"-create-table", "-create-bucket", "-dynamodb-endpoint", ddb}, fastArgs...)
	base, stop := start(t, args, env)
	smoke(t, base)
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// redisPrefix returns a fresh key prefix on the test Redis and deletes its
// keys when the test ends.
func redisPrefix(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "isr-server-" + hex.EncodeToString(b[:]) + ":"
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() {
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 20000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return prefix
}

func TestSmokeRedis(t *testing.T) {
	args := append([]string{"-redis", testenv.RedisAddr(t), "-redis-prefix", redisPrefix(t)}, fastArgs...)
	base, stop := start(t, args, nil)
	smoke(t, base)
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestSmokeDir(t *testing.T) {
	args := append([]string{"-dir", t.TempDir()}, fastArgs...)
	base, stop := start(t, args, nil)
	smoke(t, base)
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// TestSharedTable: two servers on one table (Redis, or one directory) and
// one body store serve one cache: a page the first rendered is a hit at
// the second, byte for byte.
func TestSharedTable(t *testing.T) {
	cases := map[string]func(t *testing.T) []string{
		"dir": func(t *testing.T) []string { return []string{"-dir", t.TempDir()} },
		"redis": func(t *testing.T) []string {
			return []string{"-redis", testenv.RedisAddr(t), "-redis-prefix", redisPrefix(t), "-body-dir", t.TempDir()}
		},
	}
	for name, flags := range cases {
		t.Run(name, func(t *testing.T) {
			args := append(flags(t), "-addr", "127.0.0.1:0", "-revalidate", "1h", "-render-delay", "1ms")
			baseA, stopA := start(t, args, nil)
			baseB, stopB := start(t, args, nil)
			res, page := fetch(t, baseA+"/shared")
			if res.StatusCode != 200 || res.Header.Get("X-Isr-Cache") != "MISS" {
				t.Fatalf("first server: %d %v", res.StatusCode, res.Header)
			}
			res, again := fetch(t, baseB+"/shared")
			if res.StatusCode != 200 || res.Header.Get("X-Isr-Cache") != "HIT" || again != page {
				t.Fatalf("second server: %d %v %q, want a HIT of %q", res.StatusCode, res.Header, again, page)
			}
			for _, stop := range []func() error{stopA, stopB} {
				if err := stop(); err != nil {
					t.Fatalf("shutdown: %v", err)
				}
			}
		})
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-redis", "127.0.0.1:1", "-dir", "x"},
		{"-table", "t", "-dir", "x"},
		{"-table", "t", "-redis", "127.0.0.1:1"},
		{"-bucket", "b", "-body-dir", "x"},
		{"-redis", "127.0.0.1:1", "-redis-prefix", "a{b}"},
		{"-render-delay", "-1s"},
		{"-create-bucket"},
		{"-create-table"},
		{"extra"},
		{"-revalidate", "0s", "-addr", "127.0.0.1:0"},
		{"-no-such-flag"},
	} {
		err := run(context.Background(), args, io.Discard, func(string) string { return "" })
		if err == nil {
			t.Fatalf("run %q succeeded", args)
		}
	}
}

// TestBinary builds the program and runs it as a process: it prints its
// address, serves, and exits 0 on SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program")
	}
	bin := filepath.Join(t.TempDir(), "isr-server")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-render-delay", "1ms")
	cmd.Env = append(os.Environ(), "FACETHEORY_CACHE_TABLE_NAME=", "ISR_S3_BUCKET=")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	m := addrRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first line %q", line)
	}
	if res, page := fetch(t, m[1]+"/x"); res.StatusCode != 200 || !strings.Contains(page, "<h1>/x</h1>") {
		t.Fatalf("%d %q", res.StatusCode, page)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
}
