package storekit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

// TestWatchers: Notify wakes every watch of its key and no other; stop and
// the end of the watch's context free a watch, which is then never woken;
// an ended context is refused.
func TestWatchers(t *testing.T) {
	var w storekit.Watchers
	ctx := context.Background()
	a, stopA, err := w.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	b, stopB, _ := w.Watch(ctx, "k")
	other, stopOther, _ := w.Watch(ctx, "other")
	defer stopOther()
	defer stopB()
	stopA()
	stopA() // harmless
	if n := w.Len("k"); n != 1 {
		t.Fatalf("%d watches of k after one stop, want 1", n)
	}
	w.Notify("k")
	select {
	case <-b:
	default:
		t.Fatal("Notify did not wake a watch of its key")
	}
	select {
	case <-a:
		t.Fatal("a stopped watch was woken")
	case <-other:
		t.Fatal("a watch of another key was woken")
	default:
	}
	if n := w.Len("k"); n != 0 {
		t.Fatalf("%d watches of k left after Notify", n)
	}

	cctx, cancel := context.WithCancel(ctx)
	c, _, _ := w.Watch(cctx, "k")
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for w.Len("k") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watch outlived its context")
		}
		time.Sleep(time.Millisecond)
	}
	w.Notify("k")
	select {
	case <-c:
		t.Fatal("a watch whose context ended was woken")
	default:
	}
	if _, _, err := w.Watch(cctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch with an ended context: %v", err)
	}
}

// TestWatchersNotifyAll: NotifyAll wakes the watches of every key and
// forgets them; a watch registered afterwards waits for the next change.
func TestWatchersNotifyAll(t *testing.T) {
	var w storekit.Watchers
	ctx := context.Background()
	a, stopA, _ := w.Watch(ctx, "a")
	b, stopB, _ := w.Watch(ctx, "b")
	defer stopA()
	defer stopB()
	w.NotifyAll()
	for name, c := range map[string]<-chan struct{}{"a": a, "b": b} {
		select {
		case <-c:
		default:
			t.Fatalf("NotifyAll did not wake the watch of %s", name)
		}
	}
	if n := w.Len("a") + w.Len("b"); n != 0 {
		t.Fatalf("%d watches left after NotifyAll", n)
	}
	later, stopLater, _ := w.Watch(ctx, "a")
	defer stopLater()
	select {
	case <-later:
		t.Fatal("a watch registered after NotifyAll was woken")
	default:
	}
}
