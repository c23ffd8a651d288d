package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/redisstore"
)

// Store kinds.
const (
	kindFile     = "file"
	kindMem      = "mem"
	kindRedis    = "redis"
	kindDynamoDB = "dynamodb"
)

// Default and DynamoDB limits of the captured standard output.
const (
	defaultMaxOutput  = 1 << 20
	dynamoMaxOutput   = 256 << 10
	dynamoItemLimitKB = 400
)

// openedStore is a store selected by -store, with what is needed to close
// it and to describe it.
type openedStore struct {
	idem.Store
	kind  string
	desc  string // for messages: a directory, a host, a table; never a password
	file  *filestore.Store
	mem   *memstore.Store
	close func() error
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

// openStore opens the store named by spec. It does no network I/O except
// for dynamodb://...?create=1, which creates the table.
func openStore(ctx context.Context, spec string) (*openedStore, error) {
	if spec == "" {
		spec = "file:" + defaultStoreDir()
	}
	scheme, rest, ok := strings.Cut(spec, ":")
	if !ok {
		return nil, &StoreConfigError{spec, "want file:DIR, redis://..., redis-cluster://..., dynamodb://TABLE or mem:"}
	}
	switch strings.ToLower(scheme) {
	case "file":
		return openFile(spec, rest)
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
	}
	return nil, &StoreConfigError{redact(spec), "unknown store kind " + scheme}
}

func openFile(spec, rest string) (*openedStore, error) {
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
	s, err := filestore.New(dir)
	if err != nil {
		return nil, &StoreConfigError{spec, err.Error()}
	}
	return &openedStore{Store: s, kind: kindFile, desc: s.Dir(), file: s}, nil
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
