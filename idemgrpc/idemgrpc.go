package idemgrpc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/idem-go/idem"
)

// Interceptor guards unary gRPC methods with the idempotency-key request
// metadata. It is safe for concurrent use; one Interceptor may serve every
// method of a server (keys are scoped by full method name).
type Interceptor struct {
	cfg   config
	guard *idem.Guard[record]
	types sync.Map // message full name -> protoreflect.MessageType
}

// errNotRecorded makes the Guard release the claim of a call the
// interceptor does not record (a code WithRecordCode refuses, a response
// that is not a protobuf message), so the next call with the key runs the
// handler again.
var errNotRecorded = errors.New("idemgrpc: outcome not recorded")

// New returns an Interceptor whose records live in store. Every invalid
// option (its own, or one given to WithGuard), and a nil store, is
// reported as an *storekit.OptionError, all of them joined in the error, which
// matches idem.ErrInvalidOption.
func New(store storekit.Store, opts ...Option) (*Interceptor, error) {
	c := config{recordCode: DefaultRecordCode}
	for _, o := range opts {
		if o == nil {
			c.invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	gopts := append(c.guardOpts[:len(c.guardOpts):len(c.guardOpts)], idem.WithCodec(codec{}))
	g, err := idem.New[record](store, gopts...)
	if err != nil {
		c.errs = append(c.errs, err)
	} else if info, _ := guardinfo.Of(g); info.Lock {
		c.invalid("WithGuard", "idem.OnFailure(idem.Lock) is refused: a call whose code is not recorded must release its claim, and Lock would keep it as a failure for the TTL (WithRecordCode replays a failing code instead)")
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return &Interceptor{cfg: c, guard: g}, nil
}

// Unary returns the server interceptor. Install it with
// grpc.ChainUnaryInterceptor, after the interceptors that authenticate the
// caller (WithPrincipal reads what they found) and before none that must
// see every handler run.
//
// An Interceptor not made by New (nil, or a zero value) guards nothing: its
// interceptor fails every call with Internal, the handler not run.
func (in *Interceptor) Unary() grpc.UnaryServerInterceptor {
	if in == nil || in.guard == nil {
		return func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			return nil, status.Error(codes.Internal, "idemgrpc: the Interceptor was not made by idemgrpc.New")
		}
	}
	return in.intercept
}

func (in *Interceptor) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if in.cfg.methods != nil && !in.cfg.methods[info.FullMethod] {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var key string
	switch keys := md[KeyMetadata]; len(keys) {
	case 0:
		if !in.cfg.required {
			return handler(ctx, req)
		}
		return nil, status.Error(codes.InvalidArgument, "idemgrpc: this method requires the "+KeyMetadata+" request metadata")
	case 1:
		key = keys[0]
		if err := CheckKey(key); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	default:
		return nil, status.Error(codes.InvalidArgument, "idemgrpc: more than one "+KeyMetadata+" in the request metadata")
	}
	principal := ""
	if in.cfg.principal != nil {
		p, err := in.cfg.principal(ctx)
		if err != nil || p == "" {
			return nil, status.Error(codes.Unauthenticated, "idemgrpc: the caller is not identified, so its idempotency key cannot be scoped")
		}
		principal = p
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "idemgrpc: request of %s is a %T, not a protobuf message", info.FullMethod, req)
	}
	fp, err := fingerprint(info.FullMethod, msg)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: request of %s cannot be encoded: %v", info.FullMethod, err)
	}

	var (
		ran  bool
		resp any
		herr error
	)
	rec, err := in.guard.Do(ctx, scope(in.cfg.principal != nil, principal, info.FullMethod, key), func(ctx context.Context) (record, error) {
		ran = true
		st := &recordingStream{inner: grpc.ServerTransportStreamFromContext(ctx)}
		resp, herr = handler(grpc.NewContextWithServerTransportStream(ctx, st), req)
		return in.record(st, resp, herr)
	}, idem.Payload(fp))
	if ran {
		// The handler's own answer, whatever became of its record.
		return resp, herr
	}
	if err != nil {
		return nil, refusal(ctx, err)
	}
	return in.replay(ctx, &rec)
}

// scope is the key the Guard sees: the principal's hash (fixed length, so
// no principal can be spelled like another's prefix), the full method
// (length-prefixed) and the caller's key.
func scope(scoped bool, principal, method, key string) string {
	b := make([]byte, 0, 2*sha256.Size+8+len(method)+len(key))
	if scoped {
		ph := sha256.Sum256([]byte(principal))
		b = hex.AppendEncode(b, ph[:])
	} else {
		b = append(b, '-')
	}
	b = strconv.AppendInt(b, int64(len(method)), 10)
	b = append(b, ':')
	b = append(b, method...)
	b = append(b, key...)
	return string(b)
}

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// fingerprint is the hash a replay must match: the full method and the
// request's deterministic protobuf encoding, length-prefixed.
func fingerprint(method string, msg proto.Message) (string, error) {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	b := append((*bp)[:0], "idemgrpc/fingerprint/v1\x00"...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(method)))
	b = append(b, method...)
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, msg)
	if err != nil {
		return "", err
	}
	*bp = b
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// record turns what the handler did into the record, or errNotRecorded.
func (in *Interceptor) record(st *recordingStream, resp any, herr error) (record, error) {
	var r record
	if herr != nil {
		s, ok := status.FromError(herr)
		if !ok {
			s = status.FromContextError(herr) // as the server itself converts it
		}
		if s.Code() == codes.OK || !in.cfg.recordCode(s.Code()) {
			return r, errNotRecorded
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s.Proto())
		if err != nil {
			return r, errNotRecorded
		}
		r.Status = b
	} else {
		msg, ok := resp.(proto.Message)
		if !ok || msg == nil {
			return r, errNotRecorded
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			return r, errNotRecorded
		}
		mt := msg.ProtoReflect().Type()
		r.Type = string(mt.Descriptor().FullName())
		r.Message = b
		if _, ok := in.types.Load(r.Type); !ok {
			in.types.Store(r.Type, mt)
		}
	}
	st.mu.Lock()
	r.Header, r.Trailer = st.header, st.trailer
	st.mu.Unlock()
	return r, nil
}

// replay answers a duplicate with the recorded outcome.
func (in *Interceptor) replay(ctx context.Context, r *record) (any, error) {
	hdr := make(metadata.MD, len(r.Header)+1)
	for _, p := range r.Header {
		hdr[p.k] = append(hdr[p.k], p.v)
	}
	hdr[ReplayedMetadata] = []string{"true"}
	if err := grpc.SetHeader(ctx, hdr); err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: replay: %v", err)
	}
	if len(r.Trailer) > 0 {
		tr := make(metadata.MD, len(r.Trailer))
		for _, p := range r.Trailer {
			tr[p.k] = append(tr[p.k], p.v)
		}
		if err := grpc.SetTrailer(ctx, tr); err != nil {
			return nil, status.Errorf(codes.Internal, "idemgrpc: replay: %v", err)
		}
	}
	if r.Status != nil {
		var sp spb.Status
		if err := proto.Unmarshal(r.Status, &sp); err != nil {
			return nil, status.Errorf(codes.Internal, "idemgrpc: recorded status does not decode: %v", err)
		}
		return nil, status.ErrorProto(&sp)
	}
	mt := in.messageType(r.Type)
	if mt == nil {
		// A type this process does not know (a dynamic message): the
		// recorded bytes go out as they are, in a message that carries
		// them as unknown fields.
		m := &emptypb.Empty{}
		m.ProtoReflect().SetUnknown(protoreflect.RawFields(r.Message))
		return m, nil
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(r.Message, m); err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: recorded response does not decode: %v", err)
	}
	return m, nil
}

func (in *Interceptor) messageType(name string) protoreflect.MessageType {
	if mt, ok := in.types.Load(name); ok {
		return mt.(protoreflect.MessageType)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		return nil
	}
	in.types.Store(name, mt)
	return mt
}

// refusal is the status of a call that did not run the handler and has no
// outcome to replay.
func refusal(ctx context.Context, err error) error {
	var se *idem.StoreError
	switch {
	case errors.Is(err, idem.ErrPayloadMismatch):
		return status.Error(codes.FailedPrecondition, "idemgrpc: this idempotency key was already used with a different request")
	case errors.Is(err, idem.ErrInProgress):
		if ctx.Err() != nil { // waited (idem.Wait) until the caller's deadline
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Error(codes.Aborted, "idemgrpc: a call with this idempotency key is in progress; retry later")
	case errors.Is(err, idem.ErrDuplicate):
		return status.Error(codes.AlreadyExists, "idemgrpc: a call with this idempotency key was already processed")
	case errors.Is(err, idem.ErrResultUnavailable):
		return status.Error(codes.AlreadyExists, "idemgrpc: a call with this idempotency key was processed, but its outcome was not kept")
	case errors.As(err, &se):
		return status.Error(codes.Unavailable, "idemgrpc: the idempotency store is unavailable; the call was not processed")
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Internal, "idemgrpc: the record of this idempotency key cannot be read")
}

// recordingStream passes the handler's metadata on to the real stream and
// keeps a copy of what was accepted.
type recordingStream struct {
	inner           grpc.ServerTransportStream
	mu              sync.Mutex
	header, trailer []pair
}

var errNoStream = errors.New("idemgrpc: no server transport stream in the context")

func (s *recordingStream) Method() string {
	if s.inner == nil {
		return ""
	}
	return s.inner.Method()
}

func (s *recordingStream) SetHeader(md metadata.MD) error { return s.keep(md, false, s.setHeader) }

func (s *recordingStream) SendHeader(md metadata.MD) error { return s.keep(md, false, s.sendHeader) }

func (s *recordingStream) SetTrailer(md metadata.MD) error { return s.keep(md, true, s.setTrailer) }

func (s *recordingStream) setHeader(md metadata.MD) error  { return s.inner.SetHeader(md) }
func (s *recordingStream) sendHeader(md metadata.MD) error { return s.inner.SendHeader(md) }
func (s *recordingStream) setTrailer(md metadata.MD) error { return s.inner.SetTrailer(md) }

// keep forwards md and, once the real stream accepted it, records it
// (minus the replay marker, which only a replay sets).
func (s *recordingStream) keep(md metadata.MD, trailer bool, forward func(metadata.MD) error) error {
	if s.inner == nil {
		return errNoStream
	}
	if err := forward(md); err != nil {
		return err
	}
	md = md.Copy()
	delete(md, ReplayedMetadata)
	s.mu.Lock()
	defer s.mu.Unlock()
	if trailer {
		s.trailer = mdPairs(s.trailer, md)
	} else {
		s.header = mdPairs(s.header, md)
	}
	return nil
}
