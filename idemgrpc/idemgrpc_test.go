package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemgrpc"
	"github.com/idem-go/idem/stores/memstore"
)

func newStore(t testing.TB) storekit.Store {
	s, err := memstore.New()
	require.NoError(t, err)
	return s
}

func newInterceptor(t testing.TB, store storekit.Store, opts ...idemgrpc.Option) *idemgrpc.Interceptor {
	t.Helper()
	ic, err := idemgrpc.New(store, opts...)
	require.NoError(t, err)
	return ic
}

// counted returns a handler that counts its runs and answers "paid:<req>".
func counted(n *atomic.Int64) handlerFunc {
	return func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		i := n.Add(1)
		return wrapperspb.String(fmt.Sprintf("paid:%s:%d", req.GetValue(), i)), nil
	}
}

func call(ctx context.Context, cc *grpc.ClientConn, method, key, req string, opts ...grpc.CallOption) (*wrapperspb.StringValue, error) {
	if key != "" {
		ctx = idemgrpc.WithKey(ctx, key)
	}
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String(req), out, opts...)
	return out, err
}

func TestNewOptions(t *testing.T) {
	_, err := idemgrpc.New(newStore(t),
		nil,
		idemgrpc.WithPrincipal(nil),
		idemgrpc.WithMethods(),
		idemgrpc.WithMethods("Create", "/svc/", "/svc/Create", "/a b/C"),
		idemgrpc.WithRecordCode(nil),
		idemgrpc.WithGuard(idem.WithTTL(0)),
	)
	require.ErrorIs(t, err, idem.ErrInvalidOption)
	for _, want := range []string{"nil option", "WithPrincipal", "no methods", `"Create"`, `"/svc/"`, `"/a b/C"`, "WithRecordCode", "WithTTL"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), `"/svc/Create"`)
	// Every error joined is an *storekit.OptionError.
	var n int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var oe *storekit.OptionError
		if assert.ErrorAs(t, e, &oe, "%v", e) {
			n++
		}
	}
	assert.Equal(t, 8, n)

	_, err = idemgrpc.New(nil)
	assert.ErrorIs(t, err, idem.ErrInvalidOption)

	for _, dup := range []idem.DuplicatePolicy{idem.Return, idem.Raise, idem.Wait} {
		_, err = idemgrpc.New(newStore(t), idemgrpc.WithGuard(idem.OnDuplicate(dup), idem.OnFailure(idem.Lock)))
		var oe *storekit.OptionError
		require.ErrorAs(t, err, &oe, "policy %v", dup)
		assert.Contains(t, oe.Error(), "OnFailure(idem.Lock)")
	}
	_, err = idemgrpc.New(newStore(t), idemgrpc.WithGuard(idem.OnFailure(idem.Unlock)), idemgrpc.WithMethods(methodCreate), idemgrpc.WithRequired())
	assert.NoError(t, err)
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"a", "8e03978e-40d5-43e8-bc93-6894a57f9324", strings.Repeat("k", idemgrpc.MaxKeyLen), `!"#$%&'()*+,-./:;<=>?@[\]^_{|}~`, "order:42/charge"} {
		assert.NoError(t, idemgrpc.CheckKey(k), k)
	}
	for _, k := range []string{"", strings.Repeat("k", idemgrpc.MaxKeyLen+1), "a b", "tab\there", "nl\n", "caf\u00e9", "\x00", "\x7f"} {
		err := idemgrpc.CheckKey(k)
		var ke *storekit.KeyError
		assert.ErrorAs(t, err, &ke, "%q", k)
		assert.ErrorIs(t, err, idem.ErrInvalidKey, "%q", k)
	}
	assert.Len(t, idemgrpc.NewKey(), 26)
	assert.NoError(t, idemgrpc.CheckKey(idemgrpc.NewKey()))
	assert.NotEqual(t, idemgrpc.NewKey(), idemgrpc.NewKey())
}

// failingStore fails every operation, as an unreachable store does.
type failingStore struct{ storekit.Store }

var errDown = errors.New("store down")

func (failingStore) Claim(context.Context, storekit.ClaimRequest) (storekit.ClaimResult, error) {
	return storekit.ClaimResult{}, errDown
}
func (failingStore) Get(context.Context, string) (*storekit.Record, error) { return nil, errDown }

// A refusalCase is a call the interceptor refuses without running the
// handler, and the code it answers with.
type refusalCase struct {
	name   string
	store  func(t *testing.T) storekit.Store
	opts   []idemgrpc.Option
	before func(t *testing.T, cc *grpc.ClientConn) // calls that may run the handler
	call   func(ctx context.Context, cc *grpc.ClientConn) error
	code   codes.Code
}

// principalFromClient names the caller by its x-client metadata.
var principalFromClient = idemgrpc.WithPrincipal(func(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-client"); len(v) == 1 && v[0] != "" {
		return v[0], nil
	}
	return "", errors.New("anonymous")
})

// withClient sends c as the caller's x-client metadata.
func withClient(ctx context.Context, c string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-client", c)
}

// keyRefusalCases are calls refused for their key or their caller.
func keyRefusalCases() []refusalCase {
	principal := principalFromClient
	return []refusalCase{
		{
			name: "no key, required",
			opts: []idemgrpc.Option{idemgrpc.WithRequired()},
			call: func(ctx context.Context, cc *grpc.ClientConn) error {
				_, err := call(ctx, cc, methodCreate, "", "a")
				return err
			},
			code: codes.InvalidArgument,
		},
		{
			name: "key too long",
			call: func(ctx context.Context, cc *grpc.ClientConn) error {
				_, err := call(ctx, cc, methodCreate, strings.Repeat("k", idemgrpc.MaxKeyLen+1), "a")
				return err
			},
			code: codes.InvalidArgument,
		},
		{
			name: "key with a space",
			call: func(ctx context.Context, cc *grpc.ClientConn) error {
				_, err := call(ctx, cc, methodCreate, "a key", "a")
				return err
			},
			code: codes.InvalidArgument,
		},
		{
			name: "two keys",
			call: func(ctx context.Context, cc *grpc.ClientConn) error {
				ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.KeyMetadata, "k1", idemgrpc.KeyMetadata, "k2")
				return cc.Invoke(ctx, methodCreate, wrapperspb.String("a"), new(wrapperspb.StringValue))
			},
			code: codes.InvalidArgument,
		},
		{
			name: "caller not identified",
			opts: []idemgrpc.Option{principal},
			call: func(ctx context.Context, cc *grpc.ClientConn) error {
				_, err := call(ctx, cc, methodCreate, "k", "a")
				return err
			},
			code: codes.Unauthenticated,
		},
	}
}

// conflictRefusalCases are calls refused for what the store holds, or
// because the store fails.
func conflictRefusalCases() []refusalCase {
	principal := principalFromClient
	return []refusalCase{
		{
			name: "same key, other request",
			before: func(t *testing.T, cc *grpc.ClientConn) {
				_, err := call(context.Background(), cc, methodCreate, "k", "a")
				require.NoError(t, err)
			},
			call: func(ctx context.Context, cc *grpc.ClientConn) error {
				_, err := call(ctx, cc, methodCreate, "k", "b")
				return err
			},
			code: codes.FailedPrecondition,
		},
		{
			name: "same key, other request, same principal",
			opts: []idemgrpc.Option{principal},
			before: func(t *testing.T, cc *grpc.ClientConn) {
				_, err := call(withClient(context.Background(), "c1"), cc, methodCreate, "k", "a")
				require.NoError(t, err)
			},
			call: func(ctx context.Context, cc *grpc.ClientConn) error {
				_, err := call(withClient(ctx, "c1"), cc, methodCreate, "k", "b")
				return err
			},
			code: codes.FailedPrecondition,
		},
		{
			name:  "store failure",
			store: func(t *testing.T) storekit.Store { return failingStore{newStore(t)} },
			call: func(ctx context.Context, cc *grpc.ClientConn) error {
				_, err := call(ctx, cc, methodCreate, "k", "a")
				return err
			},
			code: codes.Unavailable,
		},
		{
			name: "already processed, Raise",
			opts: []idemgrpc.Option{idemgrpc.WithGuard(idem.OnDuplicate(idem.Raise))},
			before: func(t *testing.T, cc *grpc.ClientConn) {
				_, err := call(context.Background(), cc, methodCreate, "k", "a")
				require.NoError(t, err)
			},
			call: func(ctx context.Context, cc *grpc.ClientConn) error {
				_, err := call(ctx, cc, methodCreate, "k", "a")
				return err
			},
			code: codes.AlreadyExists,
		},
	}
}

// TestRefusals: every refusal has its code, and the handler does not run
// for the refused call.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	cases := append(keyRefusalCases(), conflictRefusalCases()...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			if tc.store != nil {
				store = tc.store(t)
			}
			var runs atomic.Int64
			cc := dial(t, serve(t, newInterceptor(t, store, tc.opts...).Unary(), &service{create: counted(&runs)}))
			if tc.before != nil {
				tc.before(t, cc)
			}
			before := runs.Load()
			err := tc.call(ctx, cc)
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Equal(t, before, runs.Load(), "the handler ran for a refused call")
		})
	}

	t.Run("in progress", testRefusedInProgress)
}

// testRefusedInProgress checks a call made while the key's first call
// runs is refused, and the first call's result is kept.
func testRefusedInProgress(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan struct{})
	var runs atomic.Int64
	cc := dial(t, serve(t, newInterceptor(t, newStore(t)).Unary(), &service{create: func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		close(started)
		<-release
		return wrapperspb.String("done"), nil
	}}))
	first := make(chan error, 1)
	go func() {
		_, err := call(ctx, cc, methodCreate, "k", "a")
		first <- err
	}()
	<-started
	_, err := call(ctx, cc, methodCreate, "k", "a")
	assert.Equal(t, codes.Aborted, status.Code(err), "%v", err)
	close(release)
	require.NoError(t, <-first)
	out, err := call(ctx, cc, methodCreate, "k", "a")
	require.NoError(t, err)
	assert.Equal(t, "done", out.GetValue())
	assert.EqualValues(t, 1, runs.Load())
}

// TestRecordedCodes: OK and the codes a client does not retry are
// recorded and replayed; those it retries run the handler again.
func TestRecordedCodes(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		err      error // the handler's answer; nil: a response
		opts     []idemgrpc.Option
		recorded bool
	}{
		{nil, nil, true},
		{status.Error(codes.NotFound, "no such account"), nil, true},
		{status.Error(codes.InvalidArgument, "amount is negative"), nil, true},
		{status.Error(codes.FailedPrecondition, "account closed"), nil, true},
		{status.Error(codes.PermissionDenied, "no"), nil, true},
		{status.Error(codes.AlreadyExists, "dup"), nil, true},
		{status.Error(codes.Unavailable, "down"), nil, false},
		{status.Error(codes.ResourceExhausted, "quota"), nil, false},
		{status.Error(codes.Aborted, "conflict"), nil, false},
		{status.Error(codes.DeadlineExceeded, "slow"), nil, false},
		{status.Error(codes.Internal, "bug"), nil, false},
		{status.Error(codes.Unknown, "?"), nil, false},
		{errors.New("a plain error is Unknown"), nil, false},
		{context.Canceled, nil, false},
		{status.Error(codes.Internal, "bug"), []idemgrpc.Option{idemgrpc.WithRecordCode(func(codes.Code) bool { return true })}, true},
		{status.Error(codes.NotFound, "gone"), []idemgrpc.Option{idemgrpc.WithRecordCode(func(c codes.Code) bool { return c != codes.NotFound })}, false},
	}
	for i, tc := range cases {
		name := "OK"
		if tc.err != nil {
			name = status.Convert(tc.err).Code().String()
		}
		t.Run(fmt.Sprintf("%d-%s", i, name), func(t *testing.T) {
			var runs atomic.Int64
			cc := dial(t, serve(t, newInterceptor(t, newStore(t), tc.opts...).Unary(), &service{create: func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				n := runs.Add(1)
				if tc.err != nil {
					return nil, tc.err
				}
				return wrapperspb.String(fmt.Sprint("run ", n)), nil
			}}))
			out1, err1 := call(ctx, cc, methodCreate, "k", "a")
			var hdr metadata.MD
			out2, err2 := call(ctx, cc, methodCreate, "k", "a", grpc.Header(&hdr))
			if tc.recorded {
				assert.EqualValues(t, 1, runs.Load())
				assert.Equal(t, []string{"true"}, hdr.Get(idemgrpc.ReplayedMetadata))
				assert.Equal(t, status.Convert(err1).Proto().String(), status.Convert(err2).Proto().String())
				assert.True(t, proto.Equal(out1, out2), "%v %v", out1, out2)
			} else {
				assert.EqualValues(t, 2, runs.Load())
				assert.Empty(t, hdr.Get(idemgrpc.ReplayedMetadata))
				assert.Equal(t, status.Code(err1), status.Code(err2))
			}
		})
	}
}

// rawCodec hands the client the response's bytes as they came off the
// wire, so that a replay can be compared byte for byte.
type rawCodec struct{}

type rawMsg struct{ b []byte }

func (rawCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }
func (rawCodec) Unmarshal(data []byte, v any) error {
	v.(*rawMsg).b = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestReplayBytes: a replay carries the first response's bytes, the header
// and trailer metadata the handler set (and none of the transport's own),
// and the replay marker; a recorded error comes back with its details.
func TestReplayBytes(t *testing.T) {
	ctx := context.Background()
	var runs atomic.Int64
	detail, err := anypb.New(wrapperspb.String("insufficient funds on acct 7"))
	require.NoError(t, err)
	fail := status.New(codes.FailedPrecondition, "declined: \u00e9\u00e8")
	fail, err = fail.WithDetails(wrapperspb.Int64(402), detail)
	require.NoError(t, err)
	cc := dial(t, serve(t, newInterceptor(t, newStore(t)).Unary(), &service{
		create: func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			n := runs.Add(1)
			if err := grpc.SetHeader(ctx, metadata.Pairs("x-payment", "pay_1", "x-multi", "b", "x-multi", "a", "x-raw-bin", "\x00\xff\x01")); err != nil {
				return nil, err
			}
			if err := grpc.SendHeader(ctx, metadata.Pairs("x-sent", "yes")); err != nil {
				return nil, err
			}
			if err := grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", "entry 9", "x-trail-bin", "\x02\x03")); err != nil {
				return nil, err
			}
			return wrapperspb.String(fmt.Sprintf("payment %d for %s", n, req.GetValue())), nil
		},
		refund: func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			runs.Add(1)
			if err := grpc.SetTrailer(ctx, metadata.Pairs("x-reason", "card")); err != nil {
				return nil, err
			}
			return nil, fail.Err()
		},
	}))
	// What the transport adds, not the handler.
	transport := func(md metadata.MD) metadata.MD {
		md = md.Copy()
		delete(md, "content-type")
		delete(md, idemgrpc.ReplayedMetadata)
		return md
	}

	var h1, t1, h2, t2 metadata.MD
	var m1, m2 rawMsg
	require.NoError(t, cc.Invoke(idemgrpc.WithKey(ctx, "k1"), methodCreate, wrapperspb.String("order 1"), &m1, grpc.ForceCodec(rawCodec{}), grpc.Header(&h1), grpc.Trailer(&t1)))
	require.NoError(t, cc.Invoke(idemgrpc.WithKey(ctx, "k1"), methodCreate, wrapperspb.String("order 1"), &m2, grpc.ForceCodec(rawCodec{}), grpc.Header(&h2), grpc.Trailer(&t2)))
	assert.EqualValues(t, 1, runs.Load())
	assert.Equal(t, m1.b, m2.b, "replayed bytes")
	assert.NotEmpty(t, m1.b)
	assert.Empty(t, h1.Get(idemgrpc.ReplayedMetadata))
	assert.Equal(t, []string{"true"}, h2.Get(idemgrpc.ReplayedMetadata))
	assert.Equal(t, metadata.Pairs("x-payment", "pay_1", "x-multi", "b", "x-multi", "a", "x-raw-bin", "\x00\xff\x01", "x-sent", "yes"), transport(h1))
	assert.Equal(t, transport(h1), transport(h2))
	assert.Equal(t, metadata.Pairs("x-ledger", "entry 9", "x-trail-bin", "\x02\x03"), t1)
	assert.Equal(t, t1, t2)

	var e1, e2 metadata.MD
	err1 := cc.Invoke(idemgrpc.WithKey(ctx, "k2"), methodRefund, wrapperspb.String("r"), new(wrapperspb.StringValue), grpc.Trailer(&e1))
	err2 := cc.Invoke(idemgrpc.WithKey(ctx, "k2"), methodRefund, wrapperspb.String("r"), new(wrapperspb.StringValue), grpc.Trailer(&e2))
	assert.EqualValues(t, 2, runs.Load())
	b1, err := proto.MarshalOptions{Deterministic: true}.Marshal(status.Convert(err1).Proto())
	require.NoError(t, err)
	b2, err := proto.MarshalOptions{Deterministic: true}.Marshal(status.Convert(err2).Proto())
	require.NoError(t, err)
	assert.Equal(t, b1, b2)
	assert.True(t, proto.Equal(fail.Proto(), status.Convert(err2).Proto()), "%v", status.Convert(err2).Proto())
	assert.Equal(t, e1.Get("x-reason"), e2.Get("x-reason"))
	assert.Equal(t, []string{"card"}, e2.Get("x-reason"))
	// The transport's grpc-status-details-bin is the same bytes too.
	assert.Equal(t, e1.Get("grpc-status-details-bin"), e2.Get("grpc-status-details-bin"))
}

// TestScoping: the same key from two principals, or on two methods, names
// two calls; each caller replays only its own.
func TestScoping(t *testing.T) {
	ctx := context.Background()
	var runs atomic.Int64
	ic := newInterceptor(t, newStore(t), idemgrpc.WithPrincipal(func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-client"); len(v) == 1 {
			return v[0], nil
		}
		return "", errors.New("anonymous")
	}))
	cc := dial(t, serve(t, ic.Unary(), &service{create: counted(&runs)}))
	as := func(c string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-client", c) }

	a1, err := call(as("alice"), cc, methodCreate, "k", "x")
	require.NoError(t, err)
	b1, err := call(as("bob"), cc, methodCreate, "k", "x")
	require.NoError(t, err)
	r1, err := call(as("alice"), cc, methodRefund, "k", "x")
	require.NoError(t, err)
	assert.EqualValues(t, 3, runs.Load())
	a2, err := call(as("alice"), cc, methodCreate, "k", "x")
	require.NoError(t, err)
	b2, err := call(as("bob"), cc, methodCreate, "k", "x")
	require.NoError(t, err)
	r2, err := call(as("alice"), cc, methodRefund, "k", "x")
	require.NoError(t, err)
	assert.EqualValues(t, 3, runs.Load())
	assert.Equal(t, a1.GetValue(), a2.GetValue())
	assert.Equal(t, b1.GetValue(), b2.GetValue())
	assert.Equal(t, r1.GetValue(), r2.GetValue())
	assert.NotEqual(t, a1.GetValue(), b1.GetValue())
	// A principal whose name is a prefix of another's, and a key that
	// would complete it, still name different calls.
	_, err = call(as("alice:"), cc, methodCreate, "k", "x")
	require.NoError(t, err)
	assert.EqualValues(t, 4, runs.Load())
}

// TestWait: under idem.Wait a duplicate waits for the first call and gets
// its outcome; its own deadline bounds the wait.
func TestWait(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan struct{})
	var runs atomic.Int64
	cc := dial(t, serve(t, newInterceptor(t, newStore(t), idemgrpc.WithGuard(idem.OnDuplicate(idem.Wait))).Unary(), &service{create: func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		close(started)
		<-release
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-payment", "pay_9"))
		return wrapperspb.String("first"), nil
	}}))
	first := make(chan error, 1)
	go func() {
		_, err := call(ctx, cc, methodCreate, "k", "a")
		first <- err
	}()
	<-started

	// A caller whose deadline ends while the first call runs.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := call(short, cc, methodCreate, "k", "a")
	cancel()
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)

	var wg sync.WaitGroup
	results := make([]*wrapperspb.StringValue, 4)
	headers := make([]metadata.MD, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = call(ctx, cc, methodCreate, "k", "a", grpc.Header(&headers[i]))
		}()
	}
	time.Sleep(50 * time.Millisecond) // let them reach the wait (not asserted: they wait either way)
	close(release)
	require.NoError(t, <-first)
	wg.Wait()
	for i := range results {
		require.NoError(t, errs[i])
		assert.Equal(t, "first", results[i].GetValue())
		assert.Equal(t, []string{"pay_9"}, headers[i].Get("x-payment"))
		assert.Equal(t, []string{"true"}, headers[i].Get(idemgrpc.ReplayedMetadata))
	}
	assert.EqualValues(t, 1, runs.Load())
	// A waiter with another request is refused, not made to wait.
	_, err = call(ctx, cc, methodCreate, "k", "b")
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
}

// TestPassThrough: methods not guarded, and calls without a key when none
// is required, reach the handler every time.
func TestPassThrough(t *testing.T) {
	ctx := context.Background()
	var runs atomic.Int64
	cc := dial(t, serve(t, newInterceptor(t, newStore(t), idemgrpc.WithMethods(methodCreate)).Unary(), &service{create: counted(&runs)}))
	for range 2 {
		_, err := call(ctx, cc, methodRefund, "k", "x")
		require.NoError(t, err)
		_, err = call(ctx, cc, methodCreate, "", "x")
		require.NoError(t, err)
	}
	assert.EqualValues(t, 4, runs.Load())
	_, err := call(ctx, cc, methodCreate, "k", "x")
	require.NoError(t, err)
	_, err = call(ctx, cc, methodCreate, "k", "x")
	require.NoError(t, err)
	assert.EqualValues(t, 5, runs.Load())
}

// TestFencingToken: the handler's context carries the claim's token.
func TestFencingToken(t *testing.T) {
	var tok int64
	var ok bool
	cc := dial(t, serve(t, newInterceptor(t, newStore(t)).Unary(), &service{create: func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		tok, ok = idem.FencingToken(ctx)
		return wrapperspb.String("x"), nil
	}}))
	_, err := call(context.Background(), cc, methodCreate, "k", "x")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.EqualValues(t, 1, tok)
}

// TestClientInterceptor: a call without a key gets a fresh one, the same on
// every attempt grpc's retry policy makes; a key set with WithKey is kept;
// an invalid one is refused before anything is sent.
func TestClientInterceptor(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var seen []string
	addr := serve(t, nil, &service{create: func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, strings.Join(md.Get(idemgrpc.KeyMetadata), ","))
		if req.GetValue() == "flaky" && len(seen)%3 != 0 {
			return nil, status.Error(codes.Unavailable, "try again")
		}
		return wrapperspb.String("ok"), nil
	}})
	cc := dial(t, addr, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()), grpc.WithDefaultServiceConfig(retryConfig(5)))

	_, err := call(ctx, cc, methodCreate, "", "flaky")
	require.NoError(t, err)
	require.Len(t, seen, 3, "grpc's retry policy made 3 attempts")
	assert.NoError(t, idemgrpc.CheckKey(seen[0]))
	assert.Equal(t, seen[0], seen[1])
	assert.Equal(t, seen[0], seen[2])

	_, err = call(ctx, cc, methodCreate, "", "flaky")
	require.NoError(t, err)
	require.Len(t, seen, 6)
	assert.NotEqual(t, seen[0], seen[3], "a new logical call has a new key")
	assert.Equal(t, seen[3], seen[5])

	_, err = call(ctx, cc, methodCreate, "mine-1", "x")
	require.NoError(t, err)
	assert.Equal(t, "mine-1", seen[6])

	_, err = call(ctx, cc, methodCreate, "not valid", "x")
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Len(t, seen, 7, "nothing sent")
}

// retryConfig is a service config whose retry policy retries the codes a
// guarded server answers while the outcome is not settled.
func retryConfig(attempts int) string {
	return fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":%d,"initialBackoff":"0.005s","maxBackoff":"0.05s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE","ABORTED"]}}]}`, serviceName, attempts)
}
