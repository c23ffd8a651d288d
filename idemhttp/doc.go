// Package idemhttp is net/http middleware for the Idempotency-Key request
// header (IETF draft-ietf-httpapi-idempotency-key-header), built on an idem
// Guard, so it holds across processes and machines that share a store:
//
//	store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: addr}))
//	m, err := idemhttp.New(store,
//		idemhttp.WithPrincipal(apiKeyOf), // keys are scoped per caller
//		idemhttp.WithRequired(),
//	)
//	http.Handle("POST /payments", m.Handler(createPayment))
//
// The first request with a key runs the handler once, writing to the
// client as it would without the middleware, while its status, headers and
// body are recorded. A later request with the same key and principal, from
// any process, gets the recorded response back, byte for byte, with
// "Idempotent-Replayed: true". A request with the key while the first one
// runs gets a 409 with a Retry-After, or, with
// WithGuard(idem.OnDuplicate(idem.Wait)), waits for the first one's
// response. Requests whose method is not guarded (POST and PATCH by
// default, WithMethods), those a WithSkip function picks, and requests
// without a key (unless WithRequired) pass through untouched.
//
// Every refusal is an RFC 9457 problem document (application/problem+json)
// whose type names one of the Problem constants; the handler does not run:
//
//	400 ProblemKeyMissing           no key, WithRequired set
//	400 ProblemKeyInvalid           malformed key, or longer than MaxKeyLen
//	401 ProblemUnauthorized         the WithPrincipal function returned an error or ""
//	409 ProblemInProgress           the first request with the key still runs
//	409 ProblemAlreadyProcessed     the key was used, policy idem.Raise
//	409 ProblemResponseNotRecorded  processed, but the response was too large to keep
//	413 ProblemBodyTooLarge         request body over WithMaxBody (or an outer http.MaxBytesReader)
//	422 ProblemKeyReused            same key, another request (fingerprint mismatch)
//	500 ProblemInternal             the record cannot be read, or is damaged (idem.ErrCorruptRecord)
//	503 ProblemStoreUnavailable     the store failed; the handler did not run
//
// The key is never stored raw, and two principals using the same key never
// see each other's records. A key names one request: its method, path,
// query, body and the headers named with WithFingerprintHeaders; reusing
// it for another request is a 422. Responses that ask for a retry (5xx,
// 408, 425, 429; WithRecordStatus) are not recorded, so the client's retry
// runs the handler again. Headers that name one response (Date, request
// and trace ids; WithReplayHeaders) and Set-Cookie (WithReplaySetCookie)
// are not replayed. The handler's request context carries the claim's
// fencing token: idem.FencingToken(r.Context()). A first request costs two
// store round trips, a replay one.
//
// What is recorded and replayed, header by header, what a retry gets when
// the store fails after the handler ran, and what a request costs are
// described in [docs/idemhttp.md].
//
// [docs/idemhttp.md]: https://github.com/idem-go/idem/blob/main/docs/idemhttp.md
package idemhttp
