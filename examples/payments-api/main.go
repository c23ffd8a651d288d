// Command payments-api is a small payments API whose POST /payments is
// guarded by idemhttp: a client that retries a charge with the same
// Idempotency-Key is charged once and gets the first response back. Records
// live in a file store, so they survive a restart and are shared by every
// process started on the same directory.
//
//	go run ./examples/payments-api                      # 127.0.0.1:8080, records in $TMPDIR/idem-payments-api
//	go run ./examples/payments-api -addr :9000 -dir ./data -delay 5s
//
// See README.md for a walk-through with curl.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/stores/filestore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "idem-payments-api"), "file store directory")
	delay := flag.Duration("delay", 3*time.Second, "how long a charge takes (long enough to see a 409)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{addr: *addr, dir: *dir, delay: *delay, ready: func(a string) {
		log.Printf("payments-api listening on http://%s (records in %s)", a, *dir)
	}}
	if err := run(ctx, cfg); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	addr, dir string
	delay     time.Duration    // how long a charge takes
	gate      func(key string) // if set, a charge calls it with its Idempotency-Key first (tests hold charges there)
	ready     func(addr string)
}

// Payment is what POST /payments creates and returns.
type Payment struct {
	ID           string `json:"id"`
	Customer     string `json:"customer"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	FencingToken int64  `json:"fencing_token"`
	Created      string `json:"created"`
}

type api struct {
	cfg      config
	charges  atomic.Int64 // side effects performed
	inFlight atomic.Int64
}

// customer names the caller from "Authorization: Bearer <api key>": the
// idempotency keys of two API keys never meet.
func customer(r *http.Request) (string, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", errors.New("missing bearer token")
	}
	return tok, nil
}

func (a *api) createPayment(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Amount <= 0 || len(in.Currency) != 3 {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintln(w, `{"type":"about:blank","title":"Bad Request","status":400,"detail":"want {\"amount\": a positive integer, \"currency\": a 3-letter code}"}`)
		return
	}
	cust, _ := customer(r) // the middleware has checked it
	a.inFlight.Add(1)
	defer a.inFlight.Add(-1)
	// The charge: the slow call to the card network that must not happen twice.
	t := time.NewTimer(a.cfg.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	if a.cfg.gate != nil {
		a.cfg.gate(r.Header.Get("Idempotency-Key"))
	}
	n := a.charges.Add(1)
	tok, _ := idem.FencingToken(r.Context())
	var id [6]byte
	_, _ = rand.Read(id[:])
	p := Payment{ID: "pay_" + hex.EncodeToString(id[:]), Customer: cust, Amount: in.Amount, Currency: strings.ToUpper(in.Currency),
		FencingToken: tok, Created: time.Now().UTC().Format(time.RFC3339)}
	log.Printf("charged %s %d %s (charge #%d)", p.Customer, p.Amount, p.Currency, n)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+p.ID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(p)
}

func (a *api) stats(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"charges\":%d,\"in_flight\":%d}\n", a.charges.Load(), a.inFlight.Load())
}

func run(ctx context.Context, cfg config) error {
	store, err := filestore.New(cfg.dir)
	if err != nil {
		return err
	}
	m, err := idemhttp.New(store,
		idemhttp.WithPrincipal(customer),
		idemhttp.WithRequired(),
		idemhttp.WithGuard(
			idem.WithNamespace("payments-api", "payments.create"),
			idem.WithTTL(24*time.Hour),
		),
	)
	if err != nil {
		return err
	}
	a := &api{cfg: cfg}
	mux := http.NewServeMux()
	guarded := m.Handler(http.HandlerFunc(a.createPayment))
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		if _, err := customer(r); err != nil {
			// The middleware answers 401; RFC 9110 wants it to say how to
			// authenticate, which only the API knows.
			w.Header().Set("WWW-Authenticate", `Bearer realm="payments-api"`)
		}
		guarded.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /stats", a.stats)

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	if cfg.ready != nil {
		cfg.ready(ln.Addr().String())
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
