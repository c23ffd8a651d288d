package integration

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// DoTx histories: fn's writes commit at most once per key.
//
// TestDoTxLinearizable runs random histories of sqlstore.DoTx on
// PostgreSQL, MariaDB and SQLite: clients (each its own Guard, policy Wait
// or Return) call a few keys with an fn that inserts a row of its own
// (the key and the run's value) in the transaction and returns that
// value, and that at random fails after its insert (rolled back),
// panics, sleeps, or has its session killed from another connection
// before it returns (PostgreSQL's pg_terminate_backend, MariaDB's KILL:
// the transaction is lost with its connection). porcupine checks the
// calls against a set-once register per key: every DoTx that returns a
// value returns the same one (the first committed run's); and after the
// history, each key has at most one row, and it is that value.

var (
	dotxHistories = flag.Int("lin.dotx", 10, "random DoTx histories per dialect in TestDoTxLinearizable")
	dotxBroken    = flag.Bool("lin.dotx.broken", false, "TestDoTxLinearizableBroken: run the histories with a DoTx that checks the key, then runs fn, without a lock")
)

// dotxOut is a DoTx call's outcome: the value it returned, or none.
type dotxOut struct {
	OK    bool
	Value string
}

var dotxModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(string)
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return "" },
	Step: func(state, _, output any) (bool, any) {
		rec, out := state.(string), output.(dotxOut)
		switch {
		case !out.OK: // nothing returned: whatever committed, the register says
			return true, rec
		case rec == "":
			return true, out.Value
		}
		return rec == out.Value, rec
	},
	DescribeOperation: func(input, output any) string {
		out := output.(dotxOut)
		return fmt.Sprintf("%s ok=%v %q", input.(string), out.OK, out.Value)
	},
}

// dotxCall is one way to run a DoTx: sqlstore.DoTx, or the broken one.
type dotxCall func(ctx context.Context, g *idem.Guard[string], db *sql.DB, d sqlstore.Dialect, table, key string, fn func(context.Context, *sql.Tx) (string, error)) (string, error)

func TestDoTxLinearizable(t *testing.T) {
	for _, d := range []sqlstore.Dialect{sqlstore.Postgres, sqlstore.MySQL, sqlstore.SQLite} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			illegal := 0
			for range *dotxHistories {
				if !dotxHistory(t, d, rand.Uint64(), realDoTx) {
					illegal++
				}
			}
			if illegal > 0 {
				t.Errorf("%d of %d DoTx histories illegal", illegal, *dotxHistories)
			}
		})
	}
}

// TestDoTxLinearizableBroken (flag -lin.dotx.broken) runs the histories
// through a DoTx that reads the key's row, runs fn and writes the row,
// in one transaction without a lock, and expects the checks to find one
// illegal.
func TestDoTxLinearizableBroken(t *testing.T) {
	if !*dotxBroken {
		t.Skip("-lin.dotx.broken not set")
	}
	found := 0
	for range *dotxHistories {
		if !dotxHistory(t, sqlstore.Postgres, rand.Uint64(), brokenDoTx) {
			found++
		}
	}
	if found == 0 {
		t.Error("no history of the lock-free DoTx was found illegal")
	}
}

func realDoTx(ctx context.Context, g *idem.Guard[string], _ *sql.DB, _ sqlstore.Dialect, _, key string, fn func(context.Context, *sql.Tx) (string, error)) (string, error) {
	return sqlstore.DoTx(ctx, g, key, fn)
}

// brokenDoTx checks the key in its own table, runs fn and records the key,
// in one transaction with nothing that orders two callers.
func brokenDoTx(ctx context.Context, _ *idem.Guard[string], db *sql.DB, _ sqlstore.Dialect, table, key string, fn func(context.Context, *sql.Tx) (string, error)) (string, error) {
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+table+"_naive (k TEXT, v TEXT)"); err != nil {
		return "", err
	}
	var v string
	err := db.QueryRowContext(ctx, "SELECT v FROM "+table+"_naive WHERE k = $1", key).Scan(&v)
	if err == nil {
		return v, nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback() }()
	if v, err = fn(ctx, tx); err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+"_naive (k, v) VALUES ($1, $2)", key, v); err != nil {
		return "", err
	}
	return v, tx.Commit()
}

// dotxHistory runs one history and reports whether it is legal.
func dotxHistory(t *testing.T, d sqlstore.Dialect, seed uint64, call dotxCall) bool {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, seed>>1))
	var (
		s  *sqlstore.Store
		db *sql.DB
	)
	if d == sqlstore.SQLite {
		var err error
		db, err = sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "idem.db")+"?"+sqlstore.SQLiteDSNParams)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		s = openSQLOn(t, db, d).(*sqlstore.Store)
	} else {
		db = sqlDB(t, d)
		s = openSQLOn(t, db, d).(*sqlstore.Store)
	}
	side := "idem_dotx_" + randHex(6)
	if _, err := db.Exec("CREATE TABLE " + side + " (k VARCHAR(200) NOT NULL, v VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + side)
		_, _ = db.Exec("DROP TABLE IF EXISTS " + side + "_naive")
	})
	insert := "INSERT INTO " + side + " (k, v) VALUES ($1, $2)"
	if d == sqlstore.MySQL {
		insert = "INSERT INTO " + side + " (k, v) VALUES (?, ?)"
	}
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const clients, calls = 8, 12
	began := time.Now()
	var (
		mu     sync.Mutex
		ops    []porcupine.Operation
		killed int
		runs   int // fn runs
		wg     sync.WaitGroup
	)
	for c := range clients {
		policy := idem.Return
		if rnd.IntN(2) == 0 {
			policy = idem.Wait
		}
		g, err := idem.New[string](s, idem.OnDuplicate(policy), idem.WithTakeoverAfter(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		plan := make([][2]int, calls) // key, fault
		for i := range plan {
			plan[i] = [2]int{rnd.IntN(len(keys)), rnd.IntN(10)}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, p := range plan {
				key, fault := keys[p[0]], p[1]
				value := fmt.Sprintf("c%d-%d", c, i)
				fn := func(ctx context.Context, tx *sql.Tx) (string, error) {
					mu.Lock()
					runs++
					mu.Unlock()
					if _, err := tx.ExecContext(ctx, insert, key, value); err != nil {
						return "", err
					}
					switch {
					case fault == 0:
						return "", errors.New("fn failed after its insert")
					case fault == 1:
						panic("fn panicked after its insert")
					case fault == 2 && d != sqlstore.SQLite:
						if killSession(ctx, db, d, tx) {
							mu.Lock()
							killed++
							mu.Unlock()
						}
					case fault <= 6:
						time.Sleep(time.Duration(fault) * 4 * time.Millisecond)
					}
					return value, nil
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				start := time.Since(began).Nanoseconds()
				v, err := protect(func() (string, error) { return call(ctx, g, db, d, side, key, fn) })
				end := time.Since(began).Nanoseconds()
				cancel()
				mu.Lock()
				ops = append(ops, porcupine.Operation{ClientId: c, Input: key, Output: dotxOut{OK: err == nil, Value: v}, Call: start, Return: end})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res, _ := porcupine.CheckOperationsVerbose(dotxModel, ops, checkTimeout)
	linearizable := res != porcupine.Illegal // Unknown (the check timed out) is logged, not failed
	if res == porcupine.Unknown {
		t.Logf("%s seed %d: porcupine did not finish within %v", d, seed, checkTimeout)
	}
	rowsOK := true

	rows := map[string][]string{}
	r, err := db.Query("SELECT k, v FROM " + side)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var k, v string
		if err := r.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		rows[k] = append(rows[k], v)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	returned := map[string]string{}
	for _, op := range ops {
		if out := op.Output.(dotxOut); out.OK {
			returned[op.Input.(string)] = out.Value
		}
	}
	for _, k := range keys {
		switch got := rows[k]; {
		case len(got) > 1:
			t.Logf("%s seed %d: key %s has %d rows %v: fn's writes committed more than once", d, seed, k, len(got), got)
			rowsOK = false
		case returned[k] != "" && (len(got) == 0 || got[0] != returned[k]):
			t.Logf("%s seed %d: key %s returned %q, its rows are %v", d, seed, k, returned[k], got)
			rowsOK = false
		}
	}
	ok := 0
	for _, op := range ops {
		if op.Output.(dotxOut).OK {
			ok++
		}
	}
	t.Logf("%s seed %d: %d DoTx calls on %d keys, %d runs of fn (%d returned a value, %d sessions killed inside fn): porcupine %s, rows %s",
		d, seed, len(ops), len(keys), runs, ok, killed, legality(linearizable), legality(rowsOK))
	return linearizable && rowsOK
}

func legality(ok bool) string {
	if ok {
		return "legal"
	}
	return "ILLEGAL"
}

// protect calls f, turning a panic into an error.
func protect(f func() (string, error)) (v string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// killSession ends the session tx runs on, from another connection of db,
// and reports whether it did.
func killSession(ctx context.Context, db *sql.DB, d sqlstore.Dialect, tx *sql.Tx) bool {
	var id int64
	q, kill := "SELECT pg_backend_pid()", "SELECT pg_terminate_backend(%d)"
	if d == sqlstore.MySQL {
		q, kill = "SELECT CONNECTION_ID()", "KILL %d"
	}
	if err := tx.QueryRowContext(ctx, q).Scan(&id); err != nil {
		return false
	}
	_, err := db.ExecContext(ctx, fmt.Sprintf(kill, id))
	return err == nil
}
