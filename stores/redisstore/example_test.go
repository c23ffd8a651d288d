package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
)

// ExampleNew guards a charge with a Redis store that every server of the
// service shares. It needs a Redis server, so it has no Output comment: go
// test compiles it but does not run it; TestExampleNew runs the same steps
// against the Redis of the test environment.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithPrefix("billing:"))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	// Optional, at start-up: load the scripts and read the server's version
	// and clock, so the first calls already take the shortest commands.
	if err := store.LoadScripts(context.Background()); err != nil {
		panic(err)
	}
	g, err := idem.New[string](store, idem.OnDuplicate(idem.Wait))
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context) (string, error) {
		return "ch_1", nil // the side effect: a card charged
	}
	first, err := g.Do(context.Background(), "order-7", charge)
	if err != nil {
		panic(err)
	}
	retry, err := g.Do(context.Background(), "order-7", charge) // a replay: charge does not run
	fmt.Println(first, retry, err)
}

// TestExampleNew runs ExampleNew's steps on the test Redis: the retry is
// a replay of the first call's result and runs nothing.
func TestExampleNew(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithPrefix("example-"+prefix()))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, err := idem.New[string](store, idem.OnDuplicate(idem.Wait))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	charge := func(ctx context.Context) (string, error) {
		runs++
		return "ch_1", nil
	}
	first, err := g.Do(context.Background(), "order-7", charge)
	if err != nil {
		t.Fatal(err)
	}
	retry, err := g.Do(context.Background(), "order-7", charge)
	if first != "ch_1" || retry != "ch_1" || err != nil || runs != 1 {
		t.Fatalf("first %q, retry %q, err %v, runs %d; want ch_1 twice, nil, one run", first, retry, err, runs)
	}
}

// ExampleWithReplicaAck guards a call on a Redis master with replicas:
// each claim and completion waits, in the same round trip, until one
// replica holds it, or fails (a claim without running fn). It needs a
// replicated Redis, so it has no Output comment.
func ExampleWithReplicaAck() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"127.0.0.1:26379"},
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithReplicaAck(1, 100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	g, err := idem.New[string](store)
	if err != nil {
		panic(err)
	}
	id, err := g.Do(context.Background(), "order-7", func(ctx context.Context) (string, error) {
		return "ch_1", nil
	})
	switch {
	case errors.Is(err, redisstore.ErrNotReplicated):
		fmt.Println("claim not replicated in time; fn did not run")
	case errors.Is(err, storekit.ErrNotRecorded):
		fmt.Println(id, "(ran, but the outcome may not survive a failover)")
	case err != nil:
		panic(err)
	default:
		fmt.Println(id)
	}
}
