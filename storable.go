package idem

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"

	"github.com/idem-go/idem/storekit"
)

// storableType checks, for the default JSON codec only, that the result
// type T can be encoded at all: a type that holds a channel, a function, a
// complex number or an unsafe pointer where encoding/json would reach it
// (an exported field not tagged json:"-", an element, a map key or value)
// fails every encoding, so that every completed call would replay as
// ErrResultUnavailable. It returns errs with an *OptionError naming the
// path to the first such part appended. A custom codec may encode
// anything: it is not checked.
func storableType[T any](codec Codec, errs []error) []error {
	if _, ok := codec.(jsonCodec); !ok {
		return errs
	}
	t := reflect.TypeFor[T]()
	path, bad := unencodable(t, typeName(t), map[reflect.Type]bool{})
	if bad == nil {
		return errs
	}
	where := path + " is " + bad.String()
	if path == typeName(t) {
		where = "the type itself" // a chan, func or complex result
	}
	return append(errs, &storekit.OptionError{
		Option: "New",
		Reason: "result type " + typeName(t) + " cannot be encoded by the JSON codec: " + where +
			" (exclude the field with json:\"-\", give the type a MarshalJSON method, or use WithCodec)",
	})
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// marshals reports whether t encodes itself (a MarshalJSON or
// MarshalText method on t or *t).
func marshals(t reflect.Type, iface reflect.Type) bool {
	return t.Implements(iface) || (t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(iface))
}

// unencodable returns the path to and the type of the first part of t
// that encoding/json cannot encode, or a nil type. seen holds the types
// already walked (a type that refers to itself is walked once).
func unencodable(t reflect.Type, path string, seen map[reflect.Type]bool) (string, reflect.Type) {
	if seen[t] {
		return "", nil
	}
	seen[t] = true
	if marshals(t, jsonMarshaler) || marshals(t, textMarshaler) {
		return "", nil
	}
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer:
		return path, t
	case reflect.Pointer:
		return unencodable(t.Elem(), path, seen)
	case reflect.Slice, reflect.Array:
		return unencodable(t.Elem(), path+"[]", seen)
	case reflect.Map:
		if !mapKeyEncodes(t.Key()) {
			return path + "[key]", t.Key()
		}
		return unencodable(t.Elem(), path+"[]", seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == "-" && !strings.HasPrefix(f.Tag.Get("json"), "-,") {
				continue
			}
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if !f.IsExported() && !(f.Anonymous && ft.Kind() == reflect.Struct) {
				continue // encoding/json skips it (and a replay leaves it empty)
			}
			if p, bad := unencodable(f.Type, path+"."+f.Name, seen); bad != nil {
				return p, bad
			}
		}
	}
	return "", nil
}

// mapKeyEncodes reports whether encoding/json can encode a map with keys
// of type k: strings, integers, and types with a MarshalText method.
func mapKeyEncodes(k reflect.Type) bool {
	switch k.Kind() {
	case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return marshals(k, textMarshaler)
}

// typeName is t as Go spells it, or "T" for an unnamed type that prints
// empty.
func typeName(t reflect.Type) string {
	if s := t.String(); s != "" {
		return s
	}
	return "T"
}
