package isr

import (
	"fmt"

	"github.com/idem-go/idem"
)

// optionErrors collects the mistakes a constructor finds in its arguments
// and options: every one is reported, joined, each an *idem.OptionError
// matching idem.ErrInvalidOption, as every constructor of this repository
// reports them.
type optionErrors []error

func (e *optionErrors) invalid(option, format string, args ...any) {
	*e = append(*e, &idem.OptionError{Option: "isr." + option, Reason: fmt.Sprintf(format, args...)})
}

// unmade is the error of a method called on a nil or zero value that its
// constructor did not make.
func unmade(typ, constructor string) error {
	return &idem.OptionError{Option: "isr." + typ, Reason: "nil or zero " + typ + ": use " + constructor}
}
