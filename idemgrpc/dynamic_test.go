package idemgrpc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idem-go/idem/idemgrpc"
)

// TestUnregisteredResponseType: a response whose type no registry knows
// (a dynamic message) is replayed, by another Interceptor on the store, as
// its recorded bytes.
func TestUnregisteredResponseType(t *testing.T) {
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("idemgrpc_dynamic_test.proto"),
		Package: proto.String("idemgrpc.dyn"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Receipt"),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name: proto.String("id"), Number: proto.Int32(1), JsonName: proto.String("id"),
				Type:  descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			}},
		}},
	}, nil)
	require.NoError(t, err)
	md := fd.Messages().ByName("Receipt")
	receipt := dynamicpb.NewMessage(md)
	receipt.Set(md.Fields().ByName("id"), protoreflectString("rcpt_1"))
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(receipt)
	require.NoError(t, err)

	store := newStore(t)
	info := &grpc.UnaryServerInfo{FullMethod: methodCreate}
	ctx := metadata.NewIncomingContext(grpc.NewContextWithServerTransportStream(context.Background(), nopStream{}),
		metadata.MD{idemgrpc.KeyMetadata: {"k"}})
	runs := 0
	handler := func(ctx context.Context, req any) (any, error) {
		runs++
		return receipt, nil
	}
	out, err := newInterceptor(t, store).Unary()(ctx, wrapperspb.String("x"), info, handler)
	require.NoError(t, err)
	assert.Same(t, receipt, out)
	out, err = newInterceptor(t, store).Unary()(ctx, wrapperspb.String("x"), info, handler)
	require.NoError(t, err)
	assert.Equal(t, 1, runs)
	require.IsType(t, &emptypb.Empty{}, out)
	got, err := proto.Marshal(out.(proto.Message))
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// TestNotProtobuf: a request that is not a protobuf message cannot be
// fingerprinted: Internal, the handler not run.
func TestNotProtobuf(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{idemgrpc.KeyMetadata: {"k"}})
	ran := false
	_, err := newInterceptor(t, newStore(t)).Unary()(ctx, "a string", &grpc.UnaryServerInfo{FullMethod: methodCreate},
		func(ctx context.Context, req any) (any, error) { ran = true; return nil, nil })
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.False(t, ran)
}

func protoreflectString(s string) protoreflect.Value { return protoreflect.ValueOfString(s) }

// TestZeroInterceptor: an Interceptor not made by New refuses every call
// instead of panicking or running the handler unguarded.
func TestZeroInterceptor(t *testing.T) {
	for _, ic := range []*idemgrpc.Interceptor{nil, {}} {
		ran := false
		_, err := ic.Unary()(context.Background(), wrapperspb.String("x"), &grpc.UnaryServerInfo{FullMethod: methodCreate},
			func(ctx context.Context, req any) (any, error) { ran = true; return nil, nil })
		assert.Equal(t, codes.Internal, status.Code(err))
		assert.False(t, ran)
	}
}
