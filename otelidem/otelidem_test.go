package otelidem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/otelidem"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

const (
	rawKey     = "customer-4711-secret"
	rawPayload = "card-4242424242424242"
)

func TestObserverMetricsAndSpanEvents(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))

	obs, err := otelidem.NewObserver(otelidem.WithMeterProvider(mp), otelidem.WithStoreName("memory"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.New[int](mustMem(), idem.WithObserver(obs), idem.WithNamespace("tenant-1", "invoices.create"),
		idem.OnFailure(idem.Lock))
	if err != nil {
		t.Fatal(err)
	}
	sctx, span := tp.Tracer("test").Start(ctx, "request")
	fn := func(context.Context) (int, error) { time.Sleep(2 * time.Millisecond); return 1, nil }
	if _, err := g.Do(sctx, rawKey, fn, idem.Payload(rawPayload)); err != nil { // claim, complete
		t.Fatal(err)
	}
	if _, err := g.Do(sctx, rawKey, fn, idem.Payload(rawPayload)); err != nil { // hit
		t.Fatal(err)
	}
	if _, err := g.Do(sctx, rawKey, fn, idem.Payload("other")); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Fatal(err)
	}
	fail := func(context.Context) (int, error) { return 0, errors.New("declined " + rawPayload) }
	if _, err := g.Do(sctx, rawKey+"-2", fail); err == nil { // claim, failure
		t.Fatal("no error")
	}
	if _, err := g.Do(sctx, rawKey+"-2", fail); !errors.Is(err, idem.ErrPreviousFailure) {
		t.Fatal(err)
	}
	span.End()

	// Metrics, read back through the manual reader.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	fnCount := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelidem.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch m.Name {
			case otelidem.MetricEvents:
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok || !sum.IsMonotonic {
					t.Fatalf("%s is %T, want a monotonic sum", m.Name, m.Data)
				}
				for _, dp := range sum.DataPoints {
					checkAttrs(t, dp.Attributes)
					ev, _ := dp.Attributes.Value(otelidem.AttrEvent)
					counts[ev.AsString()] += dp.Value
				}
			case otelidem.MetricFnDuration:
				h := m.Data.(metricdata.Histogram[float64])
				for _, dp := range h.DataPoints {
					checkAttrs(t, dp.Attributes)
					ev, _ := dp.Attributes.Value(otelidem.AttrEvent)
					fnCount[ev.AsString()] += dp.Count
					if ev.AsString() == "complete" && dp.Sum < 0.002 {
						t.Errorf("fn duration sum %v < 2ms", dp.Sum)
					}
				}
			}
		}
	}
	want := map[string]int64{"claim": 2, "complete": 1, "hit": 1, "payload_mismatch": 1, "failure": 1, "previous_failure": 1}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("idem.events{idem.event=%q} = %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
	if fnCount["complete"] != 1 || fnCount["failure"] != 1 {
		t.Errorf("fn duration counts %v, want one complete and one failure", fnCount)
	}

	// Span events, read back through the in-memory exporter.
	got := spans.GetSpans()
	if len(got) != 1 {
		t.Fatalf("%d spans", len(got))
	}
	var names []string
	for _, ev := range got[0].Events {
		names = append(names, ev.Name)
		set := attribute.NewSet(ev.Attributes...)
		checkAttrs(t, set)
		if a, ok := set.Value(otelidem.AttrAttempt); !ok || a.AsInt64() != 1 {
			t.Errorf("event %s: attempt %v, %v", ev.Name, a.AsInt64(), ok)
		}
	}
	wantNames := []string{"idem.claim", "idem.complete", "idem.hit", "idem.payload_mismatch", "idem.claim", "idem.failure", "idem.previous_failure"}
	if strings.Join(names, ",") != strings.Join(wantNames, ",") {
		t.Errorf("span events %v, want %v", names, wantNames)
	}
}

// checkAttrs checks the scope and store attributes are there and that no
// attribute carries the caller's key or payload.
func checkAttrs(t *testing.T, set attribute.Set) {
	t.Helper()
	if v, _ := set.Value(otelidem.AttrScope); v.AsString() != "invoices.create" {
		t.Errorf("scope attribute %q", v.AsString())
	}
	if v, _ := set.Value(otelidem.AttrStore); v.AsString() != "memory" {
		t.Errorf("store attribute %q", v.AsString())
	}
	for _, kv := range set.ToSlice() {
		s := kv.Value.String()
		if strings.Contains(s, "customer") || strings.Contains(s, "4242") {
			t.Errorf("attribute %s = %q carries the caller's key or payload", kv.Key, s)
		}
	}
}

func TestObserverWaitDuration(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	obs, err := otelidem.NewObserver(otelidem.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), otelidem.WithoutSpanEvents())
	if err != nil {
		t.Fatal(err)
	}
	store := mustMem()
	owner, _ := idem.New[int](store)
	g, err := idem.New[int](store, idem.WithObserver(obs), idem.OnDuplicate(idem.Wait))
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = owner.Do(ctx, "k", func(context.Context) (int, error) { close(started); <-release; return 1, nil })
	}()
	<-started
	go func() { time.Sleep(20 * time.Millisecond); close(release) }()
	if v, err := g.Do(ctx, "k", func(context.Context) (int, error) { return 0, errors.New("ran") }); err != nil || v != 1 {
		t.Fatal(v, err)
	}
	<-done
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == otelidem.MetricWaitDuration {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					n += dp.Count
					if dp.Sum <= 0 {
						t.Errorf("wait sum %v", dp.Sum)
					}
					if _, ok := dp.Attributes.Value(otelidem.AttrStore); ok {
						t.Error("store attribute set without WithStoreName")
					}
				}
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d wait durations recorded, want 1", n)
	}
}

func TestNewObserverInvalidOptions(t *testing.T) {
	for name, opt := range map[string]otelidem.Option{
		"nil provider": otelidem.WithMeterProvider(nil),
		"empty store":  otelidem.WithStoreName(""),
		"nil option":   nil,
	} {
		if _, err := otelidem.NewObserver(opt); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := otelidem.NewObserver(); err != nil { // the global provider
		t.Fatal(err)
	}
}
