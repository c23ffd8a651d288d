// Command grpc-payments is a small gRPC payments service whose Create method
// is guarded by idemgrpc, and a client for it. See README.md for a
// walk-through.
//
//	grpc-payments serve [-addr 127.0.0.1:50051] [-dir DIR] [-delay 3s]
//	grpc-payments create -customer sk_test_alice [-key order-1001] -amount 4200 -currency EUR [-raw]
//	grpc-payments stats
package main

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative paymentspb/payments.proto

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/examples/grpc-payments/paymentspb"
	"github.com/idem-go/idem/idemgrpc"
	"github.com/idem-go/idem/stores/filestore"
)

const defaultAddr = "127.0.0.1:50051"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: grpc-payments serve|create|stats [flags]")
		os.Exit(2)
	}
	var err error
	if os.Args[1] == "serve" {
		err = serveMain(ctx, os.Args[2:])
	} else {
		err = clientMain(ctx, os.Args[1:], os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc-payments:", err)
		os.Exit(1)
	}
}

// config is the server's.
type config struct {
	addr  string
	dir   string
	delay time.Duration
	// gate, when set, is called with the key before a charge completes
	// (the README test holds one charge there).
	gate func(key string)
	// ready, when set, is called with the listening address.
	ready func(addr string)
}

func serveMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := config{}
	fs.StringVar(&c.addr, "addr", defaultAddr, "listen address")
	fs.StringVar(&c.dir, "dir", filepath.Join(os.TempDir(), "idem-grpc-payments"), "directory of the idempotency records")
	fs.DurationVar(&c.delay, "delay", 3*time.Second, "how long a charge takes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return run(ctx, c)
}

// payments is the service. A charge is a counter and a log line; a real
// one would call a payment provider with the fencing token.
type payments struct {
	paymentspb.UnimplementedPaymentsServer
	cfg      config
	charges  atomic.Int64
	inFlight atomic.Int64
}

// customer is the caller: the bearer token of the authorization metadata.
func customer(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && tok != "" {
			return tok, nil
		}
	}
	return "", errors.New("no bearer token")
}

func (p *payments) Create(ctx context.Context, req *paymentspb.CreatePaymentRequest) (*paymentspb.Payment, error) {
	var bad []*errdetails.BadRequest_FieldViolation
	if req.GetAmount() <= 0 {
		bad = append(bad, &errdetails.BadRequest_FieldViolation{Field: "amount", Description: "must be positive"})
	}
	if len(req.GetCurrency()) != 3 {
		bad = append(bad, &errdetails.BadRequest_FieldViolation{Field: "currency", Description: "must be an ISO 4217 code"})
	}
	if len(bad) > 0 {
		st, err := status.New(codes.InvalidArgument, "invalid payment").WithDetails(&errdetails.BadRequest{FieldViolations: bad})
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return nil, st.Err() // recorded: a retry gets the same answer
	}
	who, err := customer(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	if p.cfg.gate != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		p.cfg.gate(strings.Join(md.Get(idemgrpc.KeyMetadata), ","))
	}
	select {
	case <-time.After(p.cfg.delay):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err() // Canceled and DeadlineExceeded are not recorded
	}
	tok, _ := idem.FencingToken(ctx)
	var id [6]byte
	rand.Read(id[:])
	pay := &paymentspb.Payment{
		Id: "pay_" + hex.EncodeToString(id[:]), Customer: who, Amount: req.GetAmount(), Currency: req.GetCurrency(),
		FencingToken: tok, Created: time.Now().UTC().Format(time.RFC3339),
	}
	p.charges.Add(1)
	log.Printf("charged %s %d %s: %s (fencing token %d)", who, pay.Amount, pay.Currency, pay.Id, tok)
	// Recorded with the response, and replayed with it.
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-payment-id", pay.Id)); err != nil {
		return nil, err
	}
	return pay, nil
}

func (p *payments) Stats(context.Context, *paymentspb.StatsRequest) (*paymentspb.StatsReply, error) {
	return &paymentspb.StatsReply{Charges: p.charges.Load(), InFlight: p.inFlight.Load()}, nil
}

// run serves until ctx ends.
func run(ctx context.Context, c config) error {
	store, err := filestore.New(c.dir)
	if err != nil {
		return err
	}
	ic, err := idemgrpc.New(store,
		idemgrpc.WithPrincipal(customer), // keys are scoped per customer
		idemgrpc.WithMethods(paymentspb.Payments_Create_FullMethodName),
		idemgrpc.WithRequired(), // Create without a key: InvalidArgument
		idemgrpc.WithGuard(idem.WithNamespace("grpc-payments", "payments.create")),
	)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()))
	paymentspb.RegisterPaymentsServer(srv, &payments{cfg: c})
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	log.Printf("grpc-payments on %s, records in %s", ln.Addr(), c.dir)
	if c.ready != nil {
		c.ready(ln.Addr().String())
	}
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	return srv.Serve(ln)
}

// retryPolicy is the client's service config: grpc-go retries a call whose
// connection failed, with the same idempotency key on every attempt.
const retryPolicy = `{"methodConfig":[{"name":[{"service":"payments.v1.Payments"}],"retryPolicy":{
	"maxAttempts":5,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
	"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// clientMain runs one client command and prints its outcome to w.
func clientMain(ctx context.Context, args []string, w io.Writer) error {
	if len(args) == 0 {
		return errors.New("no command")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	addr := fs.String("addr", defaultAddr, "server address")
	who := fs.String("customer", "", "the customer's API key (sent as a bearer token)")
	key := fs.String("key", "", "idempotency key (default: a fresh one for this call, from the client interceptor)")
	amount := fs.Int64("amount", 0, "amount, in the currency's minor unit")
	currency := fs.String("currency", "", "ISO 4217 currency")
	raw := fs.Bool("raw", false, "no client interceptor (a call without -key then has no key)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryPolicy),
	}
	if !*raw {
		opts = append(opts, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	}
	cc, err := grpc.NewClient(*addr, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	client := paymentspb.NewPaymentsClient(cc)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	switch args[0] {
	case "stats":
		s, err := client.Stats(ctx, &paymentspb.StatsRequest{})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "charges: %d, in flight: %d\n", s.GetCharges(), s.GetInFlight())
		return nil
	case "create":
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
	if *who != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*who)
	}
	if *key != "" {
		ctx = idemgrpc.WithKey(ctx, *key)
	}
	var header metadata.MD
	pay, err := client.Create(ctx, &paymentspb.CreatePaymentRequest{Amount: *amount, Currency: *currency}, grpc.Header(&header))
	st := status.Convert(err)
	fmt.Fprintln(w, st.Code())
	printMetadata(w, header)
	if err != nil {
		fmt.Fprintln(w, "message:", st.Message())
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					fmt.Fprintf(w, "field %s: %s\n", v.GetField(), v.GetDescription())
				}
			}
		}
		return nil
	}
	fmt.Fprintf(w, "payment %s: %d %s for %s, fencing token %d, created %s\n",
		pay.GetId(), pay.GetAmount(), pay.GetCurrency(), pay.GetCustomer(), pay.GetFencingToken(), pay.GetCreated())
	return nil
}

// printMetadata prints the header metadata the service set (not the
// transport's content-type), sorted.
func printMetadata(w io.Writer, md metadata.MD) {
	var keys []string
	for k := range md {
		if k != "content-type" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "header %s: %s\n", k, strings.Join(md[k], ", "))
	}
}
