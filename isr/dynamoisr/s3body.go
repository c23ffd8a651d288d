package dynamoisr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/storekit"
)

// S3Client is the part of *s3.Client S3Body uses.
type S3Client interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, optFns ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
}

// S3Body is a body.Store keeping one object per key in an S3 bucket. The object key is
// the configured prefix followed by the store key. The content's SHA-256 ETag
// is also recorded as user metadata (x-amz-meta-sha256-etag) so other readers
// can see it without downloading the body; Get recomputes it from the bytes.
//
// NewS3Body does no I/O.
type S3Body struct {
	client S3Client
	bucket string
	prefix string
}

var _ body.Store = (*S3Body)(nil)

// S3BodyOption configures an S3Body. NewS3Body reports every invalid option as
// an *storekit.OptionError matching idem.ErrInvalidOption.
type S3BodyOption func(*s3BodyConfig)

type s3BodyConfig struct {
	storekit.Options
	prefix string
}

// WithS3Prefix puts every object under prefix (for example "pages/"), at
// most 512 bytes.
func WithS3Prefix(prefix string) S3BodyOption {
	return func(c *s3BodyConfig) {
		if len(prefix) > body.MaxKeyLen/2 {
			c.Invalid("WithS3Prefix", "prefix longer than %d bytes", body.MaxKeyLen/2)
			return
		}
		c.prefix = prefix
	}
}

// NewS3Body returns a store for bucket through client. A nil client, an empty
// bucket name and every invalid option are reported, joined, each an
// *storekit.OptionError matching idem.ErrInvalidOption.
func NewS3Body(client S3Client, bucket string, opts ...S3BodyOption) (*S3Body, error) {
	c := s3BodyConfig{Options: storekit.Options{Store: "dynamoisr"}}
	if client == nil {
		c.Invalid("NewS3Body", "S3 client is nil")
	}
	if strings.TrimSpace(bucket) == "" {
		c.Invalid("NewS3Body", "bucket name is empty")
	}
	for _, o := range opts {
		if o == nil {
			c.Invalid("NewS3Body", "nil option")
			continue
		}
		o(&c)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return &S3Body{client: client, bucket: bucket, prefix: c.prefix}, nil
}

// Validate reports, without contacting S3, an S3Body that NewS3Body did not make.
func (s *S3Body) Validate() error {
	if s == nil || s.client == nil {
		return &storekit.OptionError{Option: "dynamoisr.S3Body", Reason: "nil or zero S3Body: use NewS3Body"}
	}
	return nil
}

// Bucket returns the bucket name ("" for a nil or zero S3Body).
func (s *S3Body) Bucket() string {
	if s.Validate() != nil {
		return ""
	}
	return s.bucket
}

// ObjectKey returns the S3 object key that holds key ("" for a nil or zero
// S3Body).
func (s *S3Body) ObjectKey(key string) string {
	if s.Validate() != nil {
		return ""
	}
	return s.prefix + key
}

func (s *S3Body) check(key string) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := body.CheckKey(key); err != nil {
		return err
	}
	if len(s.prefix)+len(key) > body.MaxKeyLen {
		return &storekit.KeyError{Reason: fmt.Sprintf("body key %q with prefix longer than %d bytes", key[:min(len(key), 32)], body.MaxKeyLen)}
	}
	return nil
}

// Put implements body.Store.
func (s *S3Body) Put(ctx context.Context, key string, content []byte, contentType string) (string, error) {
	if err := s.check(key); err != nil {
		return "", err
	}
	if err := body.CheckContentType(contentType); err != nil {
		return "", err
	}
	etag := body.ETag(content)
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.ObjectKey(key)),
		Body:          bytes.NewReader(content),
		ContentLength: aws.Int64(int64(len(content))),
		Metadata:      map[string]string{"sha256-etag": strings.Trim(etag, `"`)},
	}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	if _, err := s.client.PutObject(ctx, in); err != nil {
		return "", fmt.Errorf("body: s3 put %q: %w", key, err)
	}
	return etag, nil
}

// Get implements body.Store.
func (s *S3Body) Get(ctx context.Context, key string) (*body.Object, error) {
	if err := s.check(key); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.ObjectKey(key)),
	})
	if err != nil {
		if isS3NotFound(err) {
			return nil, fmt.Errorf("%w: %q: %w", body.ErrNotFound, key, err)
		}
		return nil, fmt.Errorf("body: s3 get %q: %w", key, err)
	}
	defer out.Body.Close()
	content, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("body: s3 get %q: %w", key, err)
	}
	return &body.Object{Content: content, ContentType: aws.ToString(out.ContentType), ETag: body.ETag(content)}, nil
}

// Delete implements body.Store.
func (s *S3Body) Delete(ctx context.Context, key string) error {
	if err := s.check(key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.ObjectKey(key)),
	})
	if err != nil && !isS3NotFound(err) {
		return fmt.Errorf("body: s3 delete %q: %w", key, err)
	}
	return nil
}

func isS3NotFound(err error) bool {
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return true
		case "NoSuchBucket":
			return false
		}
	}
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound && api == nil
}

// CreateBucket creates bucket through client; a bucket that already exists
// and is owned by the caller is not an error.
func CreateBucket(ctx context.Context, client *s3.Client, bucket string) error {
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	if err == nil {
		return nil
	}
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if errors.As(err, &owned) || errors.As(err, &exists) {
		return nil
	}
	return fmt.Errorf("body: create bucket %q: %w", bucket, err)
}
