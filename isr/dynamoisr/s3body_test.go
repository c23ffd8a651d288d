package dynamoisr_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/isr/dynamoisr"
	"github.com/idem-go/idem/isr/internal/bodytest"
	"github.com/idem-go/idem/stores/storetest"
)

// newS3Client returns a client for the S3-compatible server of the test
// environment, with path-style addressing.
func newS3Client(t *testing.T) *s3.Client {
	endpoint := testenv.S3Endpoint(t)
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("S3RVER", "S3RVER", ""),
	})
}

func newBucket(t *testing.T, client *s3.Client) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	bucket := "idem-test-" + hex.EncodeToString(b[:])
	if err := dynamoisr.CreateBucket(context.Background(), client, bucket); err != nil {
		t.Fatal(err)
	}
	return bucket
}

func TestS3(t *testing.T) {
	client := newS3Client(t)
	bucket := newBucket(t, client)
	bodytest.Run(t, func(t *testing.T) body.Store {
		var b [6]byte
		_, _ = rand.Read(b[:])
		s, err := dynamoisr.NewS3Body(client, bucket, dynamoisr.WithS3Prefix("t-"+hex.EncodeToString(b[:])+"/"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, false)
}

func TestS3ObjectAndConfig(t *testing.T) {
	ctx := context.Background()
	client := newS3Client(t)
	bucket := newBucket(t, client)
	if err := dynamoisr.CreateBucket(ctx, client, bucket); err != nil {
		t.Fatalf("CreateBucket of an existing bucket: %v", err)
	}
	s, err := dynamoisr.NewS3Body(client, bucket, dynamoisr.WithS3Prefix("pages/"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	etag, err := s.Put(ctx, "index.html", []byte("<p>hi</p>"), "text/html")
	if err != nil {
		t.Fatal(err)
	}
	// The object is where ObjectKey says, with the media type and the
	// content hash as metadata, readable by any S3 client.
	out, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("pages/index.html")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(out.ContentType) != "text/html" {
		t.Fatalf("content type %q", aws.ToString(out.ContentType))
	}
	if got := `"` + out.Metadata["sha256-etag"] + `"`; got != etag {
		t.Fatalf("metadata etag %s, want %s", got, etag)
	}
	// A missing bucket is an error, not "not found".
	missing, err := dynamoisr.NewS3Body(client, bucket+"-missing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Get(ctx, "x"); err == nil || errors.Is(err, body.ErrNotFound) {
		t.Fatalf("Get from a missing bucket: %v", err)
	}
	// Configuration mistakes are reported by NewS3Body, all of them; a zero
	// S3 gives errors on use, not panics.
	_, err = dynamoisr.NewS3Body(nil, " ", dynamoisr.WithS3Prefix(strings.Repeat("p", 513)), nil)
	storetest.CheckOptionErrors(t, err, "dynamoisr.NewS3Body", "dynamoisr.NewS3Body", "dynamoisr.WithS3Prefix", "dynamoisr.NewS3Body")
	for _, bad := range []*dynamoisr.S3Body{nil, {}} {
		if err := bad.Validate(); !errors.Is(err, idem.ErrInvalidOption) {
			t.Fatalf("Validate: %v", err)
		}
		if _, err := bad.Put(ctx, "k", nil, ""); !errors.Is(err, idem.ErrInvalidOption) {
			t.Fatalf("Put: %v", err)
		}
		if _, err := bad.Get(ctx, "k"); !errors.Is(err, idem.ErrInvalidOption) {
			t.Fatalf("Get: %v", err)
		}
		if err := bad.Delete(ctx, "k"); !errors.Is(err, idem.ErrInvalidOption) {
			t.Fatalf("Delete: %v", err)
		}
	}
}
