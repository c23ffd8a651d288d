package otelidem_test

import (
	"context"
	"fmt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/otelidem"
	"github.com/idem-go/idem/stores/memstore"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func ExampleNewObserver() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader() // in production: a Prometheus or OTLP exporter
	obs, err := otelidem.NewObserver(
		otelidem.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		otelidem.WithStoreName("memory"),
	)
	if err != nil {
		panic(err)
	}
	store, _ := memstore.New() // no options: cannot fail
	g, err := idem.New[string](store, idem.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	for range 3 {
		_, _ = g.Do(ctx, "order-1", func(context.Context) (string, error) { return "shipped", nil })
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != otelidem.MetricEvents {
			continue
		}
		counts := map[string]int64{}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			kind, _ := dp.Attributes.Value(otelidem.AttrEvent)
			counts[kind.AsString()] = dp.Value
		}
		fmt.Println("claims:", counts["claim"], "hits:", counts["hit"])
	}
	// Output: claims: 1 hits: 2
}
