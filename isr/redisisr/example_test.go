package redisisr_test

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/redisisr"
)

// A table on Redis: every item of a cache key is a hash under one hash
// tag, so Redis Cluster keeps them in one slot. Nothing here contacts
// Redis until the coordinator is used.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	table, err := redisisr.NewTable(client, redisisr.WithPrefix("site1:"))
	if err != nil {
		panic(err)
	}
	if _, err := isr.NewCoordinator(table); err != nil {
		panic(err)
	}
	pk, err := isr.PK("", "/blog/hello")
	if err != nil {
		panic(err)
	}
	fmt.Println(table.Key(pk, isr.SKMeta))
	// Output: site1:{CACHE#5c614a9a9b467a45cd4929b8f1d98cf0132e965716db0fc81afb0f5bb0b96864}:META
}
