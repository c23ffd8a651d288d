// Package otelidem turns the events of an idem Guard into OpenTelemetry
// metrics and span events.
//
//	obs, err := otelidem.NewObserver(otelidem.WithStoreName("redis"))
//	g, err := idem.New[Invoice](store, idem.WithObserver(obs))
//
// Metrics (from the meter provider given with WithMeterProvider, or the
// global one):
//
//   - idem.events (counter, {event}): every Guard event, by idem.event (the
//     kind: claim, hit, takeover, failure, ...), idem.store and idem.scope.
//     Hits over hits plus claims is the hit rate; step_run and
//     step_replayed count the recorded steps (idem.Step) run and replayed.
//   - idem.fn.duration (histogram, seconds): how long fn ran, by idem.event
//     (complete, failure or lost_ownership), idem.store and idem.scope.
//   - idem.wait.duration (histogram, seconds): how long a duplicate waited
//     under OnDuplicate(idem.Wait), by idem.event (wait_done when the key was
//     decided, in_progress when the caller's context ended first).
//
// Each event is also added to the span in the caller's context, if that span
// is recording, as an event named "idem.<kind>" with the attributes
// idem.event, idem.attempt, idem.scope, idem.store and, for events that
// carry one, idem.duration (seconds: how long fn ran or the wait lasted;
// for heartbeat and lapse events the lapse margin, as idem.Event
// documents). A takeover of a claim whose owner was known gone (its
// process died) carries idem.owner_gone=true, on the metric too.
// WithoutSpanEvents turns that off.
//
// Attributes never carry the caller's key, the payload or an error message
// (which may quote either), nor the storage key; the claim's attempt number
// goes on span events only, since as a metric attribute it would make a new
// series per attempt count. Prometheus users export these metrics with the
// OpenTelemetry Prometheus exporter (go.opentelemetry.io/otel/exporters/prometheus);
// see examples/otel-prometheus.
package otelidem

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/idem-go/idem/otelidem"

// Attribute keys.
const (
	AttrEvent    = attribute.Key("idem.event")
	AttrStore    = attribute.Key("idem.store")
	AttrScope    = attribute.Key("idem.scope")
	AttrAttempt  = attribute.Key("idem.attempt")
	AttrDuration = attribute.Key("idem.duration")
	// AttrOwnerGone is set, true, on a takeover (and a step run) of a
	// claim whose owner was known gone rather than stale (Event.OwnerGone).
	AttrOwnerGone = attribute.Key("idem.owner_gone")
)

// Metric names.
const (
	MetricEvents       = "idem.events"
	MetricFnDuration   = "idem.fn.duration"
	MetricWaitDuration = "idem.wait.duration"
)

// durationBuckets are the histogram bucket boundaries, in seconds: from a
// millisecond to a minute.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// ErrInvalidOption is matched by the errors of options NewObserver rejects.
// It is idem.ErrInvalidOption, so one errors.Is check serves both.
var ErrInvalidOption = idem.ErrInvalidOption

// Option configures NewObserver.
type Option func(*config)

type config struct {
	mp         metric.MeterProvider
	spanEvents bool
	store      string
	errs       []error
}

func (c *config) invalid(option, reason string) {
	c.errs = append(c.errs, &storekit.OptionError{Option: "otelidem." + option, Reason: reason})
}

// WithMeterProvider sets the meter provider. Default: the global one
// (otel.GetMeterProvider), as it is when NewObserver is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.invalid("WithMeterProvider", "meter provider is nil")
		}
		c.mp = mp
	}
}

// WithoutSpanEvents stops the Observer adding events to the caller's span;
// it records metrics only.
func WithoutSpanEvents() Option {
	return func(c *config) { c.spanEvents = false }
}

// WithStoreName sets the idem.store attribute, naming the store the Guard
// uses ("redis", "dynamodb", ...). Without it the attribute is left out.
func WithStoreName(name string) Option {
	return func(c *config) {
		if name == "" {
			c.invalid("WithStoreName", "name is empty")
		}
		c.store = name
	}
}

// NewObserver returns an idem.Observer that records the metrics and span
// events described in the package documentation. It fails with an error
// matching idem.ErrInvalidOption for an invalid option, or with the meter's
// error if an instrument cannot be created.
func NewObserver(opts ...Option) (idem.Observer, error) {
	c := config{spanEvents: true}
	for _, o := range opts {
		if o == nil {
			c.invalid("NewObserver", "nil option")
			continue
		}
		o(&c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	meter := c.mp.Meter(ScopeName)
	events, err := meter.Int64Counter(MetricEvents,
		metric.WithDescription("Events of idem Guards, by kind (claim, hit, takeover, failure, ...)."),
		metric.WithUnit("{event}"))
	if err != nil {
		return nil, fmt.Errorf("otelidem: %s: %w", MetricEvents, err)
	}
	fnDur, err := meter.Float64Histogram(MetricFnDuration,
		metric.WithDescription("How long guarded functions ran, by outcome."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err != nil {
		return nil, fmt.Errorf("otelidem: %s: %w", MetricFnDuration, err)
	}
	waitDur, err := meter.Float64Histogram(MetricWaitDuration,
		metric.WithDescription("How long duplicates waited for a call in progress."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err != nil {
		return nil, fmt.Errorf("otelidem: %s: %w", MetricWaitDuration, err)
	}
	o := &observer{events: events, fnDur: fnDur, waitDur: waitDur, spanEvents: c.spanEvents, store: c.store}
	return o.Observe, nil
}

type observer struct {
	events     metric.Int64Counter
	fnDur      metric.Float64Histogram
	waitDur    metric.Float64Histogram
	spanEvents bool
	store      string
	sets       sync.Map // setKey -> metric.MeasurementOption
}

type setKey struct {
	kind  idem.EventKind
	scope string
	gone  bool
}

// attrs returns the metric attributes of an event kind and scope, built
// once per pair.
func (o *observer) attrs(kind idem.EventKind, scope string, gone bool) metric.MeasurementOption {
	k := setKey{kind, scope, gone}
	if v, ok := o.sets.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	kv := make([]attribute.KeyValue, 0, 4)
	kv = append(kv, AttrEvent.String(string(kind)))
	if gone {
		kv = append(kv, AttrOwnerGone.Bool(true))
	}
	if o.store != "" {
		kv = append(kv, AttrStore.String(o.store))
	}
	if scope != "" {
		kv = append(kv, AttrScope.String(scope))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	v, _ := o.sets.LoadOrStore(k, opt)
	return v.(metric.MeasurementOption)
}

// Observe is the idem.Observer New returns.
func (o *observer) Observe(ctx context.Context, e idem.Event) {
	set := o.attrs(e.Kind, e.Scope, e.OwnerGone)
	o.events.Add(ctx, 1, set)
	if e.Duration > 0 {
		switch e.Kind {
		case idem.EventComplete, idem.EventFailure, idem.EventLostOwnership:
			o.fnDur.Record(ctx, e.Duration.Seconds(), set)
		case idem.EventWaitDone, idem.EventInProgress:
			o.waitDur.Record(ctx, e.Duration.Seconds(), set)
		}
	}
	if !o.spanEvents {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	kv := make([]attribute.KeyValue, 0, 5)
	kv = append(kv, AttrEvent.String(string(e.Kind)))
	if e.Attempt > 0 {
		kv = append(kv, AttrAttempt.Int64(e.Attempt))
	}
	if e.Scope != "" {
		kv = append(kv, AttrScope.String(e.Scope))
	}
	if o.store != "" {
		kv = append(kv, AttrStore.String(o.store))
	}
	if e.Duration > 0 {
		kv = append(kv, AttrDuration.Float64(e.Duration.Seconds()))
	}
	if e.OwnerGone {
		kv = append(kv, AttrOwnerGone.Bool(true))
	}
	span.AddEvent("idem."+string(e.Kind), trace.WithAttributes(kv...))
}
