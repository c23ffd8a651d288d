package idemgrpc

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/idem-go/idem/storekit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	// KeyMetadata is the request metadata that carries the key.
	KeyMetadata = "idempotency-key"
	// ReplayedMetadata is set to "true" in the header metadata of every
	// replayed response.
	ReplayedMetadata = "idempotent-replayed"
	// MaxKeyLen is the longest key accepted, in bytes.
	MaxKeyLen = 255
)

// CheckKey reports whether key is a valid idempotency key: 1 to MaxKeyLen
// bytes, each a visible ASCII character ('!' to '~': no space, no control
// character, nothing outside ASCII). Any such string is fine: a UUID, a
// ULID, an order number. A refused key is an
// *storekit.KeyError matching idem.ErrInvalidKey.
func CheckKey(key string) error {
	if key == "" {
		return &storekit.KeyError{Reason: "empty"}
	}
	if len(key) > MaxKeyLen {
		return &storekit.KeyError{Reason: fmt.Sprintf("longer than %d bytes", MaxKeyLen)}
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return &storekit.KeyError{Reason: fmt.Sprintf("byte %d is %q, not a visible ASCII character", i, c)}
		}
	}
	return nil
}

// WithKey returns a copy of ctx whose outgoing metadata carries key as the
// call's idempotency key, replacing any key already there. Use it for an
// application's own retry loop: every attempt made with the returned
// context sends the same key. It works with or without
// UnaryClientInterceptor, which leaves a key set this way alone. An invalid
// key (see CheckKey) makes the call fail with InvalidArgument: before it is
// sent when the client interceptor is installed, at the server otherwise.
func WithKey(ctx context.Context, key string) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx)
	if ok {
		md = md.Copy()
	} else {
		md = metadata.MD{}
	}
	md.Set(KeyMetadata, key)
	return metadata.NewOutgoingContext(ctx, md)
}

// NewKey returns a fresh random key: 26 characters of base32 holding 128
// random bits, from crypto/rand.
func NewKey() string { return rand.Text() }

// UnaryClientInterceptor returns a client interceptor that stamps a fresh
// random key (NewKey) on every unary call whose outgoing metadata has none.
// grpc-go runs a unary client interceptor once per logical call, around
// all of its attempts, so the retries of a service-config retryPolicy and
// transparent retries all carry the same key (hedged attempts would too;
// grpc-go does not send hedges yet), and the server runs the handler once
// however many of them reach it. A key set
// with WithKey is kept, and checked before the call is sent (an invalid one
// fails with InvalidArgument, nothing sent).
//
// The key lives as long as the logical call: an application that calls
// again after the call returned an error makes a new logical call with a
// new key, unless it gives both the same key with WithKey.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		switch keys := md.Get(KeyMetadata); len(keys) {
		case 0:
			ctx = metadata.AppendToOutgoingContext(ctx, KeyMetadata, NewKey())
		case 1:
			if err := CheckKey(keys[0]); err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
		default:
			return status.Error(codes.InvalidArgument, "idemgrpc: more than one "+KeyMetadata+" in the outgoing metadata")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
