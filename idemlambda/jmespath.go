package idemlambda

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	jmespath "github.com/jmespath-community/go-jmespath"
)

// path is a compiled JMESPath expression with the Powertools functions.
type path struct {
	expr string
	jp   jmespath.JMESPath
}

// powertoolsFunctions are the functions Powertools for AWS Lambda adds to
// JMESPath, so that its expressions work here as they are:
// powertools_json(s) decodes a JSON document held in a string (an API
// Gateway or SQS body), powertools_base64(s) decodes base64 text, and
// powertools_base64_gzip(s) decodes base64 text and gunzips it.
var powertoolsFunctions = []jmespath.FunctionEntry{
	{
		Name:      "powertools_json",
		Arguments: []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpString}}},
		Handler: func(args []any) (any, error) {
			var v any
			if err := json.Unmarshal([]byte(args[0].(string)), &v); err != nil {
				return nil, fmt.Errorf("powertools_json: %w", err)
			}
			return v, nil
		},
	},
	{
		Name:      "powertools_base64",
		Arguments: []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpString}}},
		Handler: func(args []any) (any, error) {
			b, err := base64.StdEncoding.DecodeString(args[0].(string))
			if err != nil {
				return nil, fmt.Errorf("powertools_base64: %w", err)
			}
			return string(b), nil
		},
	},
	{
		Name:      "powertools_base64_gzip",
		Arguments: []jmespath.ArgSpec{{Types: []jmespath.JpType{jmespath.JpString}}},
		Handler: func(args []any) (any, error) {
			b, err := base64.StdEncoding.DecodeString(args[0].(string))
			if err != nil {
				return nil, fmt.Errorf("powertools_base64_gzip: %w", err)
			}
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				return nil, fmt.Errorf("powertools_base64_gzip: %w", err)
			}
			out, err := io.ReadAll(io.LimitReader(zr, maxUnzipped+1))
			if err == nil && len(out) > maxUnzipped {
				err = errors.New("more than 6 MB unzipped")
			}
			if err != nil {
				return nil, fmt.Errorf("powertools_base64_gzip: %w", err)
			}
			return string(out), nil
		},
	},
}

// maxUnzipped bounds what powertools_base64_gzip inflates: 6 MB, Lambda's
// largest synchronous payload.
const maxUnzipped = 6 << 20

// compilePath compiles expr, or returns why it cannot be.
func compilePath(expr string) (*path, error) {
	if expr == "" {
		return nil, errors.New("empty expression")
	}
	jp, err := jmespath.Compile(expr, powertoolsFunctions...)
	if err != nil {
		return nil, err
	}
	return &path{expr: expr, jp: jp}, nil
}

// search evaluates p on doc, the event as generic JSON.
func (p *path) search(doc any) (any, error) {
	return p.jp.Search(doc)
}

// document returns event as generic JSON (what JMESPath searches): decoded
// as it is when it is JSON already (json.RawMessage, []byte), otherwise
// encoded and decoded again.
func document(event any) (any, error) {
	var b []byte
	switch e := event.(type) {
	case json.RawMessage:
		b = e
	case []byte:
		b = e
	default:
		var err error
		if b, err = json.Marshal(event); err != nil {
			return nil, err
		}
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// keyString makes the value an expression found into a key: a string as it
// is, anything else as its JSON (a list of fields, a number). Nothing (null)
// or an empty string is no key.
func keyString(v any) (string, bool) {
	switch k := v.(type) {
	case nil:
		return "", false
	case string:
		return k, k != ""
	}
	b, err := json.Marshal(v) // decoded JSON: encodes
	if err != nil {
		return "", false
	}
	return string(b), true
}
