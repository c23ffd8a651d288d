package idem_test

import (
	"testing"

	"github.com/idem-go/idem/storekit"
)

// TestClaimOutcomeString: an unknown outcome prints as such, not as
// "existing" (as it did before).
func TestClaimOutcomeString(t *testing.T) {
	for o, want := range map[storekit.ClaimOutcome]string{
		storekit.Existing: "existing", storekit.Claimed: "claimed", storekit.TookOver: "took_over",
		7: "ClaimOutcome(7)", -1: "ClaimOutcome(-1)",
	} {
		if got := o.String(); got != want {
			t.Errorf("%d: got %q, want %q", int(o), got, want)
		}
	}
}
