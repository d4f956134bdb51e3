// Command kubectl is kubectl, built from the pinned k8s.io/kubectl module
// for the tests that run the operator's manual verbatim (its install steps
// create namespaces and Secrets with it). Only this entry point is ours:
// the commands are the library's.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
