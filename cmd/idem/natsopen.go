package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/natsstore"
)

const kindNATS = "nats"

// openNATS opens nats://[user:pass@]host:port/BUCKET (tls:// for TLS): a
// store on the JetStream KV bucket BUCKET. create=1 creates the bucket with
// natsstore.CreateBucket if it is missing. The store starts no clean-up of
// its own (a one-shot command would stop it at once): set the bucket's max
// age, or run a long-lived process with the clean-up.
func openNATS(ctx context.Context, spec string) (*openedStore, error) {
	u, err := url.Parse(spec)
	if err != nil {
		return nil, &StoreConfigError{redact(spec), "not a URL"}
	}
	bucket := strings.Trim(u.Path, "/")
	if bucket == "" || strings.Contains(bucket, "/") {
		return nil, &StoreConfigError{redact(spec), "want nats://host:port/BUCKET"}
	}
	create := takeParam(u, "create")
	switch create {
	case "", "0", "false", "1", "true":
	default:
		return nil, &StoreConfigError{redact(spec), "create must be 1 or 0"}
	}
	if len(u.Query()) > 0 {
		return nil, &StoreConfigError{redact(spec), "unknown parameter " + u.RawQuery}
	}
	u.Path, u.RawPath = "", ""
	nc, err := nats.Connect(u.String(), nats.Timeout(5*time.Second), nats.Name("idem"))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", &idem.StoreError{Op: "connect", Err: err})
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, &StoreConfigError{redact(spec), err.Error()}
	}
	var kv jetstream.KeyValue
	if create == "1" || create == "true" {
		kv, err = natsstore.CreateBucket(ctx, js, bucket)
	} else {
		kv, err = js.KeyValue(ctx, bucket)
	}
	if err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			// A configuration mistake, as a SQL table that does not exist.
			return nil, &MissingError{Store: redact(spec), What: "the JetStream KV bucket " + bucket, Param: "create"}
		}
		return nil, fmt.Errorf("bucket %s: %w", bucket, &idem.StoreError{Op: "open bucket", Err: err})
	}
	s, err := natsstore.New(kv, natsstore.WithoutCleanup(), natsstore.WithJetStream(js))
	if err != nil {
		nc.Close()
		return nil, &StoreConfigError{redact(spec), err.Error()}
	}
	return &openedStore{
		Store: s, kind: kindNATS, desc: "nats bucket " + bucket,
		close: func() error {
			err := s.Close()
			nc.Close()
			return err
		},
		purge: func(ctx context.Context, grace time.Duration) (int, error) {
			p, err := natsstore.New(kv, natsstore.WithoutCleanup(), natsstore.WithJetStream(js), natsstore.WithRetention(grace))
			if err != nil {
				return 0, err
			}
			defer p.Close()
			return p.Purge(ctx)
		},
	}, nil
}
