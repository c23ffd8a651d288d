// Package idemgrpc makes unary gRPC calls idempotent: a server interceptor
// that runs a method's handler at most once per idempotency key, across
// processes and machines that share an idem store, and a client interceptor
// that gives each logical call one key, so that grpc-go's own retries carry
// it.
//
//	// Server
//	store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: addr}))
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
// The key is the "idempotency-key" request metadata (KeyMetadata): 1 to
// 255 bytes of visible ASCII (CheckKey). UnaryClientInterceptor stamps a
// fresh random key on every unary call that has none, once per logical
// call, so every attempt of a retry policy carries the same key; an
// application that retries by itself names the operation's key with
// WithKey, and the interceptor keeps it.
//
// The first call with a key runs the handler once; its response or status
// and the metadata the handler set are recorded. A later call with the
// same key, principal and method, from any process, gets the recorded
// outcome with "idempotent-replayed: true" and the handler does not run.
// A call with the key while the first one runs fails with Aborted, or,
// with WithGuard(idem.OnDuplicate(idem.Wait)), waits for its outcome.
// Streaming methods, unary methods not named by WithMethods, and calls
// without a key (unless WithRequired) pass through untouched.
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
// Outcomes with a code a client retries (DefaultRecordCode; WithRecordCode)
// are not recorded: the claim is released and the retry runs the handler
// again. The handler's context carries the claim's fencing token:
// idem.FencingToken(ctx). A first call costs two store round trips, a
// replay one.
//
// How a replayed response is decoded and encoded again, the key's scope
// and the request's fingerprint, what happens when the store fails after
// the handler ran, and measured costs are described in [docs/idemgrpc.md].
//
// [docs/idemgrpc.md]: https://github.com/idem-go/idem/blob/main/docs/idemgrpc.md
package idemgrpc
