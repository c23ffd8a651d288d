// Package body stores the generated bodies of cached pages.
//
//	store, err := body.NewFile("/var/cache/pages")
//	if err != nil {
//		return err
//	}
//	etag, err := store.Put(ctx, "pages/index.html", html, "text/html")
//
// A page's metadata (the META item of package isr) points at its body by key
// (the s3_key attribute); the bytes themselves live in a Store. The stores
// share one small interface and one behaviour:
//
//   - Memory: a map guarded by a mutex, for tests and single-process servers.
//   - File: one file per key under a directory, named by the SHA-256 of the
//     key (so no key can escape the directory), written atomically (temporary
//     file + rename) with mode 0600.
//   - S3: one object per key in a bucket: S3Body in module
//     github.com/idem-go/idem/isr/dynamoisr, which keeps the AWS SDK out of
//     this one.
//
// Every store computes the ETag from the content alone: a strong ETag made of
// the lowercase hex SHA-256 of the bytes, in double quotes (see ETag). The same
// content therefore has the same ETag in every store and every process, which
// is what lets several servers answer If-None-Match consistently.
//
// Put overwrites. Get of an absent key returns an error matching ErrNotFound.
// Delete of an absent key is not an error. An empty or otherwise unusable key
// returns an *storekit.KeyError (matching idem.ErrInvalidKey), never a panic. A store its
// constructor did not make (nil, or a zero File or Memory) returns an
// *storekit.OptionError matching idem.ErrInvalidOption.
package body

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/idem-go/idem/storekit"
)

// Store is a place for page bodies.
type Store interface {
	// Put stores content under key with its media type and returns the
	// content's ETag (see ETag).
	Put(ctx context.Context, key string, content []byte, contentType string) (etag string, err error)
	// Get returns the object stored under key, or an error matching
	// ErrNotFound.
	Get(ctx context.Context, key string) (*Object, error)
	// Delete removes key. Deleting an absent key succeeds.
	Delete(ctx context.Context, key string) error
}

// Object is a stored body.
type Object struct {
	Content     []byte
	ContentType string
	// ETag is the strong ETag of Content, as ETag computes it.
	ETag string
}

// ErrNotFound is returned (wrapped) by Get when nothing is stored under the key.
var ErrNotFound = errors.New("body: not found")

// ETag returns the strong ETag of content: the lowercase hex SHA-256 of the
// bytes in double quotes, e.g. "e3b0c442...b855" for empty content.
func ETag(content []byte) string {
	sum := sha256.Sum256(content)
	buf := make([]byte, 0, 2+2*sha256.Size)
	buf = append(buf, '"')
	buf = hex.AppendEncode(buf, sum[:])
	buf = append(buf, '"')
	return string(buf)
}

// MaxKeyLen is the longest key any store accepts (S3's limit, in bytes).
const MaxKeyLen = 1024

// CheckKey reports a key no store accepts (empty, or longer than
// MaxKeyLen) as an *storekit.KeyError matching idem.ErrInvalidKey: the check
// every Store makes first.
func CheckKey(key string) error {
	switch {
	case key == "":
		return &storekit.KeyError{Reason: "empty body key"}
	case len(key) > MaxKeyLen:
		return &storekit.KeyError{Reason: fmt.Sprintf("body key %q... longer than %d bytes", key[:32], MaxKeyLen)}
	}
	return nil
}

// ErrInvalidContentType is matched by every *ContentTypeError.
var ErrInvalidContentType = errors.New("body: invalid content type")

// ContentTypeError reports a media type that cannot be stored (it contains
// control characters such as a line break, which no HTTP header may carry).
type ContentTypeError struct {
	ContentType string
}

// Error implements error.
func (e *ContentTypeError) Error() string {
	return fmt.Sprintf("body: invalid content type %q: control character", e.ContentType)
}

// Is makes errors.Is(err, ErrInvalidContentType) true.
func (e *ContentTypeError) Is(target error) bool { return target == ErrInvalidContentType }

// CheckContentType reports a media type no store can keep as a
// *ContentTypeError: the check every Store's Put makes.
func CheckContentType(ct string) error {
	for i := 0; i < len(ct); i++ {
		if c := ct[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return &ContentTypeError{ContentType: ct}
		}
	}
	return nil
}

func clone(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return append([]byte(nil), b...)
}
