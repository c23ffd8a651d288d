package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}()

	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}

	events := families["idem_events_total"]
	if events == nil || events.GetType() != dto.MetricType_COUNTER {
		t.Fatalf("idem_events_total missing or not a counter (families: %v)", names(families))
	}
	got := map[string]float64{}
	// No series of any family names a caller's key.
	for name, f := range families {
		for _, m := range f.GetMetric() {
			for _, p := range m.GetLabel() {
				if strings.Contains(p.GetValue(), "order-") {
					t.Errorf("%s label %s=%q carries a caller's key", name, p.GetName(), p.GetValue())
				}
			}
		}
	}
	for _, m := range events.GetMetric() {
		l := labels(m)
		if l["idem_store"] != "memory" || l["idem_scope"] != "orders.ship" {
			t.Errorf("labels %v", l)
		}
		got[l["idem_event"]] += m.GetCounter().GetValue()
	}
	want := map[string]float64{"claim": 3, "complete": 2, "hit": 3, "failure": 1, "previous_failure": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("idem_events_total{idem_event=%q} = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	fn := families["idem_fn_duration_seconds"]
	if fn == nil || fn.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("idem_fn_duration_seconds missing or not a histogram (families: %v)", names(families))
	}
	var n uint64
	for _, m := range fn.GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	if n != 3 { // two shipments and one failure ran
		t.Errorf("fn duration samples %d, want 3", n)
	}
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func names(f map[string]*dto.MetricFamily) []string {
	var s []string
	for k := range f {
		s = append(s, k)
	}
	return s
}
