// Package bodytest is the behaviour every body.Store shares, run by the
// tests of each store (package body's, and S3Body's in module dynamoisr).
package bodytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/storekit"
)

// Run checks the behaviour every Store shares. sameKeyRaces says
// whether the server behind the store replaces an object atomically, so that
// readers racing an overwrite of one key see one version or the other. Real
// S3 does; the S3-compatible test server writes objects in place, so its run
// races writers and readers on distinct keys instead (the isr handler never
// overwrites a body key: each generation gets a new one).
func Run(t *testing.T, newStore func(t *testing.T) body.Store, sameKeyRaces bool) {
	ctx := context.Background()
	cases := []struct {
		name string
		run  func(ctx context.Context, t *testing.T, s body.Store)
	}{
		{"PutGet", putGet},
		{"EmptyContent", emptyContent},
		{"Overwrite", overwrite},
		{"BinaryContent", binaryContent},
		{"NotFound", notFound},
		{"Delete", deleteKey},
		{"InvalidInput", invalidInput},
		{"CanceledContext", canceledContext},
		{"Concurrent", func(ctx context.Context, t *testing.T, s body.Store) { concurrent(ctx, t, s, sameKeyRaces) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(ctx, t, newStore(t))
		})
	}
}

// putGet checks that Get returns the content, content type and ETag that
// Put stored.
func putGet(ctx context.Context, t *testing.T, s body.Store) {
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
}

// emptyContent checks that empty content is stored, with the ETag of no bytes.
func emptyContent(ctx context.Context, t *testing.T, s body.Store) {
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
}

// overwrite checks that a second Put of a key replaces its content and
// content type.
func overwrite(ctx context.Context, t *testing.T, s body.Store) {
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
}

// binaryContent checks that arbitrary bytes come back unchanged.
func binaryContent(ctx context.Context, t *testing.T, s body.Store) {
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
}

// notFound checks that Get of an absent key returns ErrNotFound.
func notFound(ctx context.Context, t *testing.T, s body.Store) {
	_, err := s.Get(ctx, "absent")
	if !errors.Is(err, body.ErrNotFound) {
		t.Fatalf("Get absent: %v, want ErrNotFound", err)
	}
}

// deleteKey checks that Delete removes a key and that deleting an absent
// key is no error.
func deleteKey(ctx context.Context, t *testing.T, s body.Store) {
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
}

// invalidInput checks that an empty or overlong key and a content type
// with CRLF are refused with their typed errors.
func invalidInput(ctx context.Context, t *testing.T, s body.Store) {
	var ke *storekit.KeyError
	if _, err := s.Put(ctx, "", []byte("x"), ""); !errors.As(err, &ke) || !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("Put empty key: %v", err)
	}
	if _, err := s.Get(ctx, ""); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("Get empty key: %v", err)
	}
	if err := s.Delete(ctx, ""); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("Delete empty key: %v", err)
	}
	if _, err := s.Put(ctx, strings.Repeat("k", 2000), []byte("x"), ""); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("Put long key: %v", err)
	}
	var ce *body.ContentTypeError
	if _, err := s.Put(ctx, "k", []byte("x"), "text/html\r\nX-Evil: 1"); !errors.As(err, &ce) || !errors.Is(err, body.ErrInvalidContentType) {
		t.Fatalf("Put content type with CRLF: %v", err)
	}
}

// canceledContext checks that Put with a canceled context returns context.Canceled.
func canceledContext(ctx context.Context, t *testing.T, s body.Store) {
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(cctx, "c", []byte("x"), ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with canceled context: %v", err)
	}
}

// concurrent checks that readers racing writers see one complete version
// or the other, never a mix, and that the ETag always matches the bytes
// read. With sameKeyRaces false the writers write distinct keys and the
// readers read the one key no writer touches.
func concurrent(ctx context.Context, t *testing.T, s body.Store, sameKeyRaces bool) {
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
}
