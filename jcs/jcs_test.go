package jcs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os/exec"
	"strings"
	"testing"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/jcs"
)

// RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
var rfcNumbers = []struct {
	bits uint64
	want string
}{
	{0x0000000000000000, "0"},
	{0x8000000000000000, "0"},
	{0x0000000000000001, "5e-324"},
	{0x8000000000000001, "-5e-324"},
	{0x7fefffffffffffff, "1.7976931348623157e+308"},
	{0xffefffffffffffff, "-1.7976931348623157e+308"},
	{0x4340000000000000, "9007199254740992"},
	{0xc340000000000000, "-9007199254740992"},
	{0x4430000000000000, "295147905179352830000"},
	{0x44b52d02c7e14af5, "9.999999999999997e+22"},
	{0x44b52d02c7e14af6, "1e+23"},
	{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
	{0x444b1ae4d6e2ef4e, "999999999999999700000"},
	{0x444b1ae4d6e2ef4f, "999999999999999900000"},
	{0x444b1ae4d6e2ef50, "1e+21"},
	{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
	{0x3eb0c6f7a0b5ed8d, "0.000001"},
	{0x41b3de4355555553, "333333333.3333332"},
	{0x41b3de4355555554, "333333333.33333325"},
	{0x41b3de4355555555, "333333333.3333333"},
	{0x41b3de4355555556, "333333333.3333334"},
	{0x41b3de4355555557, "333333333.33333343"},
	{0xbecbf647612f3696, "-0.0000033333333333333333"},
	{0x43143ff3c1cb0959, "1424953923781206.2"},
}

func TestRFCNumbers(t *testing.T) {
	for _, c := range rfcNumbers {
		f := math.Float64frombits(c.bits)
		if got := string(jcs.AppendFloat(nil, f)); got != c.want {
			t.Errorf("%#x: got %s, want %s", c.bits, got, c.want)
		}
		b, err := jcs.Marshal(f)
		if err != nil || string(b) != c.want {
			t.Errorf("jcs.Marshal(%#x) = %s, %v; want %s", c.bits, b, err, c.want)
		}
	}
}

// RFC 8785 section 3.2.2 and 3.2.3.
func TestRFCExamples(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`, "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{`{"q":"a&b<c>d\u2028"}`, "{\"q\":\"a&b<c>d\u2028\"}"},
	}
	for _, c := range cases {
		got, err := jcs.Transform([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("jcs.Transform(%s)\n got %s, %v\nwant %s", c.in, got, err, c.want)
		}
	}
}

func TestRefused(t *testing.T) {
	bad := []any{
		func() {}, make(chan int), math.NaN(), math.Inf(1), "a\xffb",
		map[string]any{"x": json.Number("9007199254740993")},
		json.Number("1e400"),
	}
	for _, v := range bad {
		if _, err := jcs.Marshal(v); err == nil {
			t.Errorf("jcs.Marshal(%#v) succeeded", v)
		}
	}
	if _, err := jcs.Transform([]byte(`1 2`)); !errors.Is(err, jcs.ErrInvalid) {
		t.Errorf("trailing text: %v", err)
	}
	// Integers past 2^53 that a double holds exactly are fine.
	if b, err := jcs.Marshal(uint64(1) << 60); err != nil || string(b) != "1152921504606847000" {
		t.Errorf("2^60: %s %v", b, err)
	}
}

// randomJSON builds a value with awkward strings and numbers.
func randomJSON(r *rand.Rand, depth int) any {
	switch k := r.Intn(8); {
	case depth > 3 || k == 0:
		return randomNumber(r)
	case k == 1:
		return randomString(r)
	case k == 2:
		return nil
	case k == 3:
		return r.Intn(2) == 0
	case k == 4 || k == 5:
		n := r.Intn(4)
		a := make([]any, n)
		for i := range a {
			a[i] = randomJSON(r, depth+1)
		}
		return a
	default:
		m := map[string]any{}
		for i := r.Intn(5); i > 0; i-- {
			m[randomString(r)] = randomJSON(r, depth+1)
		}
		return m
	}
}

func randomNumber(r *rand.Rand) any {
	switch r.Intn(5) {
	case 0:
		return r.Int63n(1<<53) - 1<<52
	case 1:
		return math.Float64frombits(r.Uint64()&^(0x7ff<<52) | uint64(r.Intn(0x7ff))<<52)
	case 2:
		return r.NormFloat64() * math.Pow(10, float64(r.Intn(60)-30))
	case 3:
		return float64(r.Intn(1000)) / 10
	default:
		return json.Number(fmt.Sprintf("%de%d", r.Intn(100), r.Intn(40)-20))
	}
}

var pieces = []string{"a", "B", "&", "<", ">", "\"", "\\", "/", "\x00", "\x1f", "\x7f", "\u0080", "é", "\u2028", "\u2029", "€", "\ue000", "\uffff", "\U0001F600", "\U00010000", " ", "\t", "\n"}

func randomString(r *rand.Rand) string {
	var sb strings.Builder
	for i := r.Intn(5); i > 0; i-- {
		sb.WriteString(pieces[r.Intn(len(pieces))])
	}
	return sb.String()
}

// TestMatchesNode compares jcs.Transform with the RFC's JavaScript algorithm run
// by Node on the same texts.
func TestMatchesNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed")
	}
	r := rand.New(rand.NewSource(8785))
	var in bytes.Buffer
	var texts []string
	add := func(s string) { texts = append(texts, s); in.WriteString(s + "\n") }
	for _, c := range rfcNumbers {
		f := math.Float64frombits(c.bits)
		b, _ := json.Marshal(f)
		add(string(b))
	}
	for i := 0; i < 2000; i++ {
		b, err := json.Marshal(randomJSON(r, 0))
		if err != nil {
			t.Fatal(err)
		}
		add(string(b))
	}
	cmd := exec.Command(node, "testdata/canon.js")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("node wrote %d lines for %d texts", len(lines), len(texts))
	}
	for i, s := range texts {
		got, err := jcs.Transform([]byte(s))
		if err != nil {
			t.Errorf("jcs.Transform(%s): %v", s, err)
			continue
		}
		if string(got) != lines[i] {
			t.Errorf("input %s\n  go   %s\n  node %s", s, got, lines[i])
		}
	}
}

// FuzzTransform: jcs.Transform never panics, is idempotent, and its output is
// valid JSON equal in value to its input.
func FuzzTransform(f *testing.F) {
	f.Add([]byte(`{"b":[1,2.5e10,"x&y"],"a":null}`))
	f.Add([]byte(`[1e-7,123456789012345680000,-0]`))
	f.Add([]byte(`{"\ud83d\ude00":1,"\ufb33":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := jcs.Transform(b)
		if err != nil {
			return
		}
		again, err := jcs.Transform(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %s -> %s -> %s (%v)", b, out, again, err)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid output %s", out)
		}
	})
}

// TestStringFastPath: a plain string gets the same form as it would through
// encoding/json and Transform, and invalid UTF-8 is refused the same way.
func TestStringFastPath(t *testing.T) {
	for _, s := range []string{"", "abc", "9f86d081884c7d659a2f", `q"b\s`, "<&>", "\u2028\u2029", "\x00\x1f\x7f\t\n", "caf\u00e9 \U0001F600", "\ufffd"} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		want, err := jcs.Transform(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := jcs.Marshal(s)
		if err != nil || string(got) != string(want) {
			t.Errorf("Marshal(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
	if _, err := jcs.Marshal("bad \xff"); err == nil {
		t.Error("Marshal of invalid UTF-8: no error")
	}
}
