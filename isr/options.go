package isr

import "github.com/idem-go/idem/storekit"

// unmade is the error of a method called on a nil or zero value that its
// constructor did not make.
func unmade(typ, constructor string) error {
	return &storekit.OptionError{Option: "isr." + typ, Reason: "nil or zero " + typ + ": use " + constructor}
}
