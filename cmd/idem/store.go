package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver (pure Go)

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/sqlstore"
)

// Store kinds.
const (
	kindFile     = "file"
	kindMem      = "mem"
	kindRedis    = "redis"
	kindDynamoDB = "dynamodb"
	kindSQL      = "sql"
)

// knownStoreKinds is what -store accepts, for messages.
const knownStoreKinds = "file:DIR, mem:[NAME], redis://, rediss://, redis-cluster://, dynamodb://TABLE, postgres://, mysql://, sqlite://PATH, nats://HOST:PORT/BUCKET"

// Default and DynamoDB limits of the captured standard output.
const (
	defaultMaxOutput  = 1 << 20
	dynamoMaxOutput   = 256 << 10
	dynamoItemLimitKB = 400
)

// openedStore is a store selected by -store, with what is needed to close
// it and to describe it.
type openedStore struct {
	storekit.Store
	kind  string
	desc  string // for messages: a directory, a host, a table; never a password
	file  *filestore.Store
	mem   *memstore.Store
	close func() error
	// absent is true for a file store whose directory does not exist,
	// opened by openExisting: an empty store stands in for it.
	absent bool
	// purge deletes the records expired for longer than grace (SQL).
	purge func(ctx context.Context, grace time.Duration) (int, error)
}

// Close releases the store's connections.
func (s *openedStore) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}

// memStores are the mem: stores of this process, by name, so that several
// invocations in one process (tests) share them.
var memStores = struct {
	sync.Mutex
	m map[string]*memstore.Store
}{m: map[string]*memstore.Store{}}

// defaultStoreDir is the file store used when -store and IDEM_STORE are
// both empty.
func defaultStoreDir() string {
	dir, err := os.UserCacheDir()
	if err != nil || dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "idem", "records")
}

// StoreConfigError says why a -store value cannot be used.
type StoreConfigError struct {
	Store  string
	Reason string
}

func (e *StoreConfigError) Error() string { return "-store " + e.Store + ": " + e.Reason }

// MissingError says that what a -store value names does not exist, and
// the parameter that would create it was not given: a NATS bucket without
// create=1, a SQLite database file without migrate=1. It is a mistake in
// the configuration (exit 78), as a SQL table that does not exist is.
type MissingError struct {
	Store string // the -store value, its password hidden
	What  string // what does not exist: "the JetStream KV bucket B"
	Param string // the URL parameter that creates it: "create", "migrate"
}

func (e *MissingError) Error() string { return "-store " + e.Store + ": " + e.What + " does not exist" }

// openStore opens the store named by spec, for a command that writes
// records (idem run): a file store's directory is created if it is
// missing. It does no network I/O except for dynamodb://...?create=1,
// which creates the table, and nats://, which connects.
func openStore(ctx context.Context, spec string) (*openedStore, error) {
	return open(ctx, spec, true)
}

// openExisting opens the store named by spec without creating anything: a
// file store whose directory does not exist is opened as an empty store
// (nothing was ever recorded there), and the directory is not made. The
// commands that read records, or change only records that exist (inspect,
// ls, stats, unlock, purge), open their store this way.
func openExisting(ctx context.Context, spec string) (*openedStore, error) {
	return open(ctx, spec, false)
}

func open(ctx context.Context, spec string, create bool) (*openedStore, error) {
	if spec == "" {
		spec = "file:" + defaultStoreDir()
	}
	scheme, rest, ok := strings.Cut(spec, ":")
	if !ok {
		return nil, &StoreConfigError{spec, "want one of " + knownStoreKinds}
	}
	switch strings.ToLower(scheme) {
	case "file":
		return openFile(spec, rest, create)
	case "mem":
		name := strings.TrimPrefix(rest, "//")
		memStores.Lock()
		defer memStores.Unlock()
		s, ok := memStores.m[name]
		if !ok {
			var err error
			if s, err = memstore.New(); err != nil {
				return nil, &StoreConfigError{spec, err.Error()}
			}
			memStores.m[name] = s
		}
		return &openedStore{Store: s, kind: kindMem, desc: "mem:" + name, mem: s}, nil
	case "redis", "rediss", "unix":
		return openRedis(spec, false)
	case "redis-cluster", "rediss-cluster":
		return openRedis(spec, true)
	case "dynamodb":
		return openDynamo(ctx, spec)
	case "postgres", "postgresql":
		return openSQL(ctx, spec, sqlstore.Postgres)
	case "mysql":
		return openSQL(ctx, spec, sqlstore.MySQL)
	case "sqlite":
		return openSQL(ctx, spec, sqlstore.SQLite)
	case "nats":
		return openNATS(ctx, spec)
	}
	return nil, &StoreConfigError{redact(spec), fmt.Sprintf("unknown store kind %q; the kinds are %s", scheme, knownStoreKinds)}
}

func openFile(spec, rest string, create bool) (*openedStore, error) {
	dir := rest
	if strings.HasPrefix(rest, "//") { // file:///abs/path or file://localhost/abs/path
		u, err := url.Parse(spec)
		if err != nil {
			return nil, &StoreConfigError{spec, err.Error()}
		}
		if u.Host != "" && u.Host != "localhost" {
			return nil, &StoreConfigError{spec, "a file store is local: file:/path or file:///path"}
		}
		dir = u.Path
	}
	if dir == "" {
		dir = defaultStoreDir()
	}
	if !create {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, &StoreConfigError{spec, err.Error()}
		}
		if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
			// Nothing was ever recorded here: an empty store stands in,
			// so that reading creates no directory.
			m, err := memstore.New(memstore.WithoutCleanup())
			if err != nil {
				return nil, &StoreConfigError{spec, err.Error()}
			}
			return &openedStore{Store: m, kind: kindFile, desc: abs + " (does not exist)", absent: true}, nil
		}
	}
	s, err := filestore.New(dir)
	if err != nil {
		return nil, &StoreConfigError{spec, err.Error()}
	}
	return &openedStore{Store: s, kind: kindFile, desc: s.Dir(), file: s, close: s.Close}, nil
}

// takeParam removes the query parameter name from u and returns its value.
func takeParam(u *url.URL, name string) string {
	q := u.Query()
	v := q.Get(name)
	if q.Has(name) {
		q.Del(name)
		u.RawQuery = q.Encode()
	}
	return v
}

// quietRedisLog drops go-redis's own log lines (dial retries and the like):
// idem reports the error an operation ends with, once.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

func openRedis(spec string, cluster bool) (*openedStore, error) {
	redis.SetLogger(quietRedisLog{})
	u, err := url.Parse(spec)
	if err != nil {
		return nil, &StoreConfigError{redact(spec), "not a URL"}
	}
	prefix := takeParam(u, "prefix")
	var opts []redisstore.Option
	if prefix != "" {
		opts = append(opts, redisstore.WithPrefix(prefix))
	}
	// A master with replicas needs an explicit choice (redisstore refuses
	// to claim otherwise): replica-ack=N[&replica-ack-timeout=D] waits for
	// N replicas, async-replication=accept accepts that a claim lost in a
	// failover can run the command twice.
	if v := takeParam(u, "replica-ack"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, &StoreConfigError{redact(spec), "replica-ack: not a number: " + v}
		}
		timeout := 100 * time.Millisecond
		if tv := takeParam(u, "replica-ack-timeout"); tv != "" {
			if timeout, err = time.ParseDuration(tv); err != nil {
				return nil, &StoreConfigError{redact(spec), "replica-ack-timeout: " + err.Error()}
			}
		}
		opts = append(opts, redisstore.WithReplicaAck(n, timeout))
	}
	switch v := takeParam(u, "async-replication"); v {
	case "":
	case "accept":
		opts = append(opts, redisstore.AcceptAsyncReplication())
	default:
		return nil, &StoreConfigError{redact(spec), "async-replication: want accept, got " + v}
	}
	var client interface {
		redisstore.Client
		Close() error
	}
	if cluster {
		u.Scheme = strings.TrimSuffix(strings.ToLower(u.Scheme), "-cluster")
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, &StoreConfigError{redact(spec), err.Error()}
		}
		client = redis.NewClusterClient(o)
	} else {
		o, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, &StoreConfigError{redact(spec), err.Error()}
		}
		client = redis.NewClient(o)
	}
	s, err := redisstore.New(client, opts...)
	if err != nil {
		_ = client.Close()
		return nil, &StoreConfigError{redact(spec), err.Error()}
	}
	return &openedStore{
		Store: s, kind: kindRedis, desc: redact(spec),
		close: func() error {
			err := s.Close()
			if cerr := client.Close(); err == nil {
				err = cerr
			}
			return err
		},
	}, nil
}

func openDynamo(ctx context.Context, spec string) (*openedStore, error) {
	u, err := url.Parse(spec)
	if err != nil {
		return nil, &StoreConfigError{redact(spec), "not a URL"}
	}
	table := u.Host + strings.TrimSuffix(u.Path, "/")
	if table == "" || strings.Contains(table, "/") {
		return nil, &StoreConfigError{redact(spec), "want dynamodb://TABLE"}
	}
	q := u.Query()
	for name := range q {
		switch name {
		case "region", "endpoint", "create", "pk", "sk", "prefix":
		default:
			return nil, &StoreConfigError{redact(spec), "unknown parameter " + name}
		}
	}
	var opts []dynamostore.Option
	if q.Has("pk") || q.Has("sk") {
		pk := q.Get("pk")
		if pk == "" {
			pk = "pk"
		}
		sk := "sk"
		if q.Has("sk") {
			sk = q.Get("sk")
		}
		opts = append(opts, dynamostore.WithKeyAttributes(pk, sk))
	}
	if p := q.Get("prefix"); p != "" {
		opts = append(opts, dynamostore.WithKeyPrefix(p))
	}
	var loadOpts []func(*config.LoadOptions) error
	if r := q.Get("region"); r != "" {
		loadOpts = append(loadOpts, config.WithRegion(r))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, &StoreConfigError{redact(spec), "AWS configuration: " + err.Error()}
	}
	endpoint := q.Get("endpoint")
	if endpoint != "" && cfg.Region == "" {
		cfg.Region = "us-east-1" // a local endpoint ignores the region, the SDK still wants one
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	s, err := dynamostore.New(client, table, opts...)
	if err != nil {
		return nil, &StoreConfigError{redact(spec), err.Error()}
	}
	switch q.Get("create") {
	case "", "0", "false":
	case "1", "true":
		if err := dynamostore.CreateTable(ctx, client, table, opts...); err != nil {
			return nil, fmt.Errorf("create table: %w", &idem.StoreError{Op: "create table", Err: err})
		}
	default:
		return nil, &StoreConfigError{redact(spec), "create must be 1 or 0"}
	}
	return &openedStore{Store: s, kind: kindDynamoDB, desc: "dynamodb table " + table}, nil
}

// openSQL opens a PostgreSQL (postgres://, with the pgx driver) or
// MySQL/MariaDB (mysql://user:pass@host:port/db, with go-sql-driver/mysql)
// store. Its own parameters are table (default sqlstore's) and migrate=1,
// which creates the table if it is missing; every other parameter goes to
// the driver.
func openSQL(ctx context.Context, spec string, dialect sqlstore.Dialect) (*openedStore, error) {
	u, err := url.Parse(spec)
	if dialect == sqlstore.SQLite {
		u, err = sqliteURL(spec)
	}
	if err != nil {
		return nil, &StoreConfigError{redact(spec), "not a URL"}
	}
	table := takeParam(u, "table")
	migrate := takeParam(u, "migrate")
	driver, dsn, err := sqlDriverDSN(spec, u, dialect, migrate)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, &StoreConfigError{redact(spec), err.Error()}
	}
	if dialect == sqlstore.SQLite {
		// Open the file now, so that a file SQLite cannot open is reported
		// with its path rather than as "unable to open database file" at
		// the first claim.
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			return nil, &StoreConfigError{redact(spec), fmt.Sprintf("database file %s: %v", u.Path, err)}
		}
	}
	var opts []sqlstore.Option
	if table != "" {
		opts = append(opts, sqlstore.WithTable(table))
	}
	s, err := sqlstore.New(db, dialect, opts...)
	if err != nil {
		_ = db.Close()
		return nil, &StoreConfigError{redact(spec), err.Error()}
	}
	closeAll := func() error {
		err := s.Close()
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		return err
	}
	switch migrate {
	case "", "0", "false":
	case "1", "true":
		if err := s.Migrate(ctx); err != nil {
			_ = closeAll()
			return nil, fmt.Errorf("migrate: %w", &idem.StoreError{Op: "migrate", Err: err})
		}
	default:
		_ = closeAll()
		return nil, &StoreConfigError{redact(spec), "migrate must be 1 or 0"}
	}
	return &openedStore{
		Store: s, kind: kindSQL, desc: dialect.String() + " " + redact(spec),
		close: closeAll,
		purge: func(ctx context.Context, grace time.Duration) (int, error) {
			p, err := sqlstore.New(db, dialect, append(opts, sqlstore.WithRetention(grace))...)
			if err != nil {
				return 0, err
			}
			return p.Purge(ctx)
		},
	}, nil
}

// sqlDriverDSN returns the database/sql driver and data source name of the
// store spec (parsed as u, its own parameters taken out) for dialect; an
// SQLite file that is missing without migrate=1 is a *MissingError.
func sqlDriverDSN(spec string, u *url.URL, dialect sqlstore.Dialect, migrate string) (driver, dsn string, err error) {
	switch dialect {
	case sqlstore.Postgres:
		return "pgx", u.String(), nil
	case sqlstore.MySQL:
		if dsn, err = mysqlDSN(u); err != nil {
			return "", "", &StoreConfigError{redact(spec), err.Error()}
		}
		return "mysql", dsn, nil
	case sqlstore.SQLite:
		if dsn, err = sqliteDSN(u); err != nil {
			return "", "", &StoreConfigError{redact(spec), err.Error()}
		}
		if dsn, err = sqliteCheckFile(u, dsn, migrate == "1" || migrate == "true"); err != nil {
			var me *MissingError
			if errors.As(err, &me) {
				me.Store = redact(spec)
				return "", "", me
			}
			return "", "", &StoreConfigError{redact(spec), err.Error()}
		}
		return "sqlite", dsn, nil
	}
	return "", "", nil
}

// sqliteURL parses sqlite:PATH, sqlite://PATH or sqlite:///ABS/PATH, with
// optional ?params, into a URL whose Path is the file's path.
func sqliteURL(spec string) (*url.URL, error) {
	rest := spec[len("sqlite:"):]
	rest = strings.TrimPrefix(rest, "//")
	path, query, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: "sqlite", Path: path, RawQuery: q.Encode()}, nil
}

// sqliteDSN turns a sqlite URL into modernc.org/sqlite's DSN: the file,
// with sqlstore.SQLiteDSNParams (a busy timeout, WAL, transactions that
// take the write lock) and the URL's other parameters.
func sqliteDSN(u *url.URL) (string, error) {
	if u.Path == "" {
		return "", fmt.Errorf("want sqlite://PATH (a database file)")
	}
	dsn := "file:" + u.Path + "?" + sqlstore.SQLiteDSNParams
	if u.RawQuery != "" {
		dsn += "&" + u.RawQuery
	}
	return dsn, nil
}

// sqliteCheckFile checks that the database file of a sqlite URL can be
// opened as asked, before SQLite is given it, and returns dsn as it is to
// be opened. Without migrate the file must exist, and is opened read-write
// without create (mode=rw), so that a mistyped path creates no empty
// database; the error is then a *MissingError.
// With migrate, the file is created if it is missing, in a directory that
// must exist.
func sqliteCheckFile(u *url.URL, dsn string, migrate bool) (string, error) {
	path := u.Path
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return dsn, nil // not a file name: SQLite's own business
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return "", fmt.Errorf("%s is a directory, not a database file", path)
	case err == nil:
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("database file %s: %v", path, err)
	case !migrate:
		return "", &MissingError{What: "database file " + path, Param: "migrate"}
	default:
		dir := filepath.Dir(path)
		if di, err := os.Stat(dir); err != nil || !di.IsDir() {
			return "", fmt.Errorf("the directory %s of database file %s does not exist (migrate=1 creates the file, not its directory)", dir, path)
		}
	}
	if !migrate && !u.Query().Has("mode") {
		dsn += "&mode=rw"
	}
	return dsn, nil
}

// mysqlDSN turns mysql://user:pass@host:port/db?params into the driver's
// user:pass@tcp(host:port)/db?params.
func mysqlDSN(u *url.URL) (string, error) {
	cfg := mysql.NewConfig()
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:3306"
	} else if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return "", fmt.Errorf("want mysql://user:pass@host:port/DATABASE")
	}
	dsn := cfg.FormatDSN()
	if u.RawQuery != "" {
		dsn += "?" + u.RawQuery
	}
	if _, err := mysql.ParseDSN(dsn); err != nil {
		return "", err
	}
	return dsn, nil
}

// redact hides the password of a store URL.
func redact(spec string) string {
	u, err := url.Parse(spec)
	if err != nil || u.User == nil {
		if err != nil && strings.Contains(spec, "@") {
			return "(unparsable store URL)"
		}
		return spec
	}
	return u.Redacted()
}
