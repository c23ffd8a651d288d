package idemgrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idem-go/idem/idemgrpc"
	"github.com/idem-go/idem/stores/memstore"
)

func Example() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	ic, err := idemgrpc.New(store, idemgrpc.WithMethods(methodCreate), idemgrpc.WithRequired())
	if err != nil {
		panic(err)
	}
	var payments atomic.Int64
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()))
	srv.RegisterService(&serviceDesc, &service{create: func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String(fmt.Sprintf("pay_%d for %s", payments.Add(1), req.GetValue())), nil
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	cc, err := grpc.NewClient(ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()

	// The application's own retry loop: one key for every attempt.
	ctx := idemgrpc.WithKey(context.Background(), "order-1042")
	for range 2 {
		var hdr metadata.MD
		out := new(wrapperspb.StringValue)
		if err := cc.Invoke(ctx, methodCreate, wrapperspb.String("12.50 EUR"), out, grpc.Header(&hdr)); err != nil {
			panic(err)
		}
		fmt.Println(out.GetValue(), hdr.Get(idemgrpc.ReplayedMetadata))
	}
	// Output:
	// pay_1 for 12.50 EUR []
	// pay_1 for 12.50 EUR [true]
}

func ExampleCheckKey() {
	fmt.Println(idemgrpc.CheckKey("8e03978e-40d5-43e8-bc93-6894a57f9324"))
	fmt.Println(idemgrpc.CheckKey("order 1042"))
	// Output:
	// <nil>
	// idem: invalid key: byte 5 is ' ', not a visible ASCII character
}
