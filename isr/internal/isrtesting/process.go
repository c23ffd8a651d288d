package isrtesting

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
)

// ProcBackend is the storage several test processes share: an ISR table,
// and counters every process can bump atomically (to count holders and
// renders across processes). Env tells a child process how to open the
// same backend (the opener HelperProcess is given reads it).
type ProcBackend struct {
	Table isr.Table
	Add   func(ctx context.Context, pk, name string, delta int64) (int64, error)
	Env   []string
}

// The multi-process tests re-execute the test binary as worker processes
// (testenv.StartChild): the child runs the module's TestHelperProcess,
// which calls HelperProcess, with ISR_HELPER_ROLE set and talks to the
// parent over stdin/stdout, one line per message.

const helperEnv = "ISR_HELPER_ROLE"

// StartChild starts a worker process of role, with env added to its
// environment.
func StartChild(t *testing.T, role string, env ...string) *testenv.Child {
	t.Helper()
	return testenv.StartChild(t, testenv.ChildConfig{
		Run: "^TestHelperProcess$",
		Env: append([]string{helperEnv + "=" + role}, env...),
	})
}

// HelperProcess is the worker process body: a module's TestHelperProcess
// calls it with the opener of its backend (which reads the location its
// parent put in ProcBackend.Env). It does nothing in a normal test run.
func HelperProcess(t *testing.T, open func(t *testing.T) *ProcBackend) {
	role := os.Getenv(helperEnv)
	if role == "" {
		return // only runs as a re-executed worker process
	}
	b := open(t)
	tb := b.Table
	pk := os.Getenv("ISR_PK")
	in := bufio.NewScanner(os.Stdin)
	ctx := context.Background()
	switch role {
	case "paused-writer":
		c := MustCoordinator(t, tb, isr.WithLeaseDuration(3*time.Second))
		seen, err := c.Lookup(ctx, pk)
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		l, err := c.TryAcquire(ctx, pk, &seen)
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println("ACQUIRED", l.ExpiresAt)
		in.Scan() // the parent stops us here, takes over, then lets us go on
		_, err = c.Publish(ctx, l, isr.Page{S3Key: "stale-child", ETag: `"child"`, RevalidateSeconds: 60, BaseVersion: seen.Version})
		switch {
		case err == nil:
			fmt.Println("RESULT PUBLISHED")
		case errors.Is(err, isr.ErrLeaseLost):
			fmt.Println("RESULT LEASE_LOST")
		default:
			fmt.Println("RESULT ERROR", err)
		}
	case "contend", "regen":
		n, _ := strconv.Atoi(os.Getenv("ISR_GOROUTINES"))
		total, _ := strconv.Atoi(os.Getenv("ISR_TOTAL"))
		fmt.Println("READY")
		in.Scan() // start together
		out := runWorkers(ctx, b, pk, role, n, total)
		fmt.Println("DONE", out)
	default:
		fmt.Println("ERROR unknown role", role)
		os.Exit(1)
	}
	os.Exit(0)
}

// workersDeadline bounds every wait of the workers. It only stops a broken
// run from hanging: a slow machine (a shared CI core, DynamoDB Local
// answering a thousand callers) must never reach it.
const workersDeadline = 2 * time.Minute

// runWorkers runs n goroutines of one role and summarises what they saw as
// "key=value ..." (violations, errors, outcomes).
// total is the number of callers in all processes together.
func runWorkers(ctx context.Context, b *ProcBackend, pk, role string, n, total int) string {
	// The lease outlives the longest render the deadline allows, so its
	// refreshes (every third of it) are never needed in time: how fast
	// the backend answers a refresh under load decides nothing here (the
	// refresh and its lapse have tests of their own).
	c, err := isr.NewCoordinator(b.Table, isr.WithLeaseDuration(3*workersDeadline))
	if err != nil {
		return "errors=1 first=" + err.Error()
	}
	w := &workers{c: c, b: b, pk: pk, total: total}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch role {
			case "contend":
				w.contend(ctx)
			case "regen":
				w.regen(ctx)
			}
		}()
	}
	wg.Wait()
	return w.summary()
}

// workers is what the goroutines of one process share: the coordinator,
// the backend and page, and the counts that make up its summary.
type workers struct {
	c     *isr.Coordinator
	b     *ProcBackend
	pk    string
	total int // callers in all processes together

	violations, errs, acquired, fresh, inprog, regenerated, noMeta atomic.Int64
	firstErr                                                       atomic.Value
}

// note counts an error and keeps the first one's text.
func (w *workers) note(err error) {
	w.errs.Add(1)
	w.firstErr.CompareAndSwap(nil, err.Error())
}

// hold marks this worker as the lease holder for a moment: the shared
// holders counter must read exactly 1 while it does.
func (w *workers) hold(ctx context.Context) {
	h, err := w.b.Add(ctx, w.pk, "holders", 1)
	if err != nil {
		w.note(err)
		return
	}
	if h != 1 {
		w.violations.Add(1)
	}
	time.Sleep(30 * time.Millisecond)
	if _, err := w.b.Add(ctx, w.pk, "holders", -1); err != nil {
		w.note(err)
	}
}

// contend takes the lease twice, holding it a moment each time; the
// deadline only stops a broken run from hanging.
func (w *workers) contend(ctx context.Context) {
	deadline := time.Now().Add(workersDeadline)
	for got := 0; got < 2; {
		if time.Now().After(deadline) {
			w.note(fmt.Errorf("no lease within %v", workersDeadline))
			return
		}
		l, err := w.c.TryAcquire(ctx, w.pk, nil)
		if err != nil {
			if !errors.Is(err, isr.ErrLeaseHeld) && !errors.Is(err, isr.ErrConflict) {
				w.note(err)
			}
			time.Sleep(15 * time.Millisecond)
			continue
		}
		w.acquired.Add(1)
		got++
		w.hold(ctx)
		if err := w.c.Release(ctx, l); err != nil {
			w.note(err)
		}
	}
}

// regen calls Regenerate once, counts itself answered when it did not
// render, and counts the outcome.
func (w *workers) regen(ctx context.Context) {
	res, err := w.c.Regenerate(ctx, w.pk, nil, w.render)
	if err == nil && res.Outcome != isr.OutcomeRegenerated {
		if _, aerr := w.b.Add(ctx, w.pk, "answered", 1); aerr != nil {
			w.note(aerr)
		}
	}
	if err != nil {
		w.note(err)
		return
	}
	if !res.HasMeta {
		w.noMeta.Add(1)
	}
	switch res.Outcome {
	case isr.OutcomeFresh:
		w.fresh.Add(1)
	case isr.OutcomeInProgress:
		w.inprog.Add(1)
	case isr.OutcomeRegenerated:
		w.regenerated.Add(1)
	}
}

// render is the one regeneration's render: it counts itself, holds the
// lease a moment, and does not end before every other caller, in every
// process, has been answered: they all found the page stale and none
// waited for the render.
func (w *workers) render(ctx context.Context, _ isr.Lease) (isr.Page, error) {
	if _, err := w.b.Add(ctx, w.pk, "regenerations", 1); err != nil {
		return isr.Page{}, err
	}
	w.hold(ctx)
	deadline := time.Now().Add(workersDeadline)
	for {
		n, err := w.b.Add(ctx, w.pk, "answered", 0)
		if err != nil {
			return isr.Page{}, err
		}
		if n >= int64(w.total-1) {
			break
		}
		if time.Now().After(deadline) {
			return isr.Page{}, fmt.Errorf("only %d of the %d other callers were answered while the page rendered", n, w.total-1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return isr.Page{S3Key: "regenerated", ETag: `"r"`, RevalidateSeconds: 3600}, nil
}

// summary is the workers' counts as "key=value ...".
func (w *workers) summary() string {
	fe, _ := w.firstErr.Load().(string)
	return fmt.Sprintf("violations=%d errors=%d acquired=%d fresh=%d inprogress=%d regenerated=%d nometa=%d firsterr=%q",
		w.violations.Load(), w.errs.Load(), w.acquired.Load(), w.fresh.Load(), w.inprog.Load(), w.regenerated.Load(), w.noMeta.Load(), fe)
}

// ParseSummary reads a worker's "key=value ..." summary.
func ParseSummary(t *testing.T, s string) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "firsterr" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("bad summary %q", s)
		}
		m[k] = n
	}
	return m
}

// RunProcesses runs role in the parent and in procs worker processes,
// goroutines callers each, on one fresh page, and returns the page and
// every summary (the parent's first).
func RunProcesses(t *testing.T, b *ProcBackend, role string, procs, goroutines int) (string, []map[string]int64) {
	pk := isrtest.NewPK(t)
	SeedStale(t, b.Table, pk)
	total := (procs + 1) * goroutines
	var children []*testenv.Child
	for i := 0; i < procs; i++ {
		ch := StartChild(t, role, append(b.Env, "ISR_PK="+pk, "ISR_GOROUTINES="+strconv.Itoa(goroutines), "ISR_TOTAL="+strconv.Itoa(total))...)
		ch.Expect(t, "READY", 30*time.Second)
		children = append(children, ch)
	}
	for _, ch := range children {
		ch.Send(t, "GO")
	}
	// The parent process joins in too.
	local := runWorkers(context.Background(), b, pk, role, goroutines, total)
	sums := []map[string]int64{ParseSummary(t, local)}
	for i, ch := range children {
		s := ch.Expect(t, "DONE", workersDeadline+time.Minute)
		t.Logf("process %d: %s", i, s)
		sums = append(sums, ParseSummary(t, s))
	}
	t.Logf("parent: %s", local)
	return pk, sums
}

// RunLeaseContention: 5 goroutines in each of four processes (the test
// and three children) contend for one lease until each has held it twice;
// each holder bumps a counter shared by the processes, which must read
// exactly 1 for every holder.
func RunLeaseContention(t *testing.T, b *ProcBackend) {
	{
		{
			_, sums := RunProcesses(t, b, "contend", 3, 5)
			var acquired int64
			for _, s := range sums {
				if s["violations"] != 0 || s["errors"] != 0 {
					t.Fatalf("summary %v", s)
				}
				acquired += s["acquired"]
			}
			if acquired != 4*5*2 {
				t.Fatalf("%d acquisitions, want %d", acquired, 4*5*2)
			}
			t.Logf("%d acquisitions, never two holders at once", acquired)
		}
	}
}

// RunOneRegeneration: 1,000 callers (250 goroutines in
// each of four processes) call Regenerate on one stale page at once.
// Exactly one renders (a counter shared by the
// processes reads 1), and the render does not finish until the 999 others
// have been answered, each with the stale META and "in progress", so none
// waited for the render; none errors.
func RunOneRegeneration(t *testing.T, b *ProcBackend) {
	{
		{
			pk, sums := RunProcesses(t, b, "regen", 3, 250)
			var regen, inprog, total int64
			for _, s := range sums {
				if s["violations"] != 0 || s["errors"] != 0 || s["nometa"] != 0 {
					t.Fatalf("summary %v", s)
				}
				regen += s["regenerated"]
				inprog += s["inprogress"]
				total += s["fresh"] + s["inprogress"] + s["regenerated"]
			}
			if inprog != 999 {
				t.Fatalf("%d callers were told the page is being regenerated, want 999", inprog)
			}
			n, err := b.Add(context.Background(), pk, "regenerations", 0)
			if err != nil {
				t.Fatal(err)
			}
			if n != 1 || regen != 1 {
				t.Fatalf("regenerations counter = %d, regenerated outcomes = %d; want 1", n, regen)
			}
			if total != 1000 {
				t.Fatalf("%d outcomes, want 1000", total)
			}
			m, err := b.Table.GetMeta(context.Background(), pk)
			if err != nil || m.S3Key != "regenerated" {
				t.Fatalf("META = %+v, %v", m, err)
			}
		}
	}
}
