// Package cli owns the storage-gateway command line but serve: the admin's
// and operator's commands (environments, volumes, classes, placement, keys,
// tokens, login, audit, migrate, version), their output and the API client
// they share. cmd/storage-gateway puts serve in the tree and runs it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/logging"
	"github.com/dcm-project/storage-gateway/internal/version"
)

// Execute runs root with ctx on the process's terminal and returns the exit
// code: 1, after printing the error, when the command failed.
func Execute(ctx context.Context, root *cobra.Command) int {
	stderr := &terminalWriter{w: os.Stderr}
	root.SetOut(&terminalWriter{w: os.Stdout})
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		var unreachable *unreachableError
		if errors.As(err, &unreachable) {
			err = unreachable
		}
		fmt.Fprintln(stderr, "storage-gateway:", err)
		return 1
	}
	return 0
}

// NewRoot is the storage-gateway command tree, with serve — which the
// command's own package builds, as it alone assembles the runtime — among
// its commands.
func NewRoot(serve *cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:   "storage-gateway",
		Short: "Serve persistent volumes on many Kubernetes clusters for DCM",
		Example: "  storage-gateway serve\n  storage-gateway env list\n  storage-gateway volume create -e local-east --name data --capacity 1Gi\n" +
			"  source <(storage-gateway completion bash)",
		Long: "storage-gateway keeps a registry of Kubernetes environments and serves DCM's\n" +
			"storage service-provider contract for each of them. Settings come from SG_*\n" +
			"environment variables (see the README).",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version, as most CLIs take it, prints what `version` prints.
		Version: version.Get().Version,
	}
	root.SetVersionTemplate(versionLine() + "\n")
	root.AddCommand(serve, newMigrateCommand(), newEnvCommand(), newVolumeCommand(), newClassesCommand(), newPlaceCommand(),
		newKeysCommand(), newTokensCommand(), newLoginCommand(), newLogoutCommand(), newAuditCommand(), newVersionCommand())
	// Added now rather than by cobra at Execute, so that it is part of the
	// tree the loop below and the help test see.
	root.InitDefaultCompletionCmd()
	for _, cmd := range root.Commands() {
		if cmd.Name() == "completion" {
			completionExamples(cmd)
		}
		refuseUnknownSubcommands(cmd)
	}
	explainArgumentErrors(root)
	// A flag the command does not know (or a bad value) says where the
	// flags are listed, as a wrong subcommand does.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w\nRun '%s --help' for usage", err, cmd.CommandPath())
	})
	return root
}

// explainArgumentErrors makes every command that refuses its arguments say
// which are missing or unexpected, with its usage line, instead of cobra's
// "accepts 1 arg(s), received 0". The arguments a command needs are the
// placeholders in its Use before the first flag or optional part
// ("get ID -e ENV" needs ID).
func explainArgumentErrors(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		explainArgumentErrors(sub)
	}
	check := cmd.Args
	if check == nil || cmd.HasSubCommands() {
		return
	}
	var needs []string
	for _, word := range strings.Fields(cmd.Use)[1:] {
		if strings.HasPrefix(word, "-") || strings.HasPrefix(word, "[") {
			break
		}
		needs = append(needs, word)
	}
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		usage := fmt.Sprintf("usage: %s\nRun '%s --help' for examples", cmd.UseLine(), cmd.CommandPath())
		// An empty id ('') names nothing: sent, it would address the
		// collection, or a path the gateway reads otherwise.
		for i, arg := range args[:min(len(args), len(needs))] {
			if arg == "" {
				return fmt.Errorf("%s needs %s: the argument is empty; %s", cmd.CommandPath(), needs[i], usage)
			}
		}
		if check(cmd, args) == nil {
			return nil
		}
		if len(args) < len(needs) {
			return fmt.Errorf("%s needs %s; %s", cmd.CommandPath(), strings.Join(needs[len(args):], " "), usage)
		}
		return fmt.Errorf("%s takes no argument %q; %s", cmd.CommandPath(), strings.Join(args[len(needs):], " "), usage)
	}
}

// completionExamples gives cobra's completion commands examples like the
// rest.
func completionExamples(cmd *cobra.Command) {
	cmd.Example = "  source <(storage-gateway completion bash)\n  storage-gateway completion zsh > \"${fpath[1]}/_storage-gateway\""
	for _, shell := range cmd.Commands() {
		switch shell.Name() {
		case "bash":
			shell.Example = "  source <(storage-gateway completion bash)"
		case "zsh":
			shell.Example = "  storage-gateway completion zsh > \"${fpath[1]}/_storage-gateway\""
		case "fish":
			shell.Example = "  storage-gateway completion fish > ~/.config/fish/completions/storage-gateway.fish"
		default:
			shell.Example = "  storage-gateway completion " + shell.Name() + " | Out-String | Invoke-Expression"
		}
	}
}

// refuseUnknownSubcommands makes cmd and the command groups under it fail on
// a word that is none of their subcommands, with cobra's suggestions; cobra
// does so only for the root, and prints a group's help and exits 0 for
// `env lst`.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	if !cmd.HasSubCommands() {
		return
	}
	for _, sub := range cmd.Commands() {
		refuseUnknownSubcommands(sub)
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2 // what cobra uses for the root
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if suggestions := cmd.SuggestionsFor(args[0]); len(suggestions) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(suggestions, "\n\t")
		}
		return errors.New(msg + "\n\nRun '" + cmd.CommandPath() + " --help' for usage")
	}
}

// LoadConfig reads SG_* settings and builds the JSON logger every command
// uses; the Kubernetes client libraries log through it too.
func LoadConfig() (config.Config, *slog.Logger, error) {
	cfg, err := config.Load()
	if err != nil {
		return config.Config{}, nil, err
	}
	level, _ := cfg.SlogLevel() // validated by Load
	logger := logging.New(os.Stderr, level)
	logging.RouteKlog(logger)
	return cfg, logger, nil
}
