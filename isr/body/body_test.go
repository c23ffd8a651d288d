package body_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/stores/storetest"
)

// runStoreTests checks the behaviour every Store shares. sameKeyRaces says
// whether the server behind the store replaces an object atomically, so that
// readers racing an overwrite of one key see one version or the other. Real
// S3 does; the S3-compatible test server writes objects in place, so its run
// races writers and readers on distinct keys instead (the isr handler never
// overwrites a body key: each generation gets a new one).
func runStoreTests(t *testing.T, newStore func(t *testing.T) body.Store, sameKeyRaces bool) {
	ctx := context.Background()

	t.Run("PutGet", func(t *testing.T) {
		s := newStore(t)
		content := []byte("<html>hello</html>")
		etag, err := s.Put(ctx, "pages/a.html", content, "text/html; charset=utf-8")
		if err != nil {
			t.Fatal(err)
		}
		if etag != body.ETag(content) {
			t.Fatalf("etag %s, want %s", etag, body.ETag(content))
		}
		o, err := s.Get(ctx, "pages/a.html")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(o.Content, content) || o.ContentType != "text/html; charset=utf-8" || o.ETag != etag {
			t.Fatalf("got %+v", o)
		}
	})

	t.Run("EmptyContent", func(t *testing.T) {
		s := newStore(t)
		etag, err := s.Put(ctx, "empty", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if etag != `"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"` {
			t.Fatalf("etag of empty content %s", etag)
		}
		o, err := s.Get(ctx, "empty")
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Content) != 0 || o.ETag != etag {
			t.Fatalf("got %+v", o)
		}
	})

	t.Run("Overwrite", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Put(ctx, "k", []byte("one"), "text/plain"); err != nil {
			t.Fatal(err)
		}
		e2, err := s.Put(ctx, "k", []byte("two"), "application/json")
		if err != nil {
			t.Fatal(err)
		}
		o, err := s.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if string(o.Content) != "two" || o.ContentType != "application/json" || o.ETag != e2 {
			t.Fatalf("got %+v", o)
		}
	})

	t.Run("BinaryContent", func(t *testing.T) {
		s := newStore(t)
		content := make([]byte, 300_000)
		_, _ = rand.Read(content)
		if _, err := s.Put(ctx, "bin", content, "application/octet-stream"); err != nil {
			t.Fatal(err)
		}
		o, err := s.Get(ctx, "bin")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(o.Content, content) {
			t.Fatal("binary content changed")
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		s := newStore(t)
		_, err := s.Get(ctx, "absent")
		if !errors.Is(err, body.ErrNotFound) {
			t.Fatalf("Get absent: %v, want ErrNotFound", err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Put(ctx, "d", []byte("x"), "text/plain"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "d"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "d"); !errors.Is(err, body.ErrNotFound) {
			t.Fatalf("Get after Delete: %v", err)
		}
		if err := s.Delete(ctx, "d"); err != nil {
			t.Fatalf("Delete of an absent key: %v", err)
		}
	})

	t.Run("InvalidInput", func(t *testing.T) {
		s := newStore(t)
		var ke *body.KeyError
		if _, err := s.Put(ctx, "", []byte("x"), ""); !errors.As(err, &ke) || !errors.Is(err, body.ErrInvalidKey) {
			t.Fatalf("Put empty key: %v", err)
		}
		if _, err := s.Get(ctx, ""); !errors.Is(err, body.ErrInvalidKey) {
			t.Fatalf("Get empty key: %v", err)
		}
		if err := s.Delete(ctx, ""); !errors.Is(err, body.ErrInvalidKey) {
			t.Fatalf("Delete empty key: %v", err)
		}
		if _, err := s.Put(ctx, strings.Repeat("k", 2000), []byte("x"), ""); !errors.Is(err, body.ErrInvalidKey) {
			t.Fatalf("Put long key: %v", err)
		}
		var ce *body.ContentTypeError
		if _, err := s.Put(ctx, "k", []byte("x"), "text/html\r\nX-Evil: 1"); !errors.As(err, &ce) || !errors.Is(err, body.ErrInvalidContentType) {
			t.Fatalf("Put content type with CRLF: %v", err)
		}
	})

	t.Run("CanceledContext", func(t *testing.T) {
		s := newStore(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Put(cctx, "c", []byte("x"), ""); !errors.Is(err, context.Canceled) {
			t.Fatalf("Put with canceled context: %v", err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		// Readers racing writers see one complete version or the other,
		// never a mix, and the ETag always matches the bytes read.
		s := newStore(t)
		a := bytes.Repeat([]byte("a"), 64<<10)
		b := bytes.Repeat([]byte("b"), 64<<10)
		if _, err := s.Put(ctx, "race", a, "text/plain"); err != nil {
			t.Fatal(err)
		}
		writeKey := func(i, j int) string {
			if sameKeyRaces {
				return "race"
			}
			return fmt.Sprintf("race-%d-%d", i, j)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := 0; i < 4; i++ {
			wg.Add(2)
			go func(i int) {
				defer wg.Done()
				for j := 0; j < 10; j++ {
					c := a
					if (i+j)%2 == 1 {
						c = b
					}
					if _, err := s.Put(ctx, writeKey(i, j), c, "text/plain"); err != nil {
						errs <- err
						return
					}
				}
			}(i)
			go func() {
				defer wg.Done()
				for j := 0; j < 10; j++ {
					o, err := s.Get(ctx, "race")
					if err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(o.Content, a) && !bytes.Equal(o.Content, b) {
						errs <- fmt.Errorf("torn read of %d bytes", len(o.Content))
						return
					}
					if o.ETag != body.ETag(o.Content) {
						errs <- fmt.Errorf("etag %s does not match content", o.ETag)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestMemory(t *testing.T) {
	runStoreTests(t, func(t *testing.T) body.Store { return body.NewMemory() }, true)
}

func TestFile(t *testing.T) {
	runStoreTests(t, func(t *testing.T) body.Store {
		s, err := body.NewFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, true)
}

func TestFileLayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "bodies")
	s, err := body.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Keys that look like paths stay inside the directory.
	for _, key := range []string{"../../escape", "/etc/passwd", "a/../../b", "..", "\x00nul"} {
		if _, err := s.Put(ctx, key, []byte(key), "text/plain"); err != nil {
			t.Fatalf("Put %q: %v", key, err)
		}
		p := s.Path(key)
		if rel, err := filepath.Rel(dir, p); err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("path %s of %q is outside %s", p, key, dir)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
		}
		o, err := s.Get(ctx, key)
		if err != nil || string(o.Content) != key {
			t.Fatalf("Get %q: %v %v", key, o, err)
		}
	}
	// Nothing was written outside the store's directory.
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("%d entries beside the store directory", len(entries))
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v, want 0700", fi.Mode().Perm())
	}
	// Two stores on one directory (two processes) see each other's bodies.
	s2, err := body.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := s2.Get(ctx, "../../escape"); err != nil || string(o.Content) != "../../escape" {
		t.Fatalf("second store: %v %v", o, err)
	}
	// A damaged file is reported as corrupt, not served.
	if err := os.WriteFile(s.Path("../../escape"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *body.CorruptError
	if _, err := s.Get(ctx, "../../escape"); !errors.As(err, &ce) {
		t.Fatalf("Get of damaged file: %v", err)
	}
	if _, err := body.NewFile(""); err == nil {
		t.Fatal("NewFile(\"\") succeeded")
	}
}

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
	if err := body.CreateBucket(context.Background(), client, bucket); err != nil {
		t.Fatal(err)
	}
	return bucket
}

func TestS3(t *testing.T) {
	client := newS3Client(t)
	bucket := newBucket(t, client)
	runStoreTests(t, func(t *testing.T) body.Store {
		var b [6]byte
		_, _ = rand.Read(b[:])
		s, err := body.NewS3(client, bucket, body.WithPrefix("t-"+hex.EncodeToString(b[:])+"/"))
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
	if err := body.CreateBucket(ctx, client, bucket); err != nil {
		t.Fatalf("CreateBucket of an existing bucket: %v", err)
	}
	s, err := body.NewS3(client, bucket, body.WithPrefix("pages/"))
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
	missing, err := body.NewS3(client, bucket+"-missing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Get(ctx, "x"); err == nil || errors.Is(err, body.ErrNotFound) {
		t.Fatalf("Get from a missing bucket: %v", err)
	}
	// Configuration mistakes are reported by NewS3, all of them; a zero
	// S3 gives errors on use, not panics.
	_, err = body.NewS3(nil, " ", body.WithPrefix(strings.Repeat("p", 513)), nil)
	storetest.CheckOptionErrors(t, err, "body.NewS3", "body.NewS3", "body.WithPrefix", "body.NewS3")
	for _, bad := range []*body.S3{nil, {}} {
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
