//go:build unix

package sqlstore_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// Child processes of TestStepTxProcesses.
const (
	stxRoleEnv  = "IDEM_SQLSTORE_STEPTX_ROLE" // the case
	stxTestEnv  = "IDEM_SQLSTORE_STEPTX_TEST"
	stxTableEnv = "IDEM_SQLSTORE_STEPTX_TABLE"
	stxSideEnv  = "IDEM_SQLSTORE_STEPTX_SIDE"
)

// stxOwnerTakeover is the owner's takeover threshold: once it has passed
// without a heartbeat (the owner killed or stopped), its claims are taken
// over.
const stxOwnerTakeover = time.Second

// stxCheckout is the call of the process tests: a step "charge" (an
// autocommitted row "charge" stands for the external call), then a StepTx
// "order" whose fn inserts the row "order" in its transaction and then
// runs inOrder.
func stxCheckout(t *testing.T, g *idem.Guard[int], d sqlstore.Dialect, side string, inOrder func(), afterOrder func()) (int, error) {
	return g.Do(context.Background(), "checkout", func(ctx context.Context) (int, error) {
		if _, err := idem.Step(ctx, "charge", func(ctx context.Context) (int, error) {
			token, _ := idem.FencingToken(ctx)
			_, err := sharedDB(t, d).ExecContext(ctx, ph3(d, "INSERT INTO "+side+" (k, attempt, pid) VALUES (?, ?, ?)"), "charge", token, os.Getpid())
			return 1, err
		}); err != nil {
			return 0, err
		}
		v, err := sqlstore.StepTx(ctx, "order", func(ctx context.Context, tx *sql.Tx) (int, error) {
			if err := insertSide(ctx, tx, d, side, "order"); err != nil {
				return 0, err
			}
			inOrder()
			token, _ := idem.FencingToken(ctx)
			return int(token), nil
		})
		if err != nil {
			return 0, err
		}
		afterOrder()
		return v, nil
	})
}

// stepTxChild runs the owner of a case and exits, when this process is one
// for test.
func stepTxChild(t *testing.T, d sqlstore.Dialect) {
	role := os.Getenv(stxRoleEnv)
	if role == "" || os.Getenv(stxTestEnv) != t.Name() {
		return
	}
	db, h := sharedDB(t, d), &hooks{}
	if role == "killed-before-commit" {
		db, _ = proxiedDB(t, d, h)
	}
	s, err := sqlstore.New(db, d, sqlstore.WithTable(os.Getenv(stxTableEnv)))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	g := newGuard[int](t, s, idem.WithTakeoverAfter(stxOwnerTakeover))
	side := os.Getenv(stxSideEnv)
	nothing := func() {}
	switch role {
	case "killed-in-fn": // say so inside StepTx's fn, and wait to be killed
		_, err = stxCheckout(t, g, d, side, func() { fmt.Println("inserted"); time.Sleep(time.Hour) }, nothing)
	case "killed-before-commit": // say so once the completion UPDATE ran in the transaction, and wait to be killed
		_, err = stxCheckout(t, g, d, side, func() {
			h.arm(func(q string) bool { return strings.Contains(q, "completed_at") }, func() {
				fmt.Println("completing")
				time.Sleep(time.Hour)
			})
		}, nothing)
	case "killed-after-commit": // say so after StepTx committed, and wait to be killed
		_, err = stxCheckout(t, g, d, side, nothing, func() { fmt.Println("committed"); time.Sleep(time.Hour) })
	case "stopped-in-fn": // say so inside StepTx's fn, then go on when told to
		_, err = stxCheckout(t, g, d, side, func() {
			fmt.Println("inserted")
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		}, nothing)
		if errors.Is(err, storekit.ErrLostOwnership) {
			fmt.Println("result lost")
			os.Exit(0)
		}
		fmt.Println("result", err)
		os.Exit(0)
	}
	fmt.Println("error", err)
	os.Exit(2)
}

// sideRow is the attempt and process of key's only row in table.
func sideRow(t testing.TB, d sqlstore.Dialect, table, key string) (attempt int64, pid int) {
	t.Helper()
	require.NoError(t, sharedDB(t, d).QueryRow(ph3(d, "SELECT attempt, pid FROM "+table+" WHERE k = ?"), key).Scan(&attempt, &pid))
	return attempt, pid
}

// TestStepTxProcesses: the owner of a checkout (Step charge, StepTx order)
// is a child process, SIGKILLed or SIGSTOPped at a point of StepTx; this
// process then takes the call over (the owner's claims stale) and runs it
// to the end:
//
//   - killed-in-fn: killed after fn's INSERT, before the commit: the
//     takeover runs the order step again (its fencing token 2), charge is
//     not repeated, and the side table holds one order row, the
//     takeover's.
//   - killed-before-commit: killed after the step's completion UPDATE ran
//     in the transaction, before the COMMIT: the same (the record is
//     written in the transaction, so it died with it).
//   - killed-after-commit: killed after StepTx committed: the takeover
//     replays the order (fn does not run), one order row, the owner's.
//   - stopped-in-fn: stopped after fn's INSERT until this process finished
//     the call, then resumed: the owner's completion is refused (its
//     StepTx answers storekit.ErrLostOwnership, its transaction rolls back),
//     and the side table holds one order row, this process's.
func TestStepTxProcesses(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		for _, c := range []string{"killed-in-fn", "killed-before-commit", "killed-after-commit", "stopped-in-fn"} {
			t.Run(c, func(t *testing.T) {
				stepTxChild(t, d)
				stepTxCase(t, d, c)
			})
		}
	})
}

// startOwner starts cmd, the owner process of a stepTxCase, and returns
// its stdin and a function that returns its next line of output (failing
// t if it exits or says nothing for a minute).
func startOwner(t *testing.T, cmd *exec.Cmd) (io.Writer, func() string) {
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the owner exited")
			}
			return l
		case <-time.After(time.Minute):
			t.Fatal("no word from the owner")
		}
		return ""
	}
	return stdin, next
}

func stepTxCase(t *testing.T, d sqlstore.Dialect, c string) {
	e := newEnv(t, d)
	side := sideTable(t, d)
	parts := strings.Split(t.Name(), "/")
	cmd := exec.Command(os.Args[0], "-test.run=^"+parts[0]+"$/^"+parts[1]+"$/^"+parts[2]+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), stxRoleEnv+"="+c, stxTestEnv+"="+t.Name(), stxTableEnv+"="+e.table, stxSideEnv+"="+side)
	stdin, next := startOwner(t, cmd)
	want := map[string]string{"killed-in-fn": "inserted", "killed-before-commit": "completing", "killed-after-commit": "committed", "stopped-in-fn": "inserted"}[c]
	for l := next(); l != want; l = next() {
		require.False(t, strings.HasPrefix(l, "error"), "owner: %s", l)
		t.Log("owner:", l)
	}
	if c == "stopped-in-fn" {
		require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	} else {
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}

	// The takeover: this process's Guard waits for the owner's claims to go
	// stale (its own threshold is long: it must not lapse here).
	var orderRuns atomic.Int32
	g := newGuard[int](t, e.store, idem.OnDuplicate(idem.Wait), idem.WithTakeoverAfter(20*time.Second))
	v, err := stxCheckout(t, g, d, side, func() { orderRuns.Add(1) }, func() {})
	require.NoError(t, err)
	assert.Equal(t, 1, sideRows(t, d, side, "charge"), "charge ran once: the takeover replayed it")
	assert.Equal(t, 1, sideRows(t, d, side, "order"), "one order row")
	attempt, pid := sideRow(t, d, side, "order")
	switch c {
	case "killed-in-fn", "killed-before-commit":
		assert.EqualValues(t, 1, orderRuns.Load(), "the order ran again")
		assert.Equal(t, 2, v, "the step's second attempt")
		assert.Equal(t, os.Getpid(), pid, "the row is the takeover's: the killed owner's never committed")
		assert.EqualValues(t, 2, attempt)
	case "killed-after-commit":
		assert.EqualValues(t, 0, orderRuns.Load(), "the committed order was replayed")
		assert.Equal(t, 1, v)
		assert.Equal(t, cmd.Process.Pid, pid, "the row is the owner's")
	case "stopped-in-fn":
		assert.EqualValues(t, 1, orderRuns.Load())
		assert.Equal(t, os.Getpid(), pid)
		require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
		_, err := io.WriteString(stdin, "go\n")
		require.NoError(t, err)
		var res string
		for res = next(); !strings.HasPrefix(res, "result"); res = next() {
			t.Log("owner:", res)
		}
		assert.Equal(t, "result lost", res, "the resumed owner's commit is refused")
		require.NoError(t, cmd.Wait())
		assert.Equal(t, 1, sideRows(t, d, side, "order"), "still one order row after the owner resumed")
		attempt, pid = sideRow(t, d, side, "order")
		assert.Equal(t, os.Getpid(), pid)
		assert.EqualValues(t, 2, attempt)
	}
}
