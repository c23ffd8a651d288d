package dynamoisr_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/isr/dynamoisr"
	"github.com/idem-go/idem/isr/isrtest"
)

// The Node side of TestNodeInterop: testdata/interop/interop.js, with the
// AWS SDK for JavaScript at the exact versions its package-lock.json pins,
// installed once with `npm ci` into a cache directory named by the lock
// file's hash (IDEM_NODE_CACHE, or the user cache directory).
const interopDir = "testdata/interop"

// nodeModules installs the Node program's dependencies if they are not
// cached yet and returns their node_modules directory. A missing node or
// npm, or a failed install, skips locally and fails with
// IDEM_REQUIRE_BACKENDS=1.
func nodeModules(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Missing(t, bin+" is not on PATH")
		}
	}
	lock, err := os.ReadFile(filepath.Join(interopDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := os.ReadFile(filepath.Join(interopDir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	root := os.Getenv("IDEM_NODE_CACHE")
	if root == "" {
		if root, err = os.UserCacheDir(); err != nil {
			root = os.TempDir()
		}
		root = filepath.Join(root, "idem-isr-interop")
	}
	sum := sha256.Sum256(append(append([]byte{}, lock...), pkg...))
	dir := filepath.Join(root, hex.EncodeToString(sum[:8]))
	done := filepath.Join(dir, "node_modules", ".package-lock.json")
	if _, err := os.Stat(done); err == nil {
		return filepath.Join(dir, "node_modules")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		testenv.Missing(t, "npm cache directory: "+err.Error())
	}
	// Install into a private directory, then rename it into place, so that
	// concurrent test processes never see a half-installed tree.
	tmp, err := os.MkdirTemp(root, "install-")
	if err != nil {
		testenv.Missing(t, "npm cache directory: "+err.Error())
	}
	defer os.RemoveAll(tmp)
	for name, b := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		testenv.Missing(t, fmt.Sprintf("npm ci failed: %v\n%s", err, out))
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(done); serr != nil {
			t.Fatalf("installing node_modules: %v", err)
		}
		// Another process installed the same lock file first.
	}
	return filepath.Join(dir, "node_modules")
}

// nodeSide is one running `node interop.js serve <table>`: each call sends
// one step and reads its one-line JSON reply.
type nodeSide struct {
	mu    sync.Mutex
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startNode(t *testing.T, modules, endpoint, table string) *nodeSide {
	t.Helper()
	cmd := exec.Command("node", "interop.js", "serve", table)
	cmd.Dir = interopDir
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "IDEM_DYNAMODB_ENDPOINT="+endpoint, "NODE_NO_WARNINGS=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		testenv.Missing(t, "starting node: "+err.Error())
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return &nodeSide{stdin: stdin, out: bufio.NewReader(stdout)}
}

// reply is the Node program's answer to one step.
type reply map[string]any

func (r reply) ok() bool            { b, _ := r["ok"].(bool); return b }
func (r reply) str(k string) string { s, _ := r[k].(string); return s }

// call runs one step and fails the test if the program itself broke (a
// refused condition is an ordinary reply with ok false).
func (n *nodeSide) call(t *testing.T, step string, args map[string]any) reply {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	line, err := json.Marshal(map[string]any{"step": step, "args": args})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.stdin.Write(append(line, '\n')); err != nil {
		t.Fatalf("node %s: %v", step, err)
	}
	out, err := n.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("node %s: reading reply: %v", step, err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var r reply
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("node %s: bad reply %q: %v", step, out, err)
	}
	if !r.ok() && r.str("error") != "ConditionalCheckFailedException" && r.str("error") != "TransactionCanceledException" {
		t.Fatalf("node %s(%v) failed: %v", step, args, r)
	}
	return r
}

// must runs a step that must succeed.
func (n *nodeSide) must(t *testing.T, step string, args map[string]any) reply {
	t.Helper()
	r := n.call(t, step, args)
	if !r.ok() {
		t.Fatalf("node %s(%v) refused: %v", step, args, r)
	}
	return r
}

// attr is one attribute of an item as the JavaScript SDK read it.
type attr struct {
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// typedItem decodes the "item" of a get reply.
func typedItem(t *testing.T, r reply) map[string]attr {
	t.Helper()
	raw, ok := r["item"].(map[string]any)
	if !ok {
		t.Fatalf("no item in %v", r)
	}
	out := make(map[string]attr, len(raw))
	for k, v := range raw {
		m := v.(map[string]any)
		out[k] = attr{Type: m["type"].(string), Value: m["value"]}
	}
	return out
}

// wantAttrs checks an item's attributes, type and text, exactly: no
// attribute missing, none extra.
func wantAttrs(t *testing.T, what string, got map[string]attr, want map[string][2]string) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: attribute %s missing (have %v)", what, k, got)
			continue
		}
		if g.Type != w[0] || fmt.Sprint(g.Value) != w[1] {
			t.Errorf("%s: %s = %s %v, want %s %s", what, k, g.Type, g.Value, w[0], w[1])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected attribute %s = %v", what, k, got[k])
		}
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// interop is what the subtests of TestNodeInterop share: one DynamoDB
// Local table, the Node.js side on it, and one fixed instant.
type interop struct {
	ctx   context.Context
	node  *nodeSide
	tb    *dynamoisr.Table
	t0    time.Time
	now   int64 // t0 in Unix seconds
	clock func() time.Time
}

// TestNodeInterop runs the AWS SDK for JavaScript and isr against the same
// DynamoDB Local table, step by step, in both directions: items the
// TypeScript shapes of the seed documents produce are read and served by
// isr, items isr writes are read attribute by attribute and type by type by
// JavaScript, leases exclude each other across the languages, the REQ#
// flow reacts to the other side's rows and fails closed on a request_hash
// mismatch computed in either language, and fractional numbers written by
// JavaScript read the same in Go.
func TestNodeInterop(t *testing.T) {
	client, _ := dynamoClient(t)
	endpoint := testenv.DynamoDBEndpoint(t)
	modules := nodeModules(t)
	name := freshTable(t, client)
	node := startNode(t, modules, endpoint, name)
	tb := mustDynamoTable(t, client, name)
	ctx := context.Background()

	t0 := time.Now().Truncate(time.Second)
	now := t0.Unix()
	clock := func() time.Time { return t0 }
	e := &interop{ctx: ctx, node: node, tb: tb, t0: t0, now: now, clock: clock}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"request hash", e.requestHash},
		{"node recipe A META, go reads and serves", e.recipeAMeta},
		{"node recipe B pointer-only META, go follows current_sk and serves", e.recipeBPointer},
		{"node recipe B from scratch, META without freshness fields, go serves", e.recipeBScratch},
		{"go publishes, node reads every attribute and type", e.goPublishes},
		{"leases exclude each other across languages", e.leasesExclude},
		{"REQ# flow across languages", e.requestFlow},
		{"fractional numbers written by node", e.fractionalNumbers},
	} {
		t.Run(c.name, c.run)
	}
}

// requestHash is the subtest "request hash".
func (e *interop) requestHash(t *testing.T) {
	node := e.node
	cases := [][]string{
		{"tenant", "/page"},
		{"a&b", "<script>", "x>y"},
		{`"quoted" \ back`, "tab\there", "nl\nctl\x01\x1f"},
		{"é", "日本", "😀", "\u2028\u2029", "\u007f"},
		{""},
		{},
	}
	for _, in := range cases {
		args := map[string]any{"inputs": in}
		if in == nil {
			args["inputs"] = []string{}
		}
		r := node.must(t, "hash", args)
		if got, want := r.str("hash"), isr.RequestHash(in...); got != want {
			t.Errorf("RequestHash(%q): node %s (canonical %s), go %s", in, got, r.str("canonical"), want)
		}
	}
}

// recipeAMeta is the subtest "node recipe A META, go reads and serves".
func (e *interop) recipeAMeta(t *testing.T) {
	ctx, node, tb, now, clock := e.ctx, e.node, e.tb, e.now, e.clock
	bodies := body.NewMemory()
	coord := mustCoordinator(t, tb, isr.WithClock(clock))
	h := mustHandler(t, coord, bodies, func(context.Context, string, string) ([]byte, string, error) {
		return nil, "", errors.New("must not render: META is fresh")
	})
	pk, err := isr.PK("", "/node-a")
	if err != nil {
		t.Fatal(err)
	}
	etag, err := bodies.Put(ctx, "pages/node-a", []byte("from node A"), "text/html")
	if err != nil {
		t.Fatal(err)
	}
	node.must(t, "putMetaA", map[string]any{"pk": pk, "s3_key": "pages/node-a", "generated_at": now, "revalidate_seconds": 60, "etag": etag, "ttl": now + 3600})
	m, err := tb.GetMeta(ctx, pk)
	if err != nil {
		t.Fatal(err)
	}
	if m.S3Key != "pages/node-a" || m.ETag != etag || m.GeneratedAt != now || m.RevalidateSeconds != 60 || m.TTL != now+3600 || m.CurrentSK != "" {
		t.Fatalf("GetMeta = %+v", m)
	}
	res := get(h, "/node-a")
	if res.Code != 200 || res.Body != "from node A" || res.Cache != isr.CacheHit || res.Hdr.Get("ETag") != etag {
		t.Fatalf("served %d %s %q etag %s", res.Code, res.Cache, res.Body, res.Hdr.Get("ETag"))
	}
}

// recipeBPointer is the subtest "node recipe B pointer-only META, go follows current_sk and serves".
func (e *interop) recipeBPointer(t *testing.T) {
	ctx, node, tb, t0, now, clock := e.ctx, e.node, e.tb, e.t0, e.now, e.clock
	bodies := body.NewMemory()
	coord := mustCoordinator(t, tb, isr.WithClock(clock))
	h := mustHandler(t, coord, bodies, func(context.Context, string, string) ([]byte, string, error) {
		return nil, "", errors.New("must not render: META is fresh")
	})
	pk, err := isr.PK("", "/node-b")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1", "v2"} {
		if _, err := bodies.Put(ctx, "pages/node-b-"+v, []byte("node B "+v), "text/html"); err != nil {
			t.Fatal(err)
		}
	}
	// First a recipe-A META, then a pointer swapped over it: the
	// pointed version wins over the stale denormalised fields.
	node.must(t, "putMetaA", map[string]any{"pk": pk, "s3_key": "pages/node-b-v1", "generated_at": now - 10, "revalidate_seconds": 60, "etag": `"v1"`})
	node.must(t, "publishB", map[string]any{"pk": pk, "id": "v2", "s3_key": "pages/node-b-v2", "generated_at": now, "etag": `"v2"`, "revalidate_seconds": 60})
	m, err := tb.GetMeta(ctx, pk)
	if err != nil {
		t.Fatal(err)
	}
	if m.S3Key != "pages/node-b-v2" || m.ETag != `"v2"` || m.GeneratedAt != now || m.CurrentSK != "VER#v2" || m.Version != 1 {
		t.Fatalf("GetMeta after pointer swap = %+v", m)
	}
	if res := get(h, "/node-b"); res.Code != 200 || res.Body != "node B v2" || res.Cache != isr.CacheHit {
		t.Fatalf("served %d %s %q", res.Code, res.Cache, res.Body)
	}
	// A pointer-only META from the start (no recipe-A fields at all).
	pk2, _ := isr.PK("", "/node-b-only")
	node.must(t, "publishB", map[string]any{"pk": pk2, "id": "v1", "s3_key": "pages/node-b-v1", "generated_at": now, "etag": `"v1"`, "revalidate_seconds": 60})
	meta := typedItem(t, node.must(t, "get", map[string]any{"pk": pk2, "sk": isr.SKMeta}))
	if _, ok := meta["s3_key"]; ok {
		t.Fatalf("META is not pointer-only: %v", meta)
	}
	if res := get(h, "/node-b-only"); res.Code != 200 || res.Body != "node B v1" || res.Cache != isr.CacheHit {
		t.Fatalf("pointer-only META served %d %s %q", res.Code, res.Cache, res.Body)
	}
	// Go publishes recipe B over Node's pointer: version continues.
	gocoord := mustCoordinator(t, tb, isr.WithClock(func() time.Time { return t0.Add(2 * time.Minute) }), isr.WithPointerSwap())
	res, err := gocoord.Regenerate(ctx, pk2, nil, func(context.Context, isr.Lease) (isr.Page, error) {
		return isr.Page{S3Key: "pages/go-b", ETag: `"go"`, RevalidateSeconds: 60, VersionID: "go1"}, nil
	})
	if err != nil || res.Outcome != isr.OutcomeRegenerated {
		t.Fatalf("Regenerate over node's pointer = %+v, %v", res, err)
	}
	r := node.must(t, "getMeta", map[string]any{"pk": pk2, "now": now + 121})
	nm := r["meta"].(map[string]any)
	if nm["current_sk"] != "VER#go1" || nm["s3_key"] != "pages/go-b" || nm["etag"] != `"go"` || fmt.Sprint(nm["version"]) != "2" || fmt.Sprint(nm["generated_at"]) != itoa(now+120) || r["fresh"] != true {
		t.Fatalf("node reads go's pointer swap as %v", r)
	}
}

// recipeBScratch is the subtest "node recipe B from scratch, META without freshness fields, go serves".
func (e *interop) recipeBScratch(t *testing.T) {
	ctx, node, tb, now, clock := e.ctx, e.node, e.tb, e.now, e.clock
	// META = {current_sk, version} and nothing else: Go takes
	// generated_at from the VER# row and revalidate_seconds from the
	// row when it has one, else from the coordinator's default.
	bodies := body.NewMemory()
	if _, err := bodies.Put(ctx, "pages/scratch", []byte("node scratch"), "text/html"); err != nil {
		t.Fatal(err)
	}
	var renders atomic.Int32
	handler := func(coord *isr.Coordinator) *isr.Handler {
		return mustHandler(t, coord, bodies, func(context.Context, string, string) ([]byte, string, error) {
			renders.Add(1)
			return []byte("go render"), "text/html", nil
		})
	}
	pk, err := isr.PK("", "/node-scratch")
	if err != nil {
		t.Fatal(err)
	}
	node.must(t, "publishPointerOnly", map[string]any{"pk": pk, "id": "s1", "s3_key": "pages/scratch", "generated_at": now - 100, "etag": `"s1"`})
	meta := typedItem(t, node.must(t, "get", map[string]any{"pk": pk, "sk": isr.SKMeta}))
	wantAttrs(t, "node's META", meta, map[string][2]string{"pk": {"S", pk}, "sk": {"S", "META"}, "current_sk": {"S", "VER#s1"}, "version": {"N", "1"}})

	// Within the default window (300 s): served fresh, no render.
	fresh := handler(mustCoordinator(t, tb, isr.WithClock(clock), isr.WithDefaultRevalidate(5*time.Minute)))
	res := get(fresh, "/node-scratch")
	if res.Code != 200 || res.Body != "node scratch" || res.Cache != isr.CacheHit || res.Hdr.Get("ETag") != `"s1"` || res.Hdr.Get("Cache-Control") != "s-maxage=200, stale-while-revalidate=86400" {
		t.Fatalf("served %d %s %q etag %s cache-control %q", res.Code, res.Cache, res.Body, res.Hdr.Get("ETag"), res.Hdr.Get("Cache-Control"))
	}
	// Past it (the default 60 s): served stale and regenerated.
	stale := handler(mustCoordinator(t, tb, isr.WithClock(clock), isr.WithPointerSwap()))
	if res := get(stale, "/node-scratch"); res.Code != 200 || res.Body != "node scratch" || res.Cache != isr.CacheStale {
		t.Fatalf("served %d %s %q", res.Code, res.Cache, res.Body)
	}
	if err := stale.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n := renders.Load(); n != 1 {
		t.Fatalf("renders = %d, want 1", n)
	}
	r := node.must(t, "getMeta", map[string]any{"pk": pk, "now": now})
	if nm := r["meta"].(map[string]any); fmt.Sprint(nm["version"]) != "2" || fmt.Sprint(nm["revalidate_seconds"]) != "60" || r["fresh"] != true {
		t.Fatalf("node reads go's regeneration over its pointer as %v", r)
	}

	// A VER# row carrying revalidate_seconds: that window, not the
	// default.
	pk2, _ := isr.PK("", "/node-scratch-2")
	node.must(t, "publishPointerOnly", map[string]any{"pk": pk2, "id": "s1", "s3_key": "pages/scratch", "generated_at": now - 100, "etag": `"s1"`, "revalidate_seconds": 3600})
	if res := get(stale, "/node-scratch-2"); res.Code != 200 || res.Cache != isr.CacheHit || res.Hdr.Get("Cache-Control") != "s-maxage=3500, stale-while-revalidate=86400" {
		t.Fatalf("served %d %s cache-control %q", res.Code, res.Cache, res.Hdr.Get("Cache-Control"))
	}
}

// goPublishes is the subtest "go publishes, node reads every attribute and type".
func (e *interop) goPublishes(t *testing.T) {
	ctx, node, tb, now, clock := e.ctx, e.node, e.tb, e.now, e.clock
	pk := isrtest.NewPK(t)
	coord := mustCoordinator(t, tb, isr.WithClock(clock), isr.WithMetaTTL(time.Hour))
	var lease isr.Lease
	res, err := coord.Regenerate(ctx, pk, nil, func(_ context.Context, l isr.Lease) (isr.Page, error) {
		lease = l
		lock := typedItem(t, node.must(t, "get", map[string]any{"pk": pk, "sk": isr.SKLock}))
		wantAttrs(t, "LOCK", lock, map[string][2]string{
			"pk": {"S", pk}, "sk": {"S", "LOCK"}, "lease_token": {"S", l.Token},
			"lease_expires_at": {"N", itoa(l.ExpiresAt)}, "ttl": {"N", itoa(l.TTL)},
		})
		return isr.Page{S3Key: "pages/go-a", ETag: `"go-a"`, RevalidateSeconds: 60}, nil
	})
	if err != nil || res.Outcome != isr.OutcomeRegenerated || lease.Token == "" {
		t.Fatalf("Regenerate = %+v, %v", res, err)
	}
	meta := typedItem(t, node.must(t, "get", map[string]any{"pk": pk, "sk": isr.SKMeta}))
	wantAttrs(t, "META", meta, map[string][2]string{
		"pk": {"S", pk}, "sk": {"S", "META"}, "s3_key": {"S", "pages/go-a"}, "etag": {"S", `"go-a"`},
		"generated_at": {"N", itoa(now)}, "revalidate_seconds": {"N", "60"}, "ttl": {"N", itoa(res.Meta.TTL)},
	})
	if r := node.must(t, "get", map[string]any{"pk": pk, "sk": isr.SKLock}); r["item"] != nil {
		t.Fatalf("LOCK not deleted by the publish: %v", r)
	}
	for _, at := range []int64{now, now + 59, now + 60, now + 61} {
		r := node.must(t, "getMeta", map[string]any{"pk": pk, "now": at})
		if got, want := r["fresh"] == true, res.Meta.Fresh(time.Unix(at, 0)); got != want {
			t.Errorf("fresh at now+%d: node %v, go %v", at-now, got, want)
		}
	}

	// Recipe B from Go: VER# row and the denormalised META.
	pkB := isrtest.NewPK(t)
	coordB := mustCoordinator(t, tb, isr.WithClock(clock), isr.WithPointerSwap())
	resB, err := coordB.Regenerate(ctx, pkB, nil, func(context.Context, isr.Lease) (isr.Page, error) {
		return isr.Page{S3Key: "pages/go-b1", ETag: `"b1"`, RevalidateSeconds: 30, VersionID: "b1"}, nil
	})
	if err != nil || resB.Outcome != isr.OutcomeRegenerated {
		t.Fatalf("Regenerate (recipe B) = %+v, %v", resB, err)
	}
	ver := typedItem(t, node.must(t, "get", map[string]any{"pk": pkB, "sk": "VER#b1"}))
	wantAttrs(t, "VER#", ver, map[string][2]string{
		"pk": {"S", pkB}, "sk": {"S", "VER#b1"}, "s3_key": {"S", "pages/go-b1"}, "etag": {"S", `"b1"`}, "generated_at": {"N", itoa(now)},
	})
	metaB := typedItem(t, node.must(t, "get", map[string]any{"pk": pkB, "sk": isr.SKMeta}))
	wantAttrs(t, "META (recipe B)", metaB, map[string][2]string{
		"pk": {"S", pkB}, "sk": {"S", "META"}, "current_sk": {"S", "VER#b1"}, "version": {"N", "1"},
		"s3_key": {"S", "pages/go-b1"}, "etag": {"S", `"b1"`}, "generated_at": {"N", itoa(now)}, "revalidate_seconds": {"N", "30"},
	})
}

// leasesExclude is the subtest "leases exclude each other across languages".
func (e *interop) leasesExclude(t *testing.T) {
	ctx, node, tb, t0, now, clock := e.ctx, e.node, e.tb, e.t0, e.now, e.clock
	pk := isrtest.NewPK(t)
	coord := mustCoordinator(t, tb, isr.WithClock(clock))
	// Node holds: Go's acquire is refused and sees Node's lease.
	node.must(t, "acquire", map[string]any{"pk": pk, "token": "node-1", "now": now, "expires_at": now + 30, "ttl": now + 90})
	_, err := coord.TryAcquire(ctx, pk, nil)
	var held *isr.LeaseHeldError
	if !errors.As(err, &held) || !errors.Is(err, isr.ErrLeaseHeld) {
		t.Fatalf("go TryAcquire under node's lease = %v, want *LeaseHeldError", err)
	}
	l, err := tb.GetLease(ctx, pk)
	if err != nil || l.Token != "node-1" || l.ExpiresAt != now+30 || !l.Held(t0) {
		t.Fatalf("GetLease = %+v, %v", l, err)
	}
	// Go cannot publish with a lease it does not hold.
	if _, err := coord.Publish(ctx, isr.Lease{PK: pk, Token: "go-guess"}, isr.Page{S3Key: "pages/x", RevalidateSeconds: 60}); !errors.Is(err, isr.ErrLeaseLost) {
		t.Fatalf("go Publish under node's lease = %v, want ErrLeaseLost", err)
	}
	node.must(t, "release", map[string]any{"pk": pk, "token": "node-1"})

	// Go holds: Node's conditional put and publish are refused.
	gl, err := coord.TryAcquire(ctx, pk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := node.call(t, "acquire", map[string]any{"pk": pk, "token": "node-2", "now": now, "expires_at": now + 30, "ttl": now + 90}); r.ok() || r.str("error") != "ConditionalCheckFailedException" {
		t.Fatalf("node acquire under go's lease = %v", r)
	}
	if r := node.call(t, "publishA", map[string]any{"pk": pk, "token": "node-2", "now": now, "s3_key": "pages/node", "generated_at": now, "revalidate_seconds": 60, "etag": `"n"`}); r.ok() {
		t.Fatalf("node publish under go's lease = %v", r)
	}
	if r := node.call(t, "release", map[string]any{"pk": pk, "token": "node-2"}); r.ok() {
		t.Fatalf("node released go's lease: %v", r)
	}
	// Once Go's lease has expired (by both sides' clocks), Node takes
	// it and Go's stale publish is refused.
	later := gl.ExpiresAt
	node.must(t, "acquire", map[string]any{"pk": pk, "token": "node-3", "now": later, "expires_at": later + 30, "ttl": later + 90})
	if _, err := coord.Publish(ctx, gl, isr.Page{S3Key: "pages/stale", RevalidateSeconds: 60}); !errors.Is(err, isr.ErrLeaseLost) {
		t.Fatalf("go's stale publish = %v, want ErrLeaseLost", err)
	}
	node.must(t, "publishA", map[string]any{"pk": pk, "token": "node-3", "now": later, "s3_key": "pages/node-3", "generated_at": later, "revalidate_seconds": 60, "etag": `"n3"`})
	if m, err := tb.GetMeta(ctx, pk); err != nil || m.S3Key != "pages/node-3" {
		t.Fatalf("GetMeta after node's publish = %+v, %v", m, err)
	}
	if _, err := tb.GetLease(ctx, pk); !errors.Is(err, isr.ErrNotFound) {
		t.Fatalf("LOCK after node's publish: %v", err)
	}
}

// requestFlow is the subtest "REQ# flow across languages".
func (e *interop) requestFlow(t *testing.T) {
	ctx, node, tb, t0, now, clock := e.ctx, e.node, e.tb, e.t0, e.now, e.clock
	coord := mustCoordinator(t, tb, isr.WithClock(clock))
	render := func(s3 string) isr.RenderFunc {
		return func(context.Context, isr.Lease) (isr.Page, error) {
			return isr.Page{S3Key: s3, RevalidateSeconds: 60}, nil
		}
	}
	inputs := []string{"tenant&co", "/a?b=<c>", "policy>1"}
	hash := isr.RequestHash(inputs...)
	other := isr.RequestHash("tenant&co", "/a?b=<c>", "policy>2")

	// Node begins; Go sees STARTED and does not regenerate.
	pk := isrtest.NewPK(t)
	r := node.must(t, "beginRequest", map[string]any{"pk": pk, "key": "req-1", "inputs": inputs, "ttl": now + 3600})
	if r["created"] != true || r.str("hash") != hash {
		t.Fatalf("node beginRequest = %v (go hash %s)", r, hash)
	}
	res, err := coord.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-1", Hash: hash}, render("pages/go"))
	if err != nil || res.Outcome != isr.OutcomeInProgress {
		t.Fatalf("go Regenerate on node's STARTED = %+v, %v", res, err)
	}
	// Same key, another hash: Go fails closed.
	if _, err := coord.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-1", Hash: other}, render("pages/go")); !errors.Is(err, isr.ErrRequestMismatch) {
		t.Fatalf("go Regenerate with another hash = %v, want ErrRequestMismatch", err)
	}
	// Node completes; Go reports the recorded result.
	node.must(t, "completeRequest", map[string]any{"pk": pk, "key": "req-1", "hash": hash, "result_s3_key": "pages/node-result"})
	res, err = coord.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-1", Hash: hash}, render("pages/go"))
	if err != nil || res.Outcome != isr.OutcomeRecorded || res.ResultS3Key != "pages/node-result" {
		t.Fatalf("go Regenerate on node's COMPLETED = %+v, %v", res, err)
	}
	rq, err := tb.GetRequest(ctx, pk, "req-1")
	if err != nil || rq.Status != isr.RequestCompleted || rq.Hash != hash || rq.TTL != now+3600 {
		t.Fatalf("GetRequest = %+v, %v", rq, err)
	}

	// Go begins and completes; Node sees COMPLETED, and fails closed on
	// another hash.
	pk2 := isrtest.NewPK(t)
	res, err = coord.Regenerate(ctx, pk2, &isr.RequestSpec{Key: "req-2", Hash: hash}, render("pages/go-2"))
	if err != nil || res.Outcome != isr.OutcomeRegenerated {
		t.Fatalf("go Regenerate = %+v, %v", res, err)
	}
	item := typedItem(t, node.must(t, "get", map[string]any{"pk": pk2, "sk": "REQ#req-2"}))
	for k, want := range map[string][2]string{"request_hash": {"S", hash}, "status": {"S", "COMPLETED"}, "result_s3_key": {"S", "pages/go-2"}} {
		if got := item[k]; got.Type != want[0] || got.Value != want[1] {
			t.Errorf("REQ# %s = %v, want %v", k, got, want)
		}
	}
	if item["ttl"].Type != "N" {
		t.Errorf("REQ# ttl = %v, want N", item["ttl"])
	}
	r = node.must(t, "beginRequest", map[string]any{"pk": pk2, "key": "req-2", "inputs": inputs, "ttl": now + 3600})
	if r["created"] != false || r["mismatch"] != false || r.str("status") != "COMPLETED" || r.str("result_s3_key") != "pages/go-2" {
		t.Fatalf("node beginRequest on go's COMPLETED = %v", r)
	}
	r = node.must(t, "beginRequest", map[string]any{"pk": pk2, "key": "req-2", "inputs": []string{"tenant&co", "/a?b=<c>", "policy>2"}, "ttl": now + 3600})
	if r["mismatch"] != true || r.str("hash") != other {
		t.Fatalf("node beginRequest with another hash = %v", r)
	}
	// Node's completion with another hash is refused.
	pk3 := isrtest.NewPK(t)
	if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk3, Key: "req-3", Hash: hash, Now: t0, TTL: now + 3600}); err != nil {
		t.Fatal(err)
	}
	if r := node.call(t, "completeRequest", map[string]any{"pk": pk3, "key": "req-3", "hash": other, "result_s3_key": "pages/x"}); r.ok() {
		t.Fatalf("node completed go's request with another hash: %v", r)
	}
}

// fractionalNumbers is the subtest "fractional numbers written by node".
func (e *interop) fractionalNumbers(t *testing.T) {
	ctx, node, tb, now := e.ctx, e.node, e.tb, e.now
	// generated_at 1795385591.7 as JavaScript writes it (a number with
	// a fraction), revalidate_seconds 60.
	const gen = 1795385591.7
	pk := isrtest.NewPK(t)
	node.must(t, "putMetaA", map[string]any{"pk": pk, "s3_key": "pages/frac", "generated_at": gen, "revalidate_seconds": 60, "etag": `"f"`})
	meta := typedItem(t, node.must(t, "get", map[string]any{"pk": pk, "sk": isr.SKMeta}))
	if g := meta["generated_at"]; g.Type != "N" || g.Value != "1795385591.7" {
		t.Fatalf("node wrote generated_at %v", g)
	}
	m, err := tb.GetMeta(ctx, pk)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range fracInstants(1795385651) {
		r := node.must(t, "getMeta", map[string]any{"pk": pk, "now": float64(at.UnixNano()) / 1e9})
		if got, want := m.Fresh(at), r["fresh"] == true; got != want {
			t.Errorf("Fresh at %s: go %v, node %v", at.Format("15:04:05.000"), got, want)
		}
	}
	// A stale META with a fractional generated_at is regenerated, not
	// stuck: Go's acquire conditions on the value it read.
	stale := time.Unix(1795385591+120, 0)
	coord := mustCoordinator(t, tb, isr.WithClock(func() time.Time { return stale }))
	res, err := coord.Regenerate(ctx, pk, nil, func(context.Context, isr.Lease) (isr.Page, error) {
		return isr.Page{S3Key: "pages/frac-2", RevalidateSeconds: 60}, nil
	})
	if err != nil || res.Outcome != isr.OutcomeRegenerated {
		t.Fatalf("Regenerate of a stale fractional META = %+v, %v", res, err)
	}

	// lease_expires_at with a fraction: GetLease, acquire and Node's
	// reading agree at every instant.
	for _, at := range fracInstants(now + 100) {
		pk := isrtest.NewPK(t)
		exp := float64(now+100) + 0.5
		node.must(t, "acquire", map[string]any{"pk": pk, "token": "node-frac", "now": now, "expires_at": exp, "ttl": now + 200})
		l, err := tb.GetLease(ctx, pk)
		if err != nil {
			t.Fatal(err)
		}
		nodeHeld := exp > float64(at.UnixNano())/1e9
		_, aerr := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "go", Now: at, ExpiresAt: at.Unix() + 30, TTL: at.Unix() + 90})
		if aerr != nil && !errors.Is(aerr, isr.ErrLeaseHeld) {
			t.Fatal(aerr)
		}
		goAcquireHeld := aerr != nil
		if l.Held(at) != nodeHeld || goAcquireHeld != nodeHeld {
			t.Errorf("lease_expires_at %.1f at %s: GetLease held %v, acquire held %v, node %v", exp, at.Format("15:04:05.000"), l.Held(at), goAcquireHeld, nodeHeld)
		}
	}
}

// fracInstants are instants around the whole second s: before, at, and
// after the half second.
func fracInstants(s int64) []time.Time {
	base := time.Unix(s, 0)
	var out []time.Time
	for _, d := range []time.Duration{-time.Second, 0, 400 * time.Millisecond, 700 * time.Millisecond, 900 * time.Millisecond, time.Second, 2 * time.Second} {
		out = append(out, base.Add(d))
	}
	return out
}
