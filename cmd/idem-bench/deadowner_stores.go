package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/sqlstore"
)

// deadStore is one store of the dead-owner table: the environment variable
// with its server's address ("" for a local store), whether it knows at
// once that the process holding a claim is gone (storekit.Presence), and
// how to make a fresh namespace, open the store on it (in the measuring
// process and in every child) and remove it.
type deadStore struct {
	name     string
	env      string
	presence bool
	// newNS returns a fresh namespace: a directory, a table, a prefix, a
	// bucket.
	newNS func() (string, error)
	// open opens the store on ns; create makes what ns names first (only
	// the measuring process does, before any child starts).
	open func(ctx context.Context, addr, ns string, create bool) (storekit.Store, func(), error)
	// drop removes ns and what it holds.
	drop func(ctx context.Context, addr, ns string) error
}

// deadStores are the stores of the dead-owner table, in its order.
func deadStores() []deadStore {
	return []deadStore{
		{name: "filestore", presence: true, newNS: tempDir, open: openFilestore, drop: removeDir},
		sqlDeadStore("PostgreSQL", "IDEM_POSTGRES_DSN", "pgx", sqlstore.Postgres),
		sqlDeadStore("MariaDB", "IDEM_MYSQL_DSN", "mysql", sqlstore.MySQL),
		{name: "Redis", env: "IDEM_REDIS_ADDR", presence: true, newNS: redisPrefix, open: openRedis, drop: dropRedis},
		{name: "Redis Cluster", env: "IDEM_REDIS_CLUSTER", presence: true, newNS: redisPrefix, open: openRedis, drop: dropRedis},
		{name: "NATS", env: "IDEM_NATS_URL", presence: true, newNS: prefixed("idem_dead_"), open: openNATS, drop: dropNATS},
		{name: "DynamoDB", env: "IDEM_DYNAMODB_ENDPOINT", newNS: prefixed("idem_dead_"), open: openDynamo, drop: dropDynamo},
		{name: "SQLite", newNS: tempDir, open: openSQLite, drop: removeDir},
	}
}

func randName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func prefixed(p string) func() (string, error) {
	return func() (string, error) { return p + randName(), nil }
}

func redisPrefix() (string, error) { return "idem-dead-" + randName() + ":", nil }

func tempDir() (string, error) { return os.MkdirTemp("", "idem-dead-") }

func removeDir(_ context.Context, _, dir string) error { return os.RemoveAll(dir) }

func openFilestore(_ context.Context, _, dir string, _ bool) (storekit.Store, func(), error) {
	s, err := filestore.New(dir)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { _ = s.Close() }, nil
}

// sqlDeadStore is a store on a SQL server: ns is its table.
func sqlDeadStore(name, env, driver string, d sqlstore.Dialect) deadStore {
	return deadStore{
		name: name, env: env, presence: true, newNS: prefixed("idem_dead_"),
		open: func(ctx context.Context, dsn, table string, create bool) (storekit.Store, func(), error) {
			db, err := sql.Open(driver, dsn)
			if err != nil {
				return nil, nil, err
			}
			return openSQL(ctx, db, d, table, create)
		},
		drop: func(ctx context.Context, dsn, table string) error {
			db, err := sql.Open(driver, dsn)
			if err != nil {
				return err
			}
			defer db.Close()
			_, err = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table)
			return err
		},
	}
}

func openSQL(ctx context.Context, db *sql.DB, d sqlstore.Dialect, table string, create bool) (storekit.Store, func(), error) {
	s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	closeAll := func() { _ = s.Close(); _ = db.Close() }
	if create {
		if err := s.Migrate(ctx); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	return s, closeAll, nil
}

// openSQLite opens the SQLite file idem.db in dir.
func openSQLite(ctx context.Context, _, dir string, create bool) (storekit.Store, func(), error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "idem.db")+"?"+sqlstore.SQLiteDSNParams)
	if err != nil {
		return nil, nil, err
	}
	return openSQL(ctx, db, sqlstore.SQLite, "idem", create)
}

// redisClient is a client of addr: a Cluster when it lists several nodes
// (IDEM_REDIS_CLUSTER), else a standalone server.
func redisClient(addr string) redis.UniversalClient {
	redis.SetLogger(quietRedisLog{})
	if strings.Contains(addr, ",") {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addr, ",")})
	}
	return redis.NewClient(&redis.Options{Addr: addr})
}

// quietRedisLog drops go-redis's own log lines.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

func openRedis(_ context.Context, addr, prefix string, _ bool) (storekit.Store, func(), error) {
	c := redisClient(addr)
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return s, func() { _ = s.Close(); _ = c.Close() }, nil
}

// dropRedis deletes the keys under prefix, on every master of a Cluster.
func dropRedis(ctx context.Context, addr, prefix string) error {
	c := redisClient(addr)
	defer c.Close()
	del := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := n.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, del)
	}
	return del(ctx, c.(*redis.Client))
}

func openNATS(ctx context.Context, url, bucket string, _ bool) (storekit.Store, func(), error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	// CreateBucket is idempotent, and gives the store its presence.
	kv, err := natsstore.CreateBucket(ctx, js, bucket)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	s, err := natsstore.New(kv)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return s, func() { _ = s.Close(); nc.Close() }, nil
}

func dropNATS(ctx context.Context, url, bucket string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return js.DeleteKeyValue(ctx, bucket)
}

// dynamoClient is a client of a local DynamoDB endpoint (any credentials).
func dynamoClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "bench", SecretAccessKey: "bench"}, nil
		}),
	})
}

// openDynamo opens a store on the table ns, created first when create.
func openDynamo(ctx context.Context, endpoint, table string, create bool) (storekit.Store, func(), error) {
	c := dynamoClient(endpoint)
	if create {
		if err := dynamostore.CreateTable(ctx, c, table); err != nil {
			return nil, nil, err
		}
	}
	s, err := dynamostore.New(c, table)
	if err != nil {
		return nil, nil, err
	}
	return s, func() {}, nil
}

func dropDynamo(ctx context.Context, endpoint, table string) error {
	_, err := dynamoClient(endpoint).DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	return err
}

// hiddenStore is a store whose presence the Guard cannot see: it sends no
// owner with its claims, so a dead owner's claim waits for the takeover
// threshold, as it did before stores told dead owners apart.
type hiddenStore struct{ storekit.Store }

// hiddenWatcher is a hiddenStore that keeps the store's watch (a waiting
// duplicate is woken by a change of the record, as before).
type hiddenWatcher struct {
	storekit.Store
	storekit.Watcher
}

// hide returns s without its presence.
func hide(s storekit.Store) storekit.Store {
	if w, ok := s.(storekit.Watcher); ok {
		return hiddenWatcher{s, w}
	}
	return hiddenStore{s}
}
