package otelidem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/otelidem"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Steps run and replayed are counted as idem.events with idem.event
// step_run and step_replayed.
func TestObserverCountsSteps(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := otelidem.NewObserver(otelidem.WithMeterProvider(mp), otelidem.WithStoreName("memory"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.New[int](mustMem(), idem.WithObserver(obs), idem.WithNamespace("tenant-1", "invoices.create"))
	if err != nil {
		t.Fatal(err)
	}
	fail := true
	fn := func(ctx context.Context) (int, error) {
		a, err := idem.Step(ctx, "charge", func(context.Context) (int, error) { return 1, nil })
		if err != nil {
			return 0, err
		}
		if fail {
			return 0, errors.New("crash after the charge")
		}
		b, err := idem.Step(ctx, "email", func(context.Context) (int, error) { return 2, nil })
		return a + b, err
	}
	if _, err := g.Do(ctx, rawKey, fn); err == nil { // charge runs; released
		t.Fatal("no error")
	}
	fail = false
	if v, err := g.Do(ctx, rawKey, fn); err != nil || v != 3 { // charge replayed, email runs
		t.Fatalf("Do = %d, %v", v, err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != otelidem.MetricEvents {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				checkAttrs(t, dp.Attributes)
				ev, _ := dp.Attributes.Value(otelidem.AttrEvent)
				counts[ev.AsString()] += dp.Value
			}
		}
	}
	if counts["step_run"] != 2 || counts["step_replayed"] != 1 {
		t.Fatalf("step_run %d, step_replayed %d; want 2 and 1 (all: %v)", counts["step_run"], counts["step_replayed"], counts)
	}
}
