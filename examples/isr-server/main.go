// Command isr-server serves pages with incremental static regeneration: a
// fresh page is served from the cache with an ETag, a stale one is served at
// once and regenerated in the background by exactly one worker, a new one is
// rendered once while concurrent requests wait.
//
// By default everything is local: an in-memory ISR table and a file body
// store in a temporary directory. Flags (or environment variables) choose a
// shared table (DynamoDB, Redis or a directory) and body store (S3 or a
// directory), so several servers can share one cache:
//
//	isr-server                                        # memory table, file bodies
//	isr-server -dir /var/cache/isr                    # file table + file bodies in one directory (ISR_DIR): servers on one host
//	isr-server -redis 127.0.0.1:6379 -bucket pages    # Redis table (ISR_REDIS_ADDR; a comma-separated list is a Cluster) + S3
//	isr-server -table isr-cache -create-table         # DynamoDB (FACETHEORY_CACHE_TABLE_NAME)
//	isr-server -table isr-cache -bucket pages         # DynamoDB + S3 (ISR_S3_BUCKET)
//	isr-server -dynamodb-endpoint http://127.0.0.1:8765 -s3-endpoint http://127.0.0.1:8766 ...
//
// At most one of -table, -redis and -dir is given. Servers sharing a table
// must share the bodies too: an S3 bucket, or one -body-dir (ISR_BODY_DIR)
// on one host; -dir keeps the bodies in DIR/bodies unless -bucket or
// -body-dir says otherwise.
//
// AWS credentials and region come from the usual AWS environment and
// configuration files (region us-east-1 when none is set). A custom S3
// endpoint is addressed path-style.
//
// The server prints "isr-server listening on http://ADDR" once it accepts
// connections, and stops cleanly on SIGINT or SIGTERM, letting background
// regenerations finish.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/isr/dynamoisr"
	"github.com/idem-go/idem/isr/redisisr"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "isr-server:", err)
		os.Exit(1)
	}
}

type options struct {
	addr             string
	table            string
	createTable      bool
	dynamoEndpoint   string
	bucket           string
	createBucket     bool
	s3Endpoint       string
	s3Prefix         string
	redisAddr        string
	redisPrefix      string
	dir              string
	bodyDir          string
	revalidate       time.Duration
	leaseDuration    time.Duration
	renderDelay      time.Duration
	staleWhileReval  time.Duration
	waitTimeout      time.Duration
	shutdownDeadline time.Duration
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("isr-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", envOr(getenv, "ISR_ADDR", "127.0.0.1:8080"), "listen address (ISR_ADDR; port 0 picks a free one)")
	fs.StringVar(&o.table, "table", getenv(isr.EnvTableName), "DynamoDB table; empty uses an in-memory table ("+isr.EnvTableName+")")
	fs.BoolVar(&o.createTable, "create-table", false, "create the DynamoDB table if it does not exist")
	fs.StringVar(&o.dynamoEndpoint, "dynamodb-endpoint", getenv("ISR_DYNAMODB_ENDPOINT"), "DynamoDB endpoint URL, e.g. DynamoDB Local (ISR_DYNAMODB_ENDPOINT)")
	fs.StringVar(&o.bucket, "bucket", getenv("ISR_S3_BUCKET"), "S3 bucket for bodies; empty uses a file store (ISR_S3_BUCKET)")
	fs.BoolVar(&o.createBucket, "create-bucket", false, "create the S3 bucket if it does not exist")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", getenv("ISR_S3_ENDPOINT"), "S3-compatible endpoint URL, path-style (ISR_S3_ENDPOINT)")
	fs.StringVar(&o.s3Prefix, "s3-prefix", "", "prefix of the S3 object keys")
	fs.StringVar(&o.redisAddr, "redis", getenv("ISR_REDIS_ADDR"), "Redis address for the ISR table; several, comma-separated, are a Cluster (ISR_REDIS_ADDR)")
	fs.StringVar(&o.redisPrefix, "redis-prefix", redisisr.DefaultPrefix, "key prefix of the Redis table")
	fs.StringVar(&o.dir, "dir", getenv("ISR_DIR"), "directory of a file table shared by the servers of one host, and of the bodies unless -bucket or -body-dir (ISR_DIR)")
	fs.StringVar(&o.bodyDir, "body-dir", getenv("ISR_BODY_DIR"), "body directory of the file store; empty uses DIR/bodies with -dir, else a temporary one (ISR_BODY_DIR)")
	fs.DurationVar(&o.revalidate, "revalidate", 10*time.Second, "how long a rendered page stays fresh")
	fs.DurationVar(&o.leaseDuration, "lease", 30*time.Second, "regeneration lease duration")
	fs.DurationVar(&o.renderDelay, "render-delay", 200*time.Millisecond, "simulated render time")
	fs.DurationVar(&o.staleWhileReval, "stale-while-revalidate", 24*time.Hour, "stale-while-revalidate of the Cache-Control header")
	fs.DurationVar(&o.waitTimeout, "wait-timeout", 30*time.Second, "how long a request for a new page waits for its render")
	fs.DurationVar(&o.shutdownDeadline, "shutdown-timeout", 30*time.Second, "how long shutdown waits for requests and regenerations")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.renderDelay < 0 {
		return o, errors.New("-render-delay must not be negative")
	}
	if o.bucket == "" && (o.createBucket || o.s3Endpoint != "") {
		return o, errors.New("-create-bucket and -s3-endpoint need -bucket")
	}
	if o.table == "" && (o.createTable || o.dynamoEndpoint != "") {
		return o, errors.New("-create-table and -dynamodb-endpoint need -table")
	}
	tables := 0
	for _, v := range []string{o.table, o.redisAddr, o.dir} {
		if v != "" {
			tables++
		}
	}
	if tables > 1 {
		return o, errors.New("at most one of -table, -redis and -dir")
	}
	if o.bucket != "" && o.bodyDir != "" {
		return o, errors.New("-bucket and -body-dir exclude each other")
	}
	return o, nil
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// run starts the server and serves until ctx is done.
func run(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	o, err := parse(args, getenv, os.Stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	var awsCfg *aws.Config
	loadAWS := func() (aws.Config, error) {
		if awsCfg != nil {
			return *awsCfg, nil
		}
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return aws.Config{}, err
		}
		if cfg.Region == "" {
			cfg.Region = "us-east-1"
		}
		awsCfg = &cfg
		return cfg, nil
	}

	var table isr.Table
	tableDesc := "memory table"
	switch {
	case o.redisAddr != "":
		client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(o.redisAddr, ",")})
		defer client.Close()
		rt, err := redisisr.NewTable(client, redisisr.WithPrefix(o.redisPrefix))
		if err != nil {
			return err
		}
		if err := client.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis %s: %w", o.redisAddr, err)
		}
		table, tableDesc = rt, "Redis table at "+o.redisAddr
	case o.dir != "":
		ft, err := isr.NewFileTable(filepath.Join(o.dir, "table"))
		if err != nil {
			return err
		}
		table, tableDesc = ft, "file table in "+ft.Dir()
		if o.bodyDir == "" {
			o.bodyDir = filepath.Join(o.dir, "bodies")
		}
	case o.table == "":
		mt, err := isr.NewMemoryTable()
		if err != nil {
			return err
		}
		table = mt
	default:
		cfg, err := loadAWS()
		if err != nil {
			return err
		}
		client := dynamodb.NewFromConfig(cfg, func(opt *dynamodb.Options) {
			if o.dynamoEndpoint != "" {
				opt.BaseEndpoint = aws.String(o.dynamoEndpoint)
			}
		})
		if o.createTable {
			if err := dynamoisr.CreateTable(ctx, client, o.table); err != nil {
				return err
			}
		}
		dt, err := dynamoisr.NewTable(client, o.table)
		if err != nil {
			return err
		}
		table = dt
		tableDesc = "DynamoDB table " + o.table
	}

	var bodies body.Store
	var bodiesDesc string
	if o.bucket == "" {
		dir := o.bodyDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "isr-server-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		fsStore, err := body.NewFile(dir)
		if err != nil {
			return err
		}
		bodies, bodiesDesc = fsStore, "file bodies in "+fsStore.Dir()
	} else {
		cfg, err := loadAWS()
		if err != nil {
			return err
		}
		client := s3.NewFromConfig(cfg, func(opt *s3.Options) {
			if o.s3Endpoint != "" {
				opt.BaseEndpoint = aws.String(o.s3Endpoint)
				opt.UsePathStyle = true
			}
		})
		if o.createBucket {
			if err := dynamoisr.CreateBucket(ctx, client, o.bucket); err != nil {
				return err
			}
		}
		s3Store, err := dynamoisr.NewS3Body(client, o.bucket, dynamoisr.WithS3Prefix(o.s3Prefix))
		if err != nil {
			return err
		}
		bodies, bodiesDesc = s3Store, "S3 bucket "+o.bucket
	}

	coord, err := isr.NewCoordinator(table, isr.WithLeaseDuration(o.leaseDuration))
	if err != nil {
		return err
	}
	var renders atomic.Int64
	render := func(ctx context.Context, tenant, cacheKey string) ([]byte, string, error) {
		if cacheKey == "/favicon.ico" {
			return nil, "", isr.ErrNoPage
		}
		t := time.NewTimer(o.renderDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
		n := renders.Add(1)
		page := fmt.Sprintf("<!doctype html>\n<title>%s</title>\n<h1>%s</h1>\n<p>Rendered at %s by process %d (render %d of this process).</p>\n",
			html.EscapeString(cacheKey), html.EscapeString(cacheKey), time.Now().UTC().Format(time.RFC3339), os.Getpid(), n)
		return []byte(page), "text/html; charset=utf-8", nil
	}
	h, err := isr.NewHandler(coord, bodies, render,
		isr.WithRevalidate(o.revalidate),
		isr.WithStaleWhileRevalidate(o.staleWhileReval),
		isr.WithWaitTimeout(o.waitTimeout),
		isr.WithLogger(logger),
	)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "isr-server listening on http://%s (%s, %s)\n", ln.Addr(), tableDesc, bodiesDesc)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownDeadline)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	return h.Wait(sctx)
}
