//go:build !unix

package main

import (
	"os"
	"os/exec"
)

func setProcAttr(*exec.Cmd) {}

// stopProcess interrupts (or kills) the command; there are no process groups.
func stopProcess(cmd *exec.Cmd, kill bool) {
	if kill || cmd.Process.Signal(os.Interrupt) != nil {
		_ = cmd.Process.Kill()
	}
}

func signalOf(*os.ProcessState) (int, bool) { return 0, false }
