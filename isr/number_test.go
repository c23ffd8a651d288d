package isr

import (
	"testing"
	"time"
)

func TestTimeN(t *testing.T) {
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Unix(1795385591, 0), "1795385591"},
		{time.Unix(1795385591, 700e6), "1795385591.7"},
		{time.Unix(1795385591, 1), "1795385591.000000001"},
		{time.Unix(0, 0), "0"},
		{time.Unix(-1, 500e6), "-0.5"},
		{time.Unix(-2, 250e6), "-1.75"},
	} {
		if got := TimeText(c.t); got != c.want {
			t.Errorf("TimeText(%v) = %s, want %s", c.t, got, c.want)
		}
		if cmpNTime(c.want, 0, c.t) != 0 {
			t.Errorf("cmpNTime(%s, t) != 0", c.want)
		}
	}
}

func TestCmpNExact(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"1795385591.7", "1.7953855917e9", 0},
		{"1795385591.7", "1795385591", 1},
		{"1795385591.7", "1795385592", -1},
		{"1795385591.70000000000000000001", "1795385591.7", 1},
		{".5", "0.5e0", 0},
		{"1.", "1", 0},
		{"-0", "0", 0},
		{"-1.5", "-1.25", -1},
		{"1e-400", "0", 1},
		{"9.9e18", "1e19", -1},
	} {
		if got := cmpN(c.a, 0, c.b, 0); got != c.want {
			t.Errorf("cmpN(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := cmpN(c.b, 0, c.a, 0); got != -c.want {
			t.Errorf("cmpN(%s, %s) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
	// Integers (empty text) compare with an instant as exactly as texts do.
	at := time.Unix(100, 1)
	for v, want := range map[int64]int{99: -1, 100: -1, 101: 1} {
		if got := cmpNTime("", v, at); got != want {
			t.Errorf("cmpNTime(%d, 100.000000001) = %d, want %d", v, got, want)
		}
	}
	if cmpNTime("", 100, time.Unix(100, 0)) != 0 {
		t.Error("cmpNTime(100, 100) != 0")
	}
	if validN("1e401") || validN("1e-401") || !validN("1e400") || !validN("1E+400") {
		t.Error("validN: exponent bound")
	}
}

func TestMetaFreshExact(t *testing.T) {
	m := Meta{GeneratedAt: 1795385591, GeneratedAtN: "1795385591.7", RevalidateSeconds: 60}
	if !m.Fresh(time.Unix(1795385651, 699999999)) || m.Fresh(time.Unix(1795385651, 700e6)) {
		t.Error("Fresh is not exact at generated_at + revalidate_seconds = 1795385651.7")
	}
	if got := m.StaleAt(); !got.Equal(time.Unix(1795385651, 700e6)) {
		t.Errorf("StaleAt = %v", got)
	}
	m = Meta{GeneratedAt: 1795385591, GeneratedAtN: "1.79538559170000000001e9", RevalidateSeconds: 60}
	if got := m.StaleAt(); !got.Equal(time.Unix(1795385651, 700000001)) {
		t.Errorf("StaleAt rounds up to a nanosecond: %v", got)
	}
	l := Lease{ExpiresAt: 10, ExpiresAtN: "10.5"}
	if !l.Held(time.Unix(10, 499999999)) || l.Held(time.Unix(10, 500e6)) {
		t.Error("Held is not exact")
	}
}
