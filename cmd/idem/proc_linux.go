package main

import "syscall"

// setParentDeathSignal makes the kernel SIGKILL the command when the idem
// process dies, so a killed idem never leaves its command running while
// another run takes the key over.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
