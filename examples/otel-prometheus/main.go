// Command otel-prometheus shows idem's OpenTelemetry metrics exported in the
// Prometheus text format: it makes a few guarded calls on an in-memory store
// (fresh calls, replays, a stored failure), then serves /metrics through the
// OpenTelemetry Prometheus exporter until interrupted.
//
//	go run ./examples/otel-prometheus -addr localhost:9464
//	curl -s localhost:9464/metrics | grep ^idem_
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/otelidem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	addr := flag.String("addr", "localhost:9464", "address to serve /metrics on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, func(a net.Addr) { fmt.Printf("serving http://%s/metrics\n", a) }); err != nil {
		log.Fatal(err)
	}
}

// run sets up the metrics, makes the guarded calls and serves /metrics on
// addr until ctx ends; ready is told the address once it listens.
func run(ctx context.Context, addr string, ready func(net.Addr)) error {
	handler, shutdown, err := setup(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.Background()) }()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ready(ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// setup wires idem's Observer to a meter provider read by the Prometheus
// exporter, makes a few guarded calls, and returns the /metrics handler.
func setup(ctx context.Context) (http.Handler, func(context.Context) error, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	obs, err := otelidem.NewObserver(otelidem.WithMeterProvider(mp), otelidem.WithStoreName("memory"))
	if err != nil {
		return nil, nil, err
	}
	store, err := memstore.New()
	if err != nil {
		return nil, nil, err
	}
	g, err := idem.New[string](store,
		idem.WithObserver(obs),
		idem.WithNamespace("shop", "orders.ship"),
		idem.OnFailure(idem.Lock),
		idem.WithLocalCache(1000, time.Minute),
	)
	if err != nil {
		return nil, nil, err
	}
	ship := func(ctx context.Context) (string, error) {
		time.Sleep(3 * time.Millisecond) // the side effect
		return "shipped", nil
	}
	for _, order := range []string{"order-1", "order-2", "order-1", "order-1", "order-2"} {
		if _, err := g.Do(ctx, order, ship); err != nil {
			return nil, nil, err
		}
	}
	declined := func(context.Context) (string, error) { return "", errors.New("address incomplete") }
	for range 2 { // the failure is stored, then replayed
		if _, err := g.Do(ctx, "order-3", declined); err == nil {
			return nil, nil, errors.New("order-3 did not fail")
		}
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), mp.Shutdown, nil
}
