package sqlstore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// The multi-process test re-executes the test binary; TestMain turns a
// child into a worker.
const (
	childEnv      = "IDEM_SQLSTORE_CHILD" // process number
	childDialect  = "IDEM_SQLSTORE_DIALECT"
	childDSN      = "IDEM_SQLSTORE_DSN"
	childTable    = "IDEM_SQLSTORE_TABLE"
	childExecLog  = "IDEM_SQLSTORE_EXEC_LOG"
	childStartAt  = "IDEM_SQLSTORE_START_AT"
	processes     = 4
	goroutines    = 16
	multiProcKeys = 12
)

func TestMain(m *testing.M) {
	if proc := os.Getenv(childEnv); proc != "" {
		os.Exit(childMain(proc))
	}
	os.Exit(m.Run())
}

// childMain runs goroutines workers, each with its own Guard (so every one
// of them goes to the database), over the same keys in random orders. fn
// appends a line to the shared execution log; every result is printed.
func childMain(proc string) int {
	d := sqlstore.Postgres
	if os.Getenv(childDialect) == sqlstore.MySQL.String() {
		d = sqlstore.MySQL
	}
	logFile, err := os.OpenFile(os.Getenv(childExecLog), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer logFile.Close()
	tb := &childTB{}
	db := openDB(tb, d, os.Getenv(childDSN), nil)
	defer db.Close()
	store, err := sqlstore.New(db, d, sqlstore.WithTable(os.Getenv(childTable)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	startAt, _ := strconv.ParseInt(os.Getenv(childStartAt), 10, 64)
	time.Sleep(time.Until(time.UnixMilli(startAt)))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var wg sync.WaitGroup
	for gi := range goroutines {
		wg.Go(func() {
			g, err := idem.New[string](store, idem.OnDuplicate(idem.Wait))
			if err != nil {
				panic(err)
			}
			me := fmt.Sprintf("%s-%d", proc, gi)
			for _, k := range rand.Perm(multiProcKeys) {
				key := fmt.Sprint("key-", k)
				v, err := g.Do(ctx, key, func(ctx context.Context) (string, error) {
					// One write(2) per line: O_APPEND keeps lines whole.
					if _, err := fmt.Fprintf(logFile, "%s %s\n", key, me); err != nil {
						return "", err
					}
					time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
					return me, nil
				})
				mu.Lock()
				if err != nil {
					fmt.Fprintf(out, "E %s %v\n", key, err)
				} else {
					fmt.Fprintf(out, "R %s %s\n", key, v)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return 0
}

// childTB lets a child process use openDB; it has no test to fail.
type childTB struct{ testing.TB }

func (*childTB) Helper() {}
func (*childTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(2)
}

// TestMultiProcessExactlyOnce: 4 processes (each with its own connection
// pool) x 16 goroutines (each with its own Guard) call 12 keys; each key runs once, and all 64 callers get its result.
func TestMultiProcessExactlyOnce(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		execLog := filepath.Join(t.TempDir(), "exec.log")
		if err := os.WriteFile(execLog, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		startAt := time.Now().Add(1500 * time.Millisecond).UnixMilli()
		outs := make([]bytes.Buffer, processes)
		cmds := make([]*exec.Cmd, processes)
		for i := range processes {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(),
				childEnv+"="+strconv.Itoa(i), childDialect+"="+d.String(), childDSN+"="+dsn(t, d),
				childTable+"="+e.table, childExecLog+"="+execLog,
				childStartAt+"="+strconv.FormatInt(startAt, 10))
			cmd.Stdout = &outs[i]
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds[i] = cmd
		}
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Fatalf("process %d: %v", i, err)
			}
		}

		raw, err := os.ReadFile(execLog)
		if err != nil {
			t.Fatal(err)
		}
		executor := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			key, who, _ := strings.Cut(line, " ")
			if prev, dup := executor[key]; dup {
				t.Errorf("%s ran twice: by %s and %s", key, prev, who)
			}
			executor[key] = who
		}
		if len(executor) != multiProcKeys {
			t.Errorf("%d keys ran, want %d", len(executor), multiProcKeys)
		}
		results := map[string]int{}
		for i := range outs {
			sc := bufio.NewScanner(&outs[i])
			for sc.Scan() {
				f := strings.SplitN(sc.Text(), " ", 3)
				if len(f) != 3 {
					continue
				}
				switch f[0] {
				case "R":
					if f[2] != executor[f[1]] {
						t.Errorf("%s: a caller got %q, the executor was %q", f[1], f[2], executor[f[1]])
					}
					results[f[1]]++
				case "E":
					t.Errorf("%s: %s", f[1], f[2])
				}
			}
		}
		for k := range multiProcKeys {
			key := fmt.Sprint("key-", k)
			if results[key] != processes*goroutines {
				t.Errorf("%s: %d results, want %d", key, results[key], processes*goroutines)
			}
		}
		if !t.Failed() {
			t.Logf("%d keys x %d processes x %d goroutines: each key ran once, %d callers agreed",
				multiProcKeys, processes, goroutines, processes*goroutines)
		}
	})
}
