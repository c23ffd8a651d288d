package idemgrpc_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The test service (the one idemgrpc's own tests declare), by hand, no
// generated code: two unary methods taking and returning a
// google.protobuf.StringValue.
const (
	serviceName  = "idemgrpc.test.Payments"
	methodCreate = "/" + serviceName + "/Create"
	methodRefund = "/" + serviceName + "/Refund"
)

type handlerFunc func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

type service struct{ create, refund handlerFunc }

func unaryMethod(name string, pick func(*service) handlerFunc) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := pick(srv.(*service))
			if interceptor == nil {
				return h(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName + "/" + name}
			return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return h(ctx, req.(*wrapperspb.StringValue))
			})
		},
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		unaryMethod("Create", func(s *service) handlerFunc { return s.create }),
		unaryMethod("Refund", func(s *service) handlerFunc { return s.refund }),
	},
}

// dial connects to addr over plain TCP.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// retryConfig is a service config whose retry policy retries the codes a
// guarded server answers while the outcome is not settled.
func retryConfig(attempts int) string {
	return fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":%d,"initialBackoff":"0.005s","maxBackoff":"0.05s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE","ABORTED"]}}]}`, serviceName, attempts)
}
