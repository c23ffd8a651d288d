package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
)

type withChan struct {
	Name  string
	Items []struct {
		ID   int
		Done chan bool
	}
}

type withSkipped struct {
	Name   string
	Done   chan bool `json:"-"`
	notify func()
	Amount float64
}

var _ = withSkipped{notify: func() {}}

type selfEncoding struct{ ch chan int }

var _ = selfEncoding{ch: nil}

func (selfEncoding) MarshalJSON() ([]byte, error) { return []byte(`"x"`), nil }
func (*selfEncoding) UnmarshalJSON([]byte) error  { return nil }

type node struct {
	Next *node
	Val  complex64
}

type inner struct{ Hook func() }

type embedsInner struct {
	ID int
	inner
}

// TestNewRefusesUnencodableResult: with the default JSON codec, New
// refuses a result type that can never be encoded (a channel, a function,
// a complex number, anywhere encoding/json would reach), naming the path
// to it; a type whose bad parts JSON skips or that encodes itself is
// accepted, and so is any type under a custom codec.
func TestNewRefusesUnencodableResult(t *testing.T) {
	s := mustMem()
	check := func(name string, newGuard func(...idem.Option) error, path string) {
		t.Helper()
		err := newGuard()
		if path == "" {
			if err != nil {
				t.Errorf("%s: %v, want accepted", name, err)
			}
			return
		}
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
			return
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v does not name %s", name, err, path)
		}
	}
	check("chan int", func(o ...idem.Option) error { _, err := idem.New[chan int](s, o...); return err }, "result type chan int cannot be encoded by the JSON codec: the type itself")
	check("func", func(o ...idem.Option) error { _, err := idem.New[func() int](s, o...); return err }, "result type func() int cannot be encoded")
	check("complex128", func(o ...idem.Option) error { _, err := idem.New[complex128](s, o...); return err }, "result type complex128 cannot be encoded")
	check("nested chan", func(o ...idem.Option) error { _, err := idem.New[*withChan](s, o...); return err }, "idem_test.withChan.Items[].Done is chan bool")
	check("map value", func(o ...idem.Option) error { _, err := idem.New[map[string][]func()](s, o...); return err }, "[][] is func()")
	check("map key", func(o ...idem.Option) error { _, err := idem.New[map[float64]int](s, o...); return err }, "[key] is float64")
	check("cycle", func(o ...idem.Option) error { _, err := idem.New[node](s, o...); return err }, "idem_test.node.Val is complex64")
	check("embedded unexported struct", func(o ...idem.Option) error { _, err := idem.New[embedsInner](s, o...); return err }, "idem_test.embedsInner.inner.Hook is func()")
	check("skipped fields", func(o ...idem.Option) error { _, err := idem.New[withSkipped](s, o...); return err }, "")
	check("MarshalJSON", func(o ...idem.Option) error { _, err := idem.New[selfEncoding](s, o...); return err }, "")
	check("interface", func(o ...idem.Option) error { _, err := idem.New[any](s, o...); return err }, "")
	check("map with int keys", func(o ...idem.Option) error { _, err := idem.New[map[int][]*string](s, o...); return err }, "")
	check("custom codec", func(o ...idem.Option) error {
		_, err := idem.New[chan int](s, idem.WithCodec(gobLikeCodec{}))
		return err
	}, "")
}

// gobLikeCodec stands for a codec that may encode anything.
type gobLikeCodec struct{}

func (gobLikeCodec) Marshal(any) ([]byte, error) { return []byte{}, nil }
func (gobLikeCodec) Unmarshal([]byte, any) error { return nil }

// TestUnencodableValueIsVisible: a result the codec fails on at run time
// (NaN under JSON) still answers its first caller, the duplicate gets
// ErrResultUnavailable, and the failed recording is an
// EventResultUnavailable to the Observer and a warning to the logger.
func TestUnencodableValueIsVisible(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context) (float64, error) { return math.NaN(), nil }

	var mu sync.Mutex
	var seen []idem.Event
	obs := idem.Observer(func(_ context.Context, e idem.Event) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, e)
	})
	g, err := idem.New[float64](mustMem(), idem.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	v, err := g.Do(ctx, "nan", fn)
	if err != nil || !math.IsNaN(v) {
		t.Fatalf("first call: %v, %v; want NaN, nil", v, err)
	}
	if _, err := g.Do(ctx, "nan", fn); !errors.Is(err, idem.ErrResultUnavailable) {
		t.Fatalf("duplicate: %v, want ErrResultUnavailable", err)
	}
	mu.Lock()
	found := false
	for _, e := range seen {
		if e.Kind == idem.EventResultUnavailable && e.Err != nil && strings.Contains(e.Err.Error(), "NaN") {
			found = true
		}
	}
	mu.Unlock()
	if !found {
		t.Errorf("no EventResultUnavailable with the encoding error among %v", seen)
	}

	var buf bytes.Buffer
	var bmu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &bmu}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	gl, err := idem.New[float64](mustMem(), idem.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gl.Do(ctx, "nan", fn); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		bmu.Lock()
		out := buf.String()
		bmu.Unlock()
		if strings.Contains(out, "level=WARN") && strings.Contains(out, "result_unavailable") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning logged: %q", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
