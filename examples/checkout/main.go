// Command checkout shows idem's steps surviving a crash in the middle of a
// guarded function: the card is charged once, the receipt e-mailed once and
// the order row written once, although the process running the checkout is
// killed half-way.
//
// A checkout is two external calls, each a recorded step, and a database
// write that commits together with its step's record:
//
//	charge, _ := idem.Step(ctx, "charge", ...)  // POST /charges, Idempotency-Key: idem.StepKey
//	_, _ = idem.Step(ctx, "email", ...)         // POST /emails
//	_, _ = sqlstore.StepTx(ctx, "order", ...)   // INSERT INTO orders, in the step record's transaction
//
// No transaction is open while the provider is called. The program plays
// three stories, each with two worker processes on one sqlstore table. The
// first worker is SIGKILLed: after the charge step returned (its result
// recorded), inside the charge step (the provider charged, the step's
// result not yet recorded), or inside the order step (its row inserted,
// not committed). The second worker takes the call over once the first
// one's claim is known dead or has gone stale: it gets the recorded charge without charging
// again, or runs the charge step again with the same Idempotency-Key, which
// the payment provider (a fake here, honouring the header as real
// providers do) answers with the charge it already made; the order row
// the first worker did not commit is gone with its transaction. Every
// time: charged once, e-mailed once, one order row. A worker whose claim
// lapses tries the checkout again, as a queue's redelivery would.
//
// The second worker says how long after the first one died it took the
// checkout over: on PostgreSQL at once (the store knows the first worker's
// session is gone), on SQLite once the claim has gone stale (takeoverAfter,
// 2s here; SQLite cannot tell a dead process).
//
// The database is a SQLite file in a temporary directory (modernc.org/sqlite,
// no cgo, no server); -dsn takes a PostgreSQL DSN instead:
//
//	go run ./examples/checkout
//	go run ./examples/checkout -dsn postgres://user:pass@localhost:5432/db
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// Receipt is what a checkout returns, and what replays get back.
type Receipt struct {
	Order  string `json:"order"`
	Charge string `json:"charge"`
	Email  string `json:"email"`
}

// takeoverAfter is short so that the stories play in seconds; the heartbeat
// keeps a live worker's claim from going stale meanwhile.
const takeoverAfter = 2 * time.Second

// why says when a worker takes a dead worker's checkout over, by database.
var why = map[sqlstore.Dialect]string{
	sqlstore.Postgres: "its death known at once: its session is gone",
	sqlstore.SQLite:   "once its claim went stale: SQLite cannot tell a dead process",
}

// attempts bounds how often a worker tries a checkout whose claim lapsed.
const attempts = 3

func main() {
	dsn := flag.String("dsn", "", "a PostgreSQL DSN (postgres://...); default: a SQLite file in a temporary directory")
	worker := flag.Bool("worker", false, "run as a worker")
	tables := flag.String("tables", "", "worker: the prefix of the tables")
	provider := flag.String("provider", "", "worker: the payment and mail provider's URL")
	order := flag.String("order", "", "worker: the order to check out")
	crash := flag.String("crash", "", "worker: kill this process \"after-charge\", \"in-charge\" or \"in-order\"")
	died := flag.Int64("died", 0, "worker: when the previous worker died (Unix nanoseconds)")
	flag.Parse()
	if *worker {
		if err := work(*dsn, *tables, *provider, *order, *crash, time.Unix(0, *died)); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := run(os.Stdout, *dsn); err != nil {
		log.Fatal(err)
	}
}

// open opens the database: PostgreSQL for a postgres:// DSN, else the
// SQLite file path, with a busy timeout and WAL so that the workers share
// it.
func open(dsn string) (*sql.DB, sqlstore.Dialect, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		db, err := sql.Open("pgx", dsn)
		return db, sqlstore.Postgres, err
	}
	db, err := sql.Open("sqlite", "file:"+dsn+"?"+sqlstore.SQLiteDSNParams)
	return db, sqlstore.SQLite, err
}

// countOrders is how many rows the orders table holds for order.
func countOrders(ctx context.Context, db *sql.DB, tables, order string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+tables+"_orders WHERE order_id = $1", order).Scan(&n)
	return n, err
}

// run plays the stories and checks what the provider saw and the orders
// table holds.
func run(out *os.File, dsn string) error {
	p := newProvider()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	url := "http://" + l.Addr().String()

	if dsn == "" {
		dir, err := os.MkdirTemp("", "idem-checkout-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dsn = filepath.Join(dir, "checkout.db")
	}
	// Tables of this run's own, so that a PostgreSQL database can hold
	// many runs.
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	tables := "checkout_" + hex.EncodeToString(rnd[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, d, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlstore.New(db, d, sqlstore.WithTable(tables+"_keys"))
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+tables+"_orders (order_id TEXT NOT NULL, charge TEXT NOT NULL, email TEXT NOT NULL)"); err != nil {
		return err
	}
	if d == sqlstore.Postgres {
		defer func() {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + tables + "_orders")
			_, _ = db.Exec("DROP TABLE IF EXISTS " + tables + "_keys")
		}()
	}
	fmt.Fprintf(out, "database: %s\n", d)

	for _, story := range []struct{ order, crash, what string }{
		{"order-1001", "after-charge", "killed after the charge step returned"},
		{"order-1002", "in-charge", "killed inside the charge step, after the provider charged"},
		{"order-1003", "in-order", "killed inside the order step, its row inserted, not committed"},
	} {
		fmt.Fprintf(out, "%s: worker 1 %s\n", story.order, story.what)
		if err := worker(dsn, tables, url, story.order, story.crash).Run(); err == nil {
			return fmt.Errorf("%s: worker 1 was not killed", story.order)
		}
		died := time.Now()
		cmd := worker(dsn, tables, url, story.order, "", "-died", strconv.FormatInt(died.UnixNano(), 10))
		b, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("%s: worker 2: %w", story.order, err)
		}
		fmt.Fprint(out, string(b))
		charges, emails := p.count(story.order)
		rows, err := countOrders(ctx, db, tables, story.order)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: the provider made %d charge(s) and sent %d e-mail(s); the orders table holds %d row(s)\n",
			story.order, charges, emails, rows)
		if charges != 1 || emails != 1 || rows != 1 {
			return fmt.Errorf("%s: %d charges, %d e-mails, %d order rows; want 1, 1 and 1", story.order, charges, emails, rows)
		}
	}
	fmt.Fprintln(out, "charged once, e-mailed once, one order row")
	return nil
}

func worker(dsn, tables, url, order, crash string, extra ...string) *exec.Cmd {
	args := append([]string{"-worker", "-dsn", dsn, "-tables", tables, "-provider", url, "-order", order, "-crash", crash}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stderr = os.Stderr
	return cmd
}

// work is one worker process: it checks the order out under a Guard.
// died is when the previous worker died.
func work(dsn, tables, url, order, crash string, died time.Time) error {
	db, d, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlstore.New(db, d, sqlstore.WithTable(tables+"_keys"))
	if err != nil {
		return err
	}
	defer store.Close()
	g, err := idem.New[Receipt](store,
		idem.OnDuplicate(idem.Wait), // the second worker waits for the first one's claim to be free
		idem.WithTakeoverAfter(takeoverAfter), idem.WithHeartbeat(takeoverAfter/4))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	checkout := func(ctx context.Context) (Receipt, error) {
		var charged bool // this attempt ran the charge step
		token, _ := idem.FencingToken(ctx)
		if token > 1 {
			fmt.Printf("%s: worker 2 took the checkout over (fencing token %d) %v after worker 1 died (%s)\n",
				order, token, time.Since(died).Round(time.Millisecond), why[d])
		}
		charge, err := idem.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			key, _ := idem.StepKey(ctx)
			id, err := post(ctx, url+"/charges", order, key)
			if err == nil && crash == "in-charge" {
				die()
			}
			charged = true
			return id, err
		})
		if err != nil {
			return Receipt{}, err
		}
		if crash == "after-charge" {
			die()
		}
		if !charged {
			fmt.Printf("%s: worker 2 got the recorded charge %s without charging\n", order, charge)
		} else if token > 1 {
			fmt.Printf("%s: worker 2 ran the charge step again with the same Idempotency-Key: the provider answered %s\n", order, charge)
		}
		email, err := idem.Step(ctx, "email", func(ctx context.Context) (string, error) {
			key, _ := idem.StepKey(ctx)
			return post(ctx, url+"/emails", order, key)
		})
		if err != nil {
			return Receipt{}, err
		}
		// The order row commits with the step's record, or not at all.
		_, err = sqlstore.StepTx(ctx, "order", func(ctx context.Context, tx *sql.Tx) (bool, error) {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+tables+"_orders (order_id, charge, email) VALUES ($1, $2, $3)",
				order, charge, email)
			if err == nil && crash == "in-order" {
				die()
			}
			return true, err
		})
		if err != nil {
			return Receipt{}, err
		}
		return Receipt{Order: order, Charge: charge, Email: email}, nil
	}
	// A claim that could not be refreshed in time (a stalled disk, a
	// paused process) cuts fn off with an error matching
	// idem.ErrLostOwnership and is released. Trying again is safe, as a
	// queue's redelivery would be: the recorded steps are not run again, and
	// a step cut off mid-way runs again under its same StepKey.
	var r Receipt
	for i := 1; ; i++ {
		r, err = g.Do(ctx, order, checkout)
		if err == nil || i == attempts || !errors.Is(err, idem.ErrLostOwnership) {
			break
		}
		log.Printf("%s: attempt %d: %v; trying again", order, i, err)
	}
	if err != nil {
		return err
	}
	fmt.Printf("%s: receipt %s, e-mail %s\n", order, r.Charge, r.Email)
	return nil
}

// die is a crash: the process ends at once, recording nothing more.
func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// post asks the provider for a charge or an e-mail, under key.
func post(ctx context.Context, url, order, key string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"order":"`+order+`"}`))
	if err != nil {
		return "", err
	}
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var v struct{ ID string }
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || res.StatusCode != http.StatusOK {
		return "", errors.Join(fmt.Errorf("provider: %s", res.Status), err)
	}
	return v.ID, nil
}

// provider is a fake payment and mail provider that honours
// Idempotency-Key as real ones do: a request with a key it has seen gets
// the first answer again, and nothing is charged or sent twice.
type provider struct {
	mu     sync.Mutex
	byKey  map[string]string
	counts map[string][2]int // order -> charges, e-mails
}

func newProvider() *provider {
	return &provider{byKey: map[string]string{}, counts: map[string][2]int{}}
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct{ Order string }
	key := r.Header.Get("Idempotency-Key")
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || key == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	id, seen := p.byKey[r.URL.Path+" "+key]
	if !seen {
		c := p.counts[body.Order]
		if r.URL.Path == "/charges" {
			c[0]++
			id = fmt.Sprintf("ch_%s_%d", body.Order, c[0])
		} else {
			c[1]++
			id = fmt.Sprintf("em_%s_%d", body.Order, c[1])
		}
		p.counts[body.Order] = c
		p.byKey[r.URL.Path+" "+key] = id
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"id": id})
}

func (p *provider) count(order string) (charges, emails int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.counts[order]
	return c[0], c[1]
}
