package idemgrpc_test

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idem-go/idem/idemgrpc"
)

// nopStream stands in for the server's transport stream, so that the
// interceptor's own cost is measured without a network.
type nopStream struct{}

func (nopStream) Method() string                  { return methodCreate }
func (nopStream) SetHeader(md metadata.MD) error  { return nil }
func (nopStream) SendHeader(md metadata.MD) error { return nil }
func (nopStream) SetTrailer(md metadata.MD) error { return nil }

// BenchmarkInterceptor: the cost of one call through the server
// interceptor on a memory store, called directly (no network): bare is the
// handler alone, fresh a new key every call (claim, handler, record,
// complete), replay the same key (one read, one decode).
func BenchmarkInterceptor(b *testing.B) {
	req := wrapperspb.String(`{"amount":1250,"currency":"EUR","account":"acct_8a9f"}`)
	handler := func(ctx context.Context, req any) (any, error) {
		return wrapperspb.String("pay_1:" + req.(*wrapperspb.StringValue).GetValue()), nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: methodCreate}
	base := grpc.NewContextWithServerTransportStream(context.Background(), nopStream{})
	withKey := func(key string) context.Context {
		return metadata.NewIncomingContext(base, metadata.MD{idemgrpc.KeyMetadata: {key}})
	}
	b.Run("bare", func(b *testing.B) {
		ctx := withKey("k")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := handler(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fresh", func(b *testing.B) {
		u := newInterceptor(b, newStore(b)).Unary()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if _, err := u(withKey("key-"+strconv.Itoa(i)), req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		u := newInterceptor(b, newStore(b)).Unary()
		ctx := withKey("k")
		if _, err := u(ctx, req, info, handler); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := u(ctx, req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLoopback: the same three over a real grpc-go connection on
// loopback, to set the interceptor's cost against a call's.
func BenchmarkLoopback(b *testing.B) {
	h := func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String("pay_1:" + req.GetValue()), nil
	}
	req := wrapperspb.String(`{"amount":1250,"currency":"EUR","account":"acct_8a9f"}`)
	run := func(b *testing.B, ic grpc.UnaryServerInterceptor, key func(i int) string) {
		cc := dial(b, serve(b, ic, &service{create: h}))
		ctx := context.Background()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			out := new(wrapperspb.StringValue)
			if err := cc.Invoke(idemgrpc.WithKey(ctx, key(i)), methodCreate, req, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, nil, func(int) string { return "k" }) })
	b.Run("fresh", func(b *testing.B) {
		run(b, newInterceptor(b, newStore(b)).Unary(), func(i int) string { return "key-" + strconv.Itoa(i) })
	})
	b.Run("replay", func(b *testing.B) {
		run(b, newInterceptor(b, newStore(b)).Unary(), func(int) string { return "k" })
	})
}
