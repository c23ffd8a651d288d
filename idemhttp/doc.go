// Package idemhttp is net/http middleware for the Idempotency-Key request
// header (IETF draft-ietf-httpapi-idempotency-key-header), built on an idem
// Guard, so it holds across processes and machines that share a store.
//
//	m, err := idemhttp.New(store,
//		idemhttp.WithPrincipal(apiKeyOf), // keys are scoped per caller
//		idemhttp.WithRequired(),
//	)
//	http.Handle("POST /payments", m.Handler(createPayment))
//
// # What a request gets
//
// Requests whose method is not guarded (POST and PATCH by default,
// WithMethods) pass through untouched, as do guarded requests without a key
// unless WithRequired is set. For the others:
//
//   - The first request with a key runs the handler once. It writes to the
//     client directly (http.Flusher, http.Hijacker and
//     http.ResponseController work as without the middleware) while its
//     status, headers and body are recorded.
//   - A later request with the same key and principal, from any process,
//     gets the recorded response back: the same status, the same headers
//     and the same body bytes, plus "Idempotent-Replayed: true".
//   - A request with the same key while the first one runs gets a 409
//     problem with Retry-After: 1; with WithGuard(idem.OnDuplicate(idem.Wait))
//     it waits for the first one's response instead, for as long as its own
//     context allows (then 409).
//
// Every refusal is an RFC 9457 problem document (application/problem+json)
// whose type names one of the Problem constants:
//
//	400 ProblemKeyMissing           no key, WithRequired set
//	400 ProblemKeyInvalid           malformed key, or longer than MaxKeyLen
//	401 ProblemUnauthorized         the WithPrincipal function returned an error or ""
//	409 ProblemInProgress           the first request with the key still runs
//	409 ProblemAlreadyProcessed     the key was used, policy idem.Raise
//	409 ProblemResponseNotRecorded  processed, but the response was too large to keep
//	413 ProblemBodyTooLarge         request body over WithMaxBody (or an outer http.MaxBytesReader)
//	422 ProblemKeyReused            same key, another request (fingerprint mismatch)
//	500 ProblemInternal             the record cannot be read
//	503 ProblemStoreUnavailable     the store failed; the handler did not run
//
// In each case but the first request, the handler is not run.
//
// # Keys and principals
//
// The key is parsed by ParseKey: a structured-field string, or the bare
// value many clients send. It is never stored raw: the Guard stores a hash
// of the principal's hash and the key (HMAC with idem.WithSecret, given
// through WithGuard; rotating it with idem.WithSecret(new, old) keeps every
// recorded response replayable, see package idem). The principal, from
// WithPrincipal, names who asks (an API key, an account);
// two principals using the same key never see each other's records. A
// principal function that fails, or returns an empty name, is a 401, so an
// unauthenticated caller cannot use the key space at all.
//
// # Fingerprint
//
// A key names one request: its method, its path (escaped form), its query
// string (the raw query, byte for byte: a different query is a different
// request), the SHA-256 of its body, and the values of the headers named
// with WithFingerprintHeaders ("Host" is the request's host, r.Host). Their hash is the Guard's payload, so a
// request that reuses a key with anything else different gets a 422,
// whatever the state of the first one. The body is read once, up to
// WithMaxBody (413 beyond it, before anything is claimed), and the handler
// gets it unchanged.
//
// # What is recorded
//
// The status; the headers the handler set, as they were when the status
// was written, minus hop-by-hop headers, those named by Connection,
// trailers, and Set-Cookie unless WithReplaySetCookie (headers set in front
// of the middleware, such as a request id, are not recorded: the layers in
// front set them again on each replay); and the body. Headers and body
// together are recorded up to WithMaxRecordedBody. Headers the server
// itself adds later (Date, a sniffed Content-Type, a computed
// Content-Length) are added to the replay the same way.
//
// Responses with a status WithRecordStatus refuses (by default 5xx, and
// 408, 425 and 429, which ask for the same request again) are not
// recorded: the claim is released and the next request with the key runs
// the handler again, as the client's retry of a server error expects. A
// hijacked connection is not recorded either, nor is a handler that
// returns without writing anything after its request context ended (its
// client left: an empty 200 is not its answer). A response over the record
// limit is served in full to the first caller and its replays get a
// ProblemResponseNotRecorded document: never a truncated body.
//
// If the store fails to record the outcome after the handler ran (see
// idem.ErrNotRecorded), the first caller has its response already; the
// key stays claimed until the Guard's takeover threshold and a retry after
// that runs the handler again. The Guard's Observer sees it.
//
// # Fencing
//
// The handler's request context carries the claim's fencing token:
// idem.FencingToken(r.Context()).
//
// # Cost
//
// A first request costs two store round trips (claim, complete), a replay
// one; requests shorter than the Guard's heartbeat interval send no
// heartbeat.
package idemhttp
