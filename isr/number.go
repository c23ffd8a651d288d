package isr

import (
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Exact numbers. Other services write the schema's N attributes as any
// decimal text DynamoDB accepts ("1795385591.7", "1.7953855917e9"). The
// int64 fields of Meta, Lease and Version hold such a number floored to
// whole seconds, for display and arithmetic; every decision (Fresh, Held,
// the lease and META conditions of every Table) compares the text exactly
// against the caller's Now, which is itself taken exactly (nanoseconds), so
// isr agrees with a reader that compares the numbers as written, and the
// value a worker read is the value its write is conditioned on.

// maxExponent bounds the exponent of a number text: DynamoDB's numbers lie
// between 1e-130 and 1e126 in magnitude, and an unbounded exponent would
// make an exact comparison arbitrarily costly.
const maxExponent = 400

// exponentOK reports whether the exponent of a number text matching
// nPattern is within ±maxExponent.
func exponentOK(s string) bool {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return true
	}
	e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
	return err == nil && e >= -maxExponent && e <= maxExponent
}

// ratN is the exact value of a valid number text.
func ratN(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		// validN accepts only texts big.Rat reads ("1." and ".5" included).
		panic("isr: ratN of an unchecked number " + strconv.Quote(s))
	}
	return r
}

// numText is the exact text of a number field: text when set, else the
// integer.
func numText(text string, v int64) string {
	if text != "" {
		return text
	}
	return strconv.FormatInt(v, 10)
}

// TimeText is t in epoch seconds as exact decimal text ("1795385591.7" for
// 1795385591 s + 700 ms), for conditions.
func TimeText(t time.Time) string {
	sec, nsec := t.Unix(), int64(t.Nanosecond())
	if nsec == 0 {
		return strconv.FormatInt(sec, 10)
	}
	neg := sec < 0
	if neg { // sec + nsec/1e9 = -((-sec-1) + (1e9-nsec)/1e9)
		sec, nsec = -sec-1, 1e9-nsec
	}
	frac := strings.TrimRight(strconv.FormatInt(1e9+nsec, 10)[1:], "0")
	s := strconv.FormatInt(sec, 10) + "." + frac
	if neg {
		s = "-" + s
	}
	return s
}

// ratTime is t in epoch seconds, exactly.
func ratTime(t time.Time) *big.Rat {
	n := new(big.Int).Mul(big.NewInt(t.Unix()), big.NewInt(1e9))
	n.Add(n, big.NewInt(int64(t.Nanosecond())))
	return new(big.Rat).SetFrac(n, big.NewInt(1e9))
}

// cmpN compares two number texts (or an integer, when the text is "")
// exactly: -1, 0 or +1.
func cmpN(aText string, a int64, bText string, b int64) int {
	if aText == "" && bText == "" {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	}
	return ratN(numText(aText, a)).Cmp(ratN(numText(bText, b)))
}

// cmpNTime compares a number (text, or the integer when text is "") with
// the instant t exactly.
func cmpNTime(text string, v int64, t time.Time) int {
	if text == "" {
		// An integer x compares with t as with floor(t), except for
		// equality, which needs t to be whole.
		switch s := t.Unix(); {
		case v < s:
			return -1
		case v > s:
			return 1
		case t.Nanosecond() == 0:
			return 0
		}
		return -1
	}
	return ratN(text).Cmp(ratTime(t))
}
