// Package childstore opens the store a test's child process serves from,
// named by a spec its parent passes down: "file:<dir>" (a filestore in dir)
// or "redis:<addr>" (a redisstore on the Redis at addr).
package childstore

import (
	"fmt"
	"strings"

	"github.com/idem-go/idem/storekit"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/redisstore"
)

// Open returns the store spec names.
func Open(spec string) (storekit.Store, error) {
	switch kind, arg, _ := strings.Cut(spec, ":"); kind {
	case "file":
		return filestore.New(arg)
	case "redis":
		return redisstore.New(redis.NewClient(&redis.Options{Addr: arg, PoolSize: 32}))
	}
	return nil, fmt.Errorf("unknown store %q", spec)
}
