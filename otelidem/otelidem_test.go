package otelidem_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/otelidem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
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
	tel := newTelemetry()
	obs, err := otelidem.NewObserver(otelidem.WithMeterProvider(tel.mp), otelidem.WithStoreName("memory"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.New[int](mustMem(), idem.WithObserver(obs), idem.WithNamespace("tenant-1", "invoices.create"),
		idem.OnFailure(idem.Lock))
	if err != nil {
		t.Fatal(err)
	}
	sctx, span := tel.tp.Tracer("test").Start(ctx, "request")
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

	checkEventMetrics(t, tel.reader)
	checkSpanEventsAttempt1(t, tel.spans)
}

// checkEventMetrics checks the event counts and fn durations, read back
// through the manual reader, of TestObserverMetricsAndSpanEvents' calls.
func checkEventMetrics(t *testing.T, reader *sdkmetric.ManualReader) {
	t.Helper()
	ctx := context.Background()
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
}

// checkSpanEventsAttempt1 checks the span events of
// TestObserverMetricsAndSpanEvents' calls, all under attempt 1.
func checkSpanEventsAttempt1(t *testing.T, spans *tracetest.InMemoryExporter) {
	t.Helper()
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

// telemetry is an in-memory meter and tracer provider pair.
type telemetry struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
}

func newTelemetry() telemetry {
	var tel telemetry
	tel.reader = sdkmetric.NewManualReader()
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tel.spans = tracetest.NewInMemoryExporter()
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tel.spans))
	return tel
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
		if strings.Contains(s, rawKey) || strings.Contains(s, rawPayload) {
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
	_, err := otelidem.NewObserver(otelidem.WithMeterProvider(nil), nil, otelidem.WithStoreName(""))
	storetest.CheckOptionErrors(t, err, "otelidem.WithMeterProvider", "otelidem.NewObserver", "otelidem.WithStoreName")
	if _, err := otelidem.NewObserver(); err != nil { // the global provider
		t.Fatal(err)
	}
}

// TestObserverTakeoverAndLostOwnership: a stale claim taken over shows as a
// takeover (attempt 2 on its span event) for the new owner, and as
// lost_ownership, with how long fn ran, for the old one, whose next
// heartbeat is refused. The store's clock is fake, so the claim goes stale
// when the test moves it.
func TestObserverTakeoverAndLostOwnership(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry()
	obs, err := otelidem.NewObserver(otelidem.WithMeterProvider(tel.mp), otelidem.WithStoreName("memory"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	store := mustMem(memstore.WithClock(clock))
	const takeover = time.Minute
	opts := []idem.Option{idem.WithObserver(obs), idem.WithNamespace("tenant-1", "invoices.create"),
		idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(10 * time.Millisecond)} // heartbeats in real time
	oldOwner, err := idem.New[int](store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	newOwner, err := idem.New[int](store, opts...)
	if err != nil {
		t.Fatal(err)
	}

	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		sctx, span := tel.tp.Tracer("test").Start(ctx, "old")
		_, err := oldOwner.Do(sctx, rawKey, func(ctx context.Context) (int, error) {
			close(started)
			<-ctx.Done() // cancelled when a heartbeat finds the claim lost
			return 1, nil
		}, idem.Payload(rawPayload))
		span.End()
		done <- err
	}()
	<-started
	// A live claim turns a duplicate away.
	if _, err := newOwner.Do(ctx, rawKey, func(context.Context) (int, error) { return 2, nil }, idem.Payload(rawPayload)); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("duplicate of a live claim: %v", err)
	}
	turnedAway := takeOverStale(t, tel.tp, newOwner, func() { advance(takeover + time.Second) })
	if err := <-done; !errors.Is(err, idem.ErrLostOwnership) {
		t.Fatalf("old owner: %v, want ErrLostOwnership", err)
	}

	checkTakeoverMetrics(t, tel.reader, turnedAway)
	checkTakeoverSpanEvents(t, tel.spans)
}

// takeOverStale has newOwner take the claim over under a span named "new",
// advancing the store's clock past the threshold before each try, and
// returns how many times it was turned away, counting the try made before.
func takeOverStale(t *testing.T, tp *sdktrace.TracerProvider, newOwner *idem.Guard[int], advance func()) int {
	t.Helper()
	ctx := context.Background()
	// Move the clock past the threshold. The old owner keeps heartbeating
	// with the moved clock, so a heartbeat landing between the move and the
	// claim makes the claim live again: move and try again.
	sctx, span := tp.Tracer("test").Start(ctx, "new")
	defer span.End()
	turnedAway := 1
	for {
		advance()
		v, err := newOwner.Do(sctx, rawKey, func(context.Context) (int, error) { return 2, nil }, idem.Payload(rawPayload))
		if errors.Is(err, idem.ErrInProgress) && turnedAway < 100 {
			turnedAway++
			continue
		}
		if err != nil || v != 2 {
			t.Fatalf("takeover: %v, %v", v, err)
		}
		break
	}
	return turnedAway
}

// checkTakeoverMetrics checks the event counts and fn durations of a
// takeover: a claim turned away turnedAway times, then taken over, and the
// old owner's lost_ownership with how long its fn ran.
func checkTakeoverMetrics(t *testing.T, reader *sdkmetric.ManualReader, turnedAway int) {
	t.Helper()
	ctx := context.Background()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	fnCount := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case otelidem.MetricEvents:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					checkAttrs(t, dp.Attributes)
					ev, _ := dp.Attributes.Value(otelidem.AttrEvent)
					counts[ev.AsString()] += dp.Value
				}
			case otelidem.MetricFnDuration:
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					checkAttrs(t, dp.Attributes)
					ev, _ := dp.Attributes.Value(otelidem.AttrEvent)
					fnCount[ev.AsString()] += dp.Count
					if ev.AsString() == "lost_ownership" && dp.Sum <= 0 {
						t.Errorf("lost_ownership fn duration sum %v", dp.Sum)
					}
				}
			}
		}
	}
	want := map[string]int64{"claim": 1, "in_progress": int64(turnedAway), "takeover": 1, "complete": 1, "lost_ownership": 1}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("idem.events{idem.event=%q} = %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
	if fnCount["lost_ownership"] != 1 || fnCount["complete"] != 1 {
		t.Errorf("fn duration counts %v, want one complete and one lost_ownership", fnCount)
	}
}

// checkTakeoverSpanEvents checks the attempts on the span events of both
// owners.
func checkTakeoverSpanEvents(t *testing.T, spans *tracetest.InMemoryExporter) {
	t.Helper()
	// Span events: the old owner's span saw attempt 1 throughout, the new
	// owner's the takeover under attempt 2.
	attempts := map[string]map[string]int64{} // span -> event -> attempt
	for _, s := range spans.GetSpans() {
		attempts[s.Name] = map[string]int64{}
		for _, ev := range s.Events {
			set := attribute.NewSet(ev.Attributes...)
			checkAttrs(t, set)
			a, _ := set.Value(otelidem.AttrAttempt)
			attempts[s.Name][ev.Name] = a.AsInt64()
		}
	}
	if a := attempts["new"]; a["idem.takeover"] != 2 || a["idem.complete"] != 2 {
		t.Errorf("new owner's span events %v, want takeover and complete under attempt 2", a)
	}
	if a := attempts["old"]; a["idem.claim"] != 1 || a["idem.lost_ownership"] != 1 {
		t.Errorf("old owner's span events %v, want claim and lost_ownership under attempt 1", a)
	}
}

// TestObserverOwnerGone: a takeover of a claim whose owner was known gone
// is counted apart from one of a stale claim (idem.owner_gone=true), and
// its span event says so.
func TestObserverOwnerGone(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry()
	obs, err := otelidem.NewObserver(otelidem.WithMeterProvider(tel.mp))
	if err != nil {
		t.Fatal(err)
	}
	sctx, span := tel.tp.Tracer("test").Start(ctx, "call")
	obs(sctx, idem.Event{Kind: idem.EventTakeover, StorageKey: "idem:k", Attempt: 2, OwnerGone: true})
	obs(sctx, idem.Event{Kind: idem.EventTakeover, StorageKey: "idem:k", Attempt: 3})
	span.End()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	gone, stale := int64(0), int64(0)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != otelidem.MetricEvents {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, ok := dp.Attributes.Value(otelidem.AttrOwnerGone); ok && v.AsBool() {
					gone += dp.Value
				} else {
					stale += dp.Value
				}
			}
		}
	}
	if gone != 1 || stale != 1 {
		t.Fatalf("takeovers counted with idem.owner_gone: %d, without: %d; want 1 and 1", gone, stale)
	}
	var marked int
	for _, s := range tel.spans.GetSpans() {
		for _, e := range s.Events {
			for _, a := range e.Attributes {
				if a.Key == otelidem.AttrOwnerGone && a.Value.AsBool() {
					marked++
				}
			}
		}
	}
	if marked != 1 {
		t.Fatalf("%d span events carry idem.owner_gone; want 1", marked)
	}
}
