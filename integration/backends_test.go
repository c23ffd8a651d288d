package integration

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem/internal/dynamotest"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/redis/go-redis/v9"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// storageKey returns a key shaped like the ones a Guard passes.
func storageKey() string { return storekit.StorageKeyPrefix + randHex(32) }

// backend opens one store on its real server (a fresh table, prefix or
// directory) for a test. Every store keeps its default clock: its server's
// where it has one, the host's otherwise. A store that cleans up after
// itself (cleans) is opened with retention 0: a released record may be
// removed at once, by its background clean-up, its writes (memstore) and
// the history's purging client.
type backend struct {
	name   string
	open   func(t testing.TB) storekit.Store
	cleans bool
}

var backends = []backend{
	{name: "memstore", open: openMem, cleans: true},
	{name: "filestore", open: openFile, cleans: true},
	{name: "redis", open: openRedis},
	{name: "valkey", open: openValkey},
	{name: "valkey-cluster", open: openValkeyCluster},
	{name: "postgres", open: openPostgres, cleans: true},
	{name: "mysql", open: openMySQL, cleans: true},
	{name: "mysql-procedure", open: openMySQLProcedure, cleans: true},
	{name: "dynamodb", open: openDynamo},
	{name: "nats", open: openNATS, cleans: true},
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openMem(t testing.TB) storekit.Store {
	t.Helper()
	s, err := memstore.New(memstore.WithRetention(0))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openFile(t testing.TB) storekit.Store {
	t.Helper()
	s, err := filestore.New(t.TempDir(), filestore.WithoutSync(), filestore.WithRetention(0))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openRedis opens a redisstore on the test Redis 7.0, whose SET has no
// IFEQ: the store completes fresh claims with lua/set_ifeq.lua (once it has
// read the server's clock, in the background, at its first completion).
// ifeqSets counts those completions for the store.
func openRedis(t testing.TB) storekit.Store {
	t.Helper()
	return openIfEq(t, redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 16}))
}

// openValkey opens a redisstore on the test Valkey 8.1, whose SET has
// IFEQ: the store completes fresh claims with SET ... IFEQ (once it has
// read the server's version and clock, in the background, at its first
// completion). ifeqSets counts those completions for the store.
func openValkey(t testing.TB) storekit.Store {
	t.Helper()
	return openIfEq(t, redis.NewClient(&redis.Options{Addr: testenv.Lookup(t, "IDEM_VALKEY_ADDR", "valkey 8.1"), PoolSize: 16}))
}

// openValkeyCluster is openValkey on the test Valkey 8.1 Cluster.
func openValkeyCluster(t testing.TB) storekit.Store {
	t.Helper()
	addrs := strings.Split(testenv.Lookup(t, "IDEM_VALKEY_CLUSTER", "valkey 8.1 cluster"), ",")
	return openIfEq(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 16}))
}

// openIfEq opens a redisstore on c, counting the conditional completions
// (SET ... IFEQ, or lua/set_ifeq.lua where SET has no IFEQ) c sends in
// ifeqSets.
func openIfEq(t testing.TB, c redis.UniversalClient) storekit.Store {
	t.Helper()
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(ctxT(t)).Err(); err != nil {
		testenv.Missing(t, "redis ping: "+err.Error())
	}
	h := &ifeqCounter{}
	c.AddHook(h)
	s, err := redisstore.New(c, redisstore.WithPrefix("lin"+randHex(6)+":"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ifeqMu.Lock()
	ifeqSets[s] = &h.n
	ifeqMu.Unlock()
	return s
}

var (
	ifeqMu   sync.Mutex
	ifeqSets = map[storekit.Store]*atomic.Int64{}
)

// ifeqUsed returns how many conditional completions the client of s
// (opened by openIfEq) has sent; ok is false for any other store.
func ifeqUsed(s storekit.Store) (n int64, ok bool) {
	ifeqMu.Lock()
	defer ifeqMu.Unlock()
	c, ok := ifeqSets[s]
	if !ok {
		return 0, false
	}
	return c.Load(), true
}

// ifeqCounter is a go-redis hook counting the conditional completions: SET
// commands with IFEQ, and runs of lua/set_ifeq.lua.
type ifeqCounter struct{ n atomic.Int64 }

// setIfEq is the source of redisstore's lua/set_ifeq.lua and its SHA1.
var setIfEq = sync.OnceValues(func() (src, sha string) {
	b, err := os.ReadFile("../stores/redisstore/lua/set_ifeq.lua")
	if err != nil {
		panic(err)
	}
	sum := sha1.Sum(b)
	return string(b), hex.EncodeToString(sum[:])
})

func (h *ifeqCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ifeqCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		src, sha := setIfEq()
		switch name := strings.ToLower(cmd.Name()); {
		case name == "set" && len(args) > 3:
			if a, ok := args[3].(string); ok && strings.EqualFold(a, "ifeq") {
				h.n.Add(1)
			}
		case name == "evalsha" && len(args) > 1 && args[1] == sha, name == "eval" && len(args) > 1 && args[1] == src:
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *ifeqCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

var (
	sqlMu  sync.Mutex
	sqlDBs = map[sqlstore.Dialect]*sql.DB{}
)

// sqlDB is one pool per dialect for the whole test process.
func sqlDB(t testing.TB, d sqlstore.Dialect) *sql.DB {
	t.Helper()
	driver, source := "pgx", ""
	if d == sqlstore.Postgres {
		source = testenv.PostgresDSN(t)
	} else {
		driver, source = "mysql", testenv.MySQLDSN(t)
	}
	sqlMu.Lock()
	defer sqlMu.Unlock()
	if db := sqlDBs[d]; db != nil {
		return db
	}
	db, err := sql.Open(driver, source)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctxT(t)); err != nil {
		_ = db.Close()
		testenv.Missing(t, d.String()+" ping: "+err.Error())
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	sqlDBs[d] = db
	return db
}

func openSQL(t testing.TB, d sqlstore.Dialect) storekit.Store {
	t.Helper()
	return openSQLOn(t, sqlDB(t, d), d)
}

// openSQLOn opens a store of dialect d on a table of its own in db, with
// retention 0 unless opts say otherwise.
func openSQLOn(t testing.TB, db *sql.DB, d sqlstore.Dialect, opts ...sqlstore.Option) storekit.Store {
	t.Helper()
	table := "idem_lin_" + randHex(6)
	s, err := sqlstore.New(db, d, append([]sqlstore.Option{sqlstore.WithTable(table), sqlstore.WithRetention(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_, _ = db.Exec("DROP TABLE IF EXISTS " + table)
		if d == sqlstore.MySQL {
			_, _ = db.Exec("DROP PROCEDURE IF EXISTS " + table + "_claim_v2") // Migrate's claim procedure
		}
	})
	return s
}

func openPostgres(t testing.TB) storekit.Store {
	t.Helper()
	return openSQL(t, sqlstore.Postgres)
}

func openMySQL(t testing.TB) storekit.Store {
	t.Helper()
	return openSQL(t, sqlstore.MySQL)
}

// dynamoTable is the table the tests of this package share; every store
// gets its own key prefix.
const dynamoTable = "idem_integration_test"

var (
	dynamoOnce   sync.Once
	dynamoClient *dynamodb.Client
	dynamoErr    error
)

func openDynamo(t testing.TB) storekit.Store {
	t.Helper()
	endpoint := testenv.DynamoDBEndpoint(t)
	dynamoOnce.Do(func() {
		dynamoClient = dynamotest.NewLocalClient(endpoint)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dynamoErr = dynamostore.CreateTable(ctx, dynamoClient, dynamoTable)
	})
	if dynamoErr != nil {
		testenv.Missing(t, "DynamoDB Local: create table: "+dynamoErr.Error())
	}
	s, err := dynamostore.New(dynamoClient, dynamoTable,
		dynamostore.WithKeyPrefix("lin"+randHex(6)+"#"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
