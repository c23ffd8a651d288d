package idemmcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/jcs"
	"github.com/idem-go/idem/storekit"
)

const methodCallTool = "tools/call"

// Middleware makes tool calls idempotent. It is safe for concurrent use;
// one Middleware may serve every tool of a server, and several servers
// (keys are scoped by tool name).
type Middleware struct {
	cfg   config
	guard *idem.Guard[[]byte]
}

// errNotRecorded makes the Guard release the claim of a call whose
// outcome is not recorded, so that the next call with the key runs the
// tool again.
var errNotRecorded = errors.New("idemmcp: outcome not recorded")

// New returns a Middleware whose records live in store. Every invalid
// option (its own, or one given to WithGuard), and a nil store, is
// reported as an *storekit.OptionError, all of them joined in the error,
// which matches idem.ErrInvalidOption.
func New(store storekit.Store, opts ...Option) (*Middleware, error) {
	c := config{record: DefaultRecordResult}
	for _, o := range opts {
		if o == nil {
			c.invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	gopts := append(c.guardOpts[:len(c.guardOpts):len(c.guardOpts)], idem.WithCodec(codec{}))
	g, err := idem.New[[]byte](store, gopts...)
	if err != nil {
		c.errs = append(c.errs, err)
	} else if info, _ := guardinfo.Of(g); info.Lock {
		c.invalid("WithGuard", "idem.OnFailure(idem.Lock) is refused: a result that is not recorded must release its key, and Lock would keep it as a failure for the TTL (WithRecordResult records tool errors instead)")
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return &Middleware{cfg: c, guard: g}, nil
}

// Receiving returns the middleware to install with
// (*mcp.Server).AddReceivingMiddleware. Install it after the middleware
// that must see every request (logging, metrics) and before none that
// must see every tool run. It handles tools/call and passes every other
// method through.
//
// A Middleware not made by New (nil, or a zero value) guards nothing: its
// middleware answers every tools/call with a protocol error, the tool not
// run.
func (m *Middleware) Receiving() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != methodCallTool {
				return next(ctx, method, req)
			}
			if m == nil || m.guard == nil {
				return nil, errors.New("idemmcp: the Middleware was not made by idemmcp.New")
			}
			ctr, ok := req.(*mcp.CallToolRequest)
			if !ok || ctr.Params == nil {
				return next(ctx, method, req)
			}
			return m.call(ctx, ctr, func(ctx context.Context) (mcp.Result, error) { return next(ctx, method, req) })
		}
	}
}

// call guards one tools/call; run runs the rest of the chain (the tool).
func (m *Middleware) call(ctx context.Context, req *mcp.CallToolRequest, run func(context.Context) (mcp.Result, error)) (mcp.Result, error) {
	p := req.Params
	if m.cfg.tools != nil && !m.cfg.tools[p.Name] {
		return run(ctx)
	}
	key, found, why := m.key(p)
	if why != "" {
		return refuse(RefusedInvalidKey, why), nil
	}
	if !found {
		if m.cfg.required {
			return refuse(RefusedKeyRequired, fmt.Sprintf("tool %q requires an idempotency key (_meta %q%s); the tool did not run", p.Name, MetaKey, m.orArgument())), nil
		}
		return run(ctx)
	}
	scoped, principal := m.cfg.scope != nil, ""
	if scoped {
		s, err := m.cfg.scope(ctx, req)
		if err != nil || s == "" {
			return refuse(RefusedUnauthenticated, "the caller is not identified, so its idempotency key cannot be scoped; the tool did not run"), nil
		}
		principal = s
	}
	fp, err := fingerprint(p.Name, p.Arguments)
	if err != nil {
		return refuse(RefusedInvalidArguments, "the arguments have no canonical JSON form ("+err.Error()+"); the tool did not run"), nil
	}

	var (
		ran  bool
		res  mcp.Result
		rerr error
	)
	rec, err := m.guard.Do(ctx, scope(scoped, principal, p.Name, key), func(ctx context.Context) ([]byte, error) {
		ran = true
		res, rerr = run(ctx)
		return m.record(res, rerr)
	}, idem.Payload(fp))
	if ran {
		// The tool's own answer, whatever became of its record.
		return res, rerr
	}
	if err != nil {
		return refusal(ctx, err), nil
	}
	return replay(rec)
}

// key finds the call's key: in _meta, or in the key argument. why is not
// empty when a key is there but is not valid.
func (m *Middleware) key(p *mcp.CallToolParamsRaw) (key string, found bool, why string) {
	if v, ok := p.Meta[MetaKey]; ok {
		s, isString := v.(string)
		if !isString {
			return "", false, "the idempotency key (_meta " + strconv.Quote(MetaKey) + ") is not a string; the tool did not run"
		}
		key, found = s, true
	}
	if m.cfg.keyArg != "" && len(p.Arguments) > 0 {
		var args map[string]json.RawMessage
		if json.Unmarshal(p.Arguments, &args) == nil {
			if raw, ok := args[m.cfg.keyArg]; ok {
				var s string
				if json.Unmarshal(raw, &s) != nil {
					return "", false, "the idempotency key (argument " + strconv.Quote(m.cfg.keyArg) + ") is not a string; the tool did not run"
				}
				if found && s != key {
					return "", false, "the call carries two different idempotency keys (_meta and argument " + strconv.Quote(m.cfg.keyArg) + "); the tool did not run"
				}
				key, found = s, true
			}
		}
	}
	if !found {
		return "", false, ""
	}
	if err := CheckKey(key); err != nil {
		return "", false, "invalid idempotency key: " + err.Error() + "; the tool did not run"
	}
	return key, true, ""
}

func (m *Middleware) orArgument() string {
	if m.cfg.keyArg == "" {
		return ""
	}
	return " or argument " + strconv.Quote(m.cfg.keyArg)
}

// scope is the key the Guard sees: the principal's hash (fixed length, so
// no principal can be spelled like another's prefix), the tool name
// (length-prefixed) and the caller's key.
func scope(scoped bool, principal, tool, key string) string {
	b := make([]byte, 0, 2*sha256.Size+8+len(tool)+len(key))
	if scoped {
		ph := sha256.Sum256([]byte(principal))
		b = hex.AppendEncode(b, ph[:])
	} else {
		b = append(b, '-')
	}
	b = strconv.AppendInt(b, int64(len(tool)), 10)
	b = append(b, ':')
	b = append(b, tool...)
	b = append(b, key...)
	return string(b)
}

// fingerprint is what a replay must match: the tool name and the RFC 8785
// form of the arguments (so that a client that sends the same arguments
// with other spacing or member order is answered). No arguments and an
// empty object are the same.
func fingerprint(tool string, args json.RawMessage) (string, error) {
	b := make([]byte, 0, 32+len(tool)+len(args))
	b = append(b, "idemmcp/fingerprint/v1\x00"...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(tool)))
	b = append(b, tool...)
	if t := bytes.TrimSpace(args); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		b = append(b, "{}"...)
	} else {
		c, err := jcs.Transform(args)
		if err != nil {
			return "", err
		}
		b = append(b, c...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// record turns the tool's answer into the record, or errNotRecorded.
func (m *Middleware) record(res mcp.Result, rerr error) ([]byte, error) {
	if rerr != nil {
		return nil, errNotRecorded
	}
	r, ok := res.(*mcp.CallToolResult)
	if !ok || r == nil || r.NeedsInput() || r.InputRequests != nil || !m.cfg.record(r) {
		return nil, errNotRecorded
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, errNotRecorded
	}
	return b, nil
}

// replay answers a duplicate with the recorded result, marked as a replay.
func replay(rec []byte) (mcp.Result, error) {
	var r mcp.CallToolResult
	if err := json.Unmarshal(rec, &r); err != nil {
		return refuse(RefusedInternal, "the recorded result of this idempotency key does not decode; the tool did not run"), nil
	}
	meta := make(mcp.Meta, len(r.Meta)+1)
	for k, v := range r.Meta {
		meta[k] = v
	}
	meta[MetaReplayed] = true
	r.Meta = meta
	if r.Content == nil {
		r.Content = []mcp.Content{}
	}
	return &r, nil
}

// refuse is the tool error the middleware answers with when the tool did
// not run: IsError, the reason as text for the model, and the reason's
// code in _meta for the client.
func refuse(code, text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Meta:    mcp.Meta{MetaRefused: code},
		Content: []mcp.Content{&mcp.TextContent{Text: text}},
		IsError: true,
	}
}

// refusal is the answer to a call that did not run the tool and has no
// result to replay.
func refusal(ctx context.Context, err error) *mcp.CallToolResult {
	var se *idem.StoreError
	switch {
	case errors.Is(err, idem.ErrPayloadMismatch):
		return refuse(RefusedPayloadMismatch, "this idempotency key was already used with other arguments; the tool did not run (a new call needs a new key)")
	case errors.Is(err, idem.ErrInProgress):
		if ctx.Err() != nil { // waited (idem.Wait) until the caller gave up
			return refuse(RefusedInProgress, "a call with this idempotency key is still in progress (waited until the request ended); retry later with the same key")
		}
		return refuse(RefusedInProgress, "a call with this idempotency key is in progress; retry later with the same key to get its result")
	case errors.Is(err, idem.ErrDuplicate):
		return refuse(RefusedDuplicate, "a call with this idempotency key was already processed; the tool did not run again")
	case errors.Is(err, idem.ErrResultUnavailable):
		return refuse(RefusedDuplicate, "a call with this idempotency key was processed, but its result was not kept; the tool did not run again")
	case errors.As(err, &se):
		return refuse(RefusedUnavailable, "the idempotency store is unavailable; the tool did not run; retry with the same key")
	case ctx.Err() != nil:
		return refuse(RefusedUnavailable, "the request ended before the idempotency key was checked; the tool did not run; retry with the same key")
	}
	return refuse(RefusedInternal, "the record of this idempotency key cannot be read; the tool did not run")
}

// codec is the Guard's codec: the result's JSON behind a version line.
type codec struct{}

var recordPrefix = []byte("idemmcp/1\n")

func (codec) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("idemmcp: cannot encode %T", v)
	}
	return append(recordPrefix[:len(recordPrefix):len(recordPrefix)], b...), nil
}

func (codec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("idemmcp: cannot decode into %T", v)
	}
	rest, ok := bytes.CutPrefix(data, recordPrefix)
	if !ok || !json.Valid(rest) {
		return errors.New("idemmcp: malformed record")
	}
	*p = rest
	return nil
}
