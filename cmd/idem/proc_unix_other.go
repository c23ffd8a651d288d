//go:build unix && !linux

package main

import "syscall"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: a killed idem leaves its command running.
func setParentDeathSignal(*syscall.SysProcAttr) {}
