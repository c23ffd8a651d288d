package isr_test

import (
	"testing"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
)

func TestMemoryTableConformance(t *testing.T) {
	isrtest.Run(t, func(t *testing.T) isr.Table { return newMemoryTable(t) })
}
