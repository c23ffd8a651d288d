// Package idemgrpc makes unary gRPC calls idempotent: a server interceptor
// that runs a method's handler at most once per idempotency key, across
// processes and machines that share an idem store, and a client interceptor
// that gives each logical call one key, so that grpc-go's own retries carry
// it.
//
//	// Server
//	ic, err := idemgrpc.New(store,
//		idemgrpc.WithPrincipal(callerOf), // keys are scoped per caller
//		idemgrpc.WithMethods("/payments.v1.Payments/Create"),
//		idemgrpc.WithRequired(),
//	)
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(auth, ic.Unary()))
//
//	// Client
//	cc, err := grpc.NewClient(addr,
//		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()),
//		grpc.WithDefaultServiceConfig(retryPolicy), // retries now safe
//	)
//
// # The key
//
// The key is the "idempotency-key" request metadata (KeyMetadata): 1 to
// 255 bytes (MaxKeyLen) of visible ASCII, '!' to '~' (CheckKey). A UUID, a
// ULID, an order number will do. One value only: two are refused.
//
// UnaryClientInterceptor stamps a fresh random key (NewKey, 128 bits) on
// every unary call that has none. grpc-go runs a unary client interceptor
// once per logical call, around all of its attempts, so the attempts of a
// service-config retryPolicy and transparent retries carry the same key
// (as would hedged attempts: grpc-go parses a hedgingPolicy but does not
// send hedges yet), and the server runs the handler once however many of
// them reach it. An application that retries by itself, or that must send the
// same operation again later (after a crash, from another replica), names
// the operation's key with WithKey; the client interceptor keeps it.
//
// # What a call gets
//
// Streaming methods pass through untouched: the package has no stream
// interceptor, and its unary interceptor only sees unary calls. Unary
// methods not named by WithMethods (when it is given) pass through too, as
// do guarded calls without a key unless WithRequired is set. For the
// others:
//
//   - The first call with a key runs the handler once. Its response
//     message, or its status (code, message and details), and the header
//     and trailer metadata the handler set (grpc.SetHeader, grpc.SendHeader,
//     grpc.SetTrailer) are recorded. Metadata set by interceptors in front
//     of this one, and the transport's own (content-type, grpc-status,
//     grpc-message, grpc-status-details-bin), are not.
//   - A later call with the same key, principal and method, from any
//     process, gets the recorded outcome: the same response message (its
//     bytes on the wire are those of its deterministic encoding, see
//     below), or the same status with the same details, and the same header
//     and trailer metadata, with the header "idempotent-replayed: true"
//     (ReplayedMetadata) added. The handler does not run.
//   - A call with the same key while the first one runs fails with Aborted
//     (grpc-go retries it when the retry policy names ABORTED); with
//     WithGuard(idem.OnDuplicate(idem.Wait)) it waits for the first call's
//     outcome instead, for as long as its own deadline allows (then
//     DeadlineExceeded).
//
// The refusals, each with the handler not run:
//
//	InvalidArgument     no key where WithRequired asks for one; a key that is
//	                    empty, over MaxKeyLen, or not visible ASCII; two keys
//	Unauthenticated     the WithPrincipal function returned an error or ""
//	FailedPrecondition  the key was used with another request (fingerprint)
//	Aborted             a call with the key is in progress (idem.Return)
//	AlreadyExists       the key was used, policy idem.Raise; or its outcome
//	                    could not be kept (idem.ErrResultUnavailable)
//	Unavailable         the store failed; retry
//	Internal            the record cannot be read; the request is not a
//	                    protobuf message
//
// # What is recorded
//
// Every outcome is recorded but those WithRecordCode refuses. By default
// (DefaultRecordCode) those are the codes a client retries: Unavailable,
// ResourceExhausted, Aborted, DeadlineExceeded, Internal, Unknown, and
// Canceled (a handler whose caller left). A handler error that is not a
// status is converted as grpc-go converts it (a context error to Canceled
// or DeadlineExceeded, anything else to Unknown). An outcome that is not
// recorded releases the claim: the next call with the key runs the handler
// again, which is what the client's retry of such a code expects. A
// response that is not a protobuf message (a server with another codec) is
// not recorded either.
//
// A replayed response is decoded into its own message type (found by its
// full name, first in what this Interceptor has seen, then in
// protoregistry.GlobalTypes), so interceptors in front of this one see the
// message they would see for a first call. grpc-go then encodes it as it
// encodes every response: for a message without map fields that is
// exactly the recorded deterministic encoding, so the replay's bytes are
// the first response's; map entries go out in the order grpc-go's codec
// picks, as they do for any two sends of one message. A response whose type
// is not registered in this process is sent as the recorded bytes
// themselves, inside an emptypb.Empty that carries them as unknown fields.
//
// If the store fails to record the outcome after the handler ran (see
// idem.ErrNotRecorded), the first caller gets its response all the same;
// the key stays claimed until the Guard's takeover threshold and a retry
// after that runs the handler again. The Guard's Observer sees it.
//
// # Scope and fingerprint
//
// The key is never stored raw. The Guard's key is the SHA-256 of the
// principal (WithPrincipal; fixed length, so no principal reads as a prefix
// of another), the full method name and the key, which the Guard hashes
// again into its storage key (HMAC with idem.WithSecret, given through
// WithGuard; rotating it with idem.WithSecret(new, old) keeps every
// recorded response replayable, see package idem): one caller never
// receives another's response, and one key on two methods names two
// calls.
//
// The request's fingerprint is the SHA-256 of the full method name and the
// request message's deterministic protobuf encoding; it is the Guard's
// payload, so a call that reuses a key with another request fails with
// FailedPrecondition, whatever the state of the first call. (Deterministic
// encoding is stable within one build of a message type; a field added to
// the message changes it only for requests that set the field.)
//
// # Fencing
//
// The handler's context carries the claim's fencing token:
// idem.FencingToken(ctx).
//
// # Cost
//
// A first call costs two store round trips (claim, complete), a replay one
// (a read) and one decoding of the record; calls shorter than the Guard's
// heartbeat interval send no heartbeat. On a memory store, on two busy
// shared cores, the interceptor costs 5–16µs per replay and 30–60µs per
// first call (BenchmarkInterceptor); over loopback a replay costs about
// what a bare call to a trivial handler does (BenchmarkLoopback).
package idemgrpc
