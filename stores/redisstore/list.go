package redisstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/redis/go-redis/v9"
)

var _ storekit.Lister = (*Store)(nil)

// listPage is how many keys one SCAN asks for (COUNT) and how many values
// one pipeline reads.
const listPage = 1000

// nodeClient is what Records needs from one server: SCAN and pipelines.
type nodeClient interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
	Pipeline() redis.Pipeliner
}

// Records implements storekit.Lister. Redis keeps no index of the store's
// keys: it scans the whole keyspace of every server (each master of a
// Cluster, each shard of a Ring, one after another) with SCAN MATCH
// <prefix>{*} COUNT 1000, and reads each page's values with GET and
// PEXPIRETIME in one pipeline. SCAN takes no lock and holds no key, so
// claims go on while it runs; memory holds one page. A client of another
// type than *redis.Client, *redis.Ring and *redis.ClusterClient (a wrapper)
// cannot be listed: the sequence yields an error.
func (s *Store) Records(ctx context.Context) iter.Seq2[*storekit.Record, error] {
	return func(yield func(*storekit.Record, error) bool) {
		nodes, err := s.listNodes(ctx)
		if err != nil {
			yield(nil, err)
			return
		}
		match := globEscape(s.prefix) + "{*}"
		for _, n := range nodes {
			if !s.listNode(ctx, n, match, yield) {
				return
			}
		}
	}
}

// listNodes returns the servers to scan.
func (s *Store) listNodes(ctx context.Context) ([]nodeClient, error) {
	var (
		mu    sync.Mutex
		nodes []nodeClient
	)
	add := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, c)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.Client:
		return []nodeClient{c}, nil
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, add)
	case *redis.Ring:
		err = c.ForEachShard(ctx, add)
	default:
		return nil, fmt.Errorf("redisstore: list: a client of type %T cannot be scanned (want *redis.Client, *redis.Ring or *redis.ClusterClient)", s.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: list: %w", err)
	}
	return nodes, nil
}

// listNode yields the live records of one server; false means stop.
func (s *Store) listNode(ctx context.Context, n nodeClient, match string, yield func(*storekit.Record, error) bool) bool {
	var cursor uint64
	for {
		keys, next, err := n.Scan(ctx, cursor, match, listPage).Result()
		if err != nil {
			yield(nil, fmt.Errorf("redisstore: list: scan: %w", err))
			return false
		}
		if len(keys) > 0 && !s.listPage(ctx, n, keys, yield) {
			return false
		}
		if next == 0 {
			return true
		}
		cursor = next
	}
}

// listPage reads and yields the records of one page of keys.
func (s *Store) listPage(ctx context.Context, n nodeClient, keys []string, yield func(*storekit.Record, error) bool) bool {
	p := n.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	exps := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		gets[i] = p.Get(ctx, k)
		exps[i] = p.PExpireTime(ctx, k)
	}
	if _, err := p.Exec(ctx); err != nil {
		// A server's reply error (redis.Nil for a key gone since the scan,
		// WRONGTYPE for another application's key) is the command's own;
		// any other error (the connection) ends the listing.
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			yield(nil, fmt.Errorf("redisstore: list: read: %w", err))
			return false
		}
	}
	now := time.Now().UnixMilli()
	for i, k := range keys {
		v, err := gets[i].Result()
		if err != nil {
			continue // removed since the scan, or not a string: not a record
		}
		pexpire := int64(-1)
		if d, err := exps[i].Result(); err == nil && d >= 0 {
			pexpire = d.Milliseconds()
		}
		key, ok := storedKey(v)
		if !ok {
			if !s.recordShaped(k) {
				continue // another application's key that the pattern matched
			}
			if !yield(nil, &storekit.CorruptRecordError{Key: k, Err: errors.New("not a record of this store's encoding")}) {
				return false
			}
			continue
		}
		r, err := decode(key, v, pexpire)
		if err != nil {
			if !yield(nil, err) {
				return false
			}
			continue
		}
		if s.Key(key) != k || !r.Live(now) {
			continue // another store's key under the prefix, or expired and kept for the retention
		}
		if !yield(r, nil) {
			return false
		}
	}
	return true
}

// recordShaped reports whether k is shaped like a record's Redis key of
// this store: the prefix and a 22-character digest as a hash tag.
func (s *Store) recordShaped(k string) bool {
	rest, ok := strings.CutPrefix(k, s.prefix)
	return ok && len(rest) == 24 && rest[0] == '{' && rest[23] == '}' && !strings.ContainsAny(rest[1:23], "{}")
}

// storedKey returns the storage key a stored value holds, without decoding
// the rest.
func storedKey(v string) (string, bool) {
	if len(v) < headerLen || v[:2] != magic {
		return "", false
	}
	var lens [3]int64
	for i, off := range []int{offNonceLen, offHashLen, offKeyLen} {
		n, ok := digits(v[off : off+smallWidth])
		if !ok {
			return "", false
		}
		lens[i] = n
	}
	at := int64(headerLen) + lens[0] + lens[1]
	if at+lens[2] > int64(len(v)) {
		return "", false
	}
	return v[at : at+lens[2]], true
}

// globEscape escapes the characters SCAN MATCH gives a meaning to.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
