package idemgrpc_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The test service, declared by hand (no generated code): two unary
// methods taking and returning a google.protobuf.StringValue.
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

// serve starts a gRPC server on loopback with the given interceptor (none
// if nil) and handlers, and returns its address.
func serve(t testing.TB, ic grpc.UnaryServerInterceptor, svc *service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if ic != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(ic))
	}
	if svc.refund == nil {
		svc.refund = svc.create
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(&serviceDesc, svc)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
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
