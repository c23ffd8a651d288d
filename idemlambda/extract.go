package idemlambda

import (
	"errors"
	"fmt"
)

// extractor takes the key and the payload from an event (for SQS, a
// record) of type E.
type extractor[E any] struct {
	keyFn       func(E) (string, error)
	keyPath     *path
	payloadFn   func(E) (any, error)
	payloadPath *path
	// defaultKey and defaultPayload apply when no option sets them: for
	// SQS the message ID and the body; for Wrap the whole event as key.
	defaultKey     func(E) (string, error)
	defaultPayload func(E) (any, bool)
}

// newExtractor checks that c's key and payload functions take an E.
func newExtractor[E any](c *config, defaultKey func(E) (string, error), defaultPayload func(E) (any, bool)) (*extractor[E], error) {
	x := &extractor[E]{keyPath: c.keyPath, payloadPath: c.payloadPath, defaultKey: defaultKey, defaultPayload: defaultPayload}
	var errs []error
	if c.keyFn != nil {
		f, ok := c.keyFn.(func(E) (string, error))
		if !ok {
			var e E
			errs = append(errs, optionError("WithKey", fmt.Sprintf("function is %T, want func(%T) (string, error)", c.keyFn, e)))
		}
		x.keyFn = f
	}
	if c.payloadFn != nil {
		f, ok := c.payloadFn.(func(E) (any, error))
		if !ok {
			var e E
			errs = append(errs, optionError("WithPayload", fmt.Sprintf("function is %T, want func(%T) (any, error)", c.payloadFn, e)))
		}
		x.payloadFn = f
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return x, nil
}

// extract returns the key of e and its payload (hasPayload false: none).
func (x *extractor[E]) extract(e E) (key string, payload any, hasPayload bool, err error) {
	var doc any
	if x.keyPath != nil || x.payloadPath != nil {
		if doc, err = document(e); err != nil {
			expr := ""
			if x.keyPath != nil {
				expr = x.keyPath.expr
			}
			return "", nil, false, &NoKeyError{Expr: expr, Err: fmt.Errorf("the event is not JSON: %w", err)}
		}
	}
	switch {
	case x.keyFn != nil:
		if key, err = x.keyFn(e); err != nil || key == "" {
			return "", nil, false, &NoKeyError{Err: err}
		}
	case x.keyPath != nil:
		v, err := x.keyPath.search(doc)
		if err != nil {
			return "", nil, false, &NoKeyError{Expr: x.keyPath.expr, Err: err}
		}
		var ok bool
		if key, ok = keyString(v); !ok {
			return "", nil, false, &NoKeyError{Expr: x.keyPath.expr}
		}
	default:
		if key, err = x.defaultKey(e); err != nil || key == "" {
			return "", nil, false, &NoKeyError{Err: err}
		}
	}
	switch {
	case x.payloadFn != nil:
		if payload, err = x.payloadFn(e); err != nil {
			return "", nil, false, fmt.Errorf("idemlambda: payload: %w", err)
		}
		hasPayload = true
	case x.payloadPath != nil:
		if payload, err = x.payloadPath.search(doc); err != nil {
			return "", nil, false, fmt.Errorf("idemlambda: payload expression %q: %w", x.payloadPath.expr, err)
		}
		hasPayload = true
	case x.defaultPayload != nil:
		payload, hasPayload = x.defaultPayload(e)
	}
	return key, payload, hasPayload, nil
}

// isNoKey reports whether err says the event has no key.
func isNoKey(err error) bool { return errors.Is(err, ErrNoKey) }
