package natsstore

import "strings"

const hexDigits = "0123456789ABCDEF"

// kvKey maps a storage key to a NATS KV key, one to one: letters, digits,
// "-" and "_" stay; every other byte becomes "=" and two hex digits.
func kvKey(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	return b.String()
}

// storageKey is the inverse of kvKey; ok is false for a KV key kvKey never
// makes (another application's key in the same bucket).
func storageKey(k string) (string, bool) {
	var b strings.Builder
	b.Grow(len(k))
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c != '=' {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(k) {
			return "", false
		}
		hi, lo := strings.IndexByte(hexDigits, k[i+1]), strings.IndexByte(hexDigits, k[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), true
}
