package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pawlcfg/pawl/validators"
	"github.com/pawlcfg/pawl/validators/abitest"
	"github.com/pawlcfg/pawl/validators/host"
)

// errChecksFailed makes "pawl validator test" exit 1 after printing the
// checks.
var errChecksFailed = errors.New("the module failed the conformance kit")

// validatorTestCommand is "pawl validator test": the conformance kit, run
// locally with the server's host and limits.
func validatorTestCommand(g *globals) *cobra.Command {
	var casesDir, paramsFile, cacheDir string
	var timeoutFlag = host.DefaultTimeout
	memory, maxBytes, large := host.DefaultMemoryLimit, host.DefaultMaxModuleBytes, abitest.DefaultLargeInput
	cmd := &cobra.Command{
		Use:   "test MODULE.wasm [--cases DIR] [--params FILE]",
		Short: "Check a validator module locally, as a server would, with the author's cases; exits 1 if a check fails",
		Long: "Runs the conformance kit (validators/abitest) on MODULE.wasm, with the host and the limits a server uses and no server:\n" +
			"the checks of an upload (size, imports, exports, ABI version), the cases of --cases DIR (NAME.expect.json beside the input NAME.EXT),\n" +
			"built-in inputs, determinism and isolation between calls, and the time, memory and output limits. Prints one line per check.",
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			wasm, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("read module: %w", err)
			}
			opts := []abitest.Option{abitest.WithTimeout(timeoutFlag), abitest.WithMemoryLimit(memory), abitest.WithMaxModuleBytes(maxBytes),
				abitest.WithLargeInput(large), abitest.WithCacheDir(cacheDir)}
			if casesDir != "" {
				cases, err := abitest.LoadCases(casesDir)
				if err != nil {
					return err
				}
				opts = append(opts, abitest.WithCases(cases...))
			}
			if paramsFile != "" {
				params, err := os.ReadFile(paramsFile)
				if err != nil {
					return fmt.Errorf("read params: %w", err)
				}
				opts = append(opts, abitest.WithParams(params))
			}
			done := g.slowNotice(fmt.Sprintf("testing validator %s (%d bytes): compiling it, then the checks", args[0], len(wasm)))
			rep, err := abitest.Run(cmd.Context(), wasm, opts...)
			done()
			if err != nil {
				return err
			}
			if err := printReport(g, rep); err != nil {
				return err
			}
			if !rep.OK() {
				return errChecksFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&casesDir, "cases", "", "directory of cases: NAME.expect.json and the input NAME.EXT (validators/abitest/README.md)")
	f.StringVar(&paramsFile, "params", "", "a JSON file of validator parameters, for cases that give none")
	f.DurationVar(&timeoutFlag, "validator-timeout", timeoutFlag, "time limit of one validation (pawld's flag of the same name)")
	f.IntVar(&memory, "validator-memory-bytes", memory, "memory limit of one validator instance, a multiple of 65536 (pawld's flag)")
	f.IntVar(&maxBytes, "max-validator-bytes", maxBytes, "largest module an upload accepts (pawld's flag)")
	f.IntVar(&large, "large-input-bytes", large, "size of the built-in large input that the module must validate within the time limit")
	f.StringVar(&cacheDir, "validator-cache", "", "keep compiled modules in this directory between runs (default: none)")
	markOffline(cmd)
	return cmd
}

// printReport prints the checks, one a line, and a summary; with -o json,
// the report.
func printReport(g *globals, rep *abitest.Report) error {
	if g.output == "json" {
		return g.printValue(rep)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	for _, c := range rep.Checks {
		if _, err := fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(string(c.Status)), c.Name, oneLine(c.Detail)); err != nil {
			return err
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	passed, failed, skipped := rep.Counts()
	verdict := "ok"
	if failed > 0 {
		verdict = "FAILED"
	}
	_, err := fmt.Fprintf(g.stdout, "%s %s: %d passed, %d failed, %d skipped\n", verdict, rep.Digest, passed, failed, skipped)
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// validatorNewCommand is "pawl validator new": a starting project.
func validatorNewCommand(g *globals) *cobra.Command {
	var lang string
	var langs []string
	for _, l := range validators.Langs() {
		langs = append(langs, string(l))
	}
	cmd := &cobra.Command{
		Use:   "new --lang " + strings.Join(langs, "|") + " NAME",
		Short: "Write a starting validator project in directory NAME: the validator, its build file, a README and cases",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			if lang == "" {
				return usageError{fmt.Errorf("give --lang, one of %s", strings.Join(langs, ", "))}
			}
			written, err := validators.WriteProject(args[0], validators.Lang(lang))
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printValue(map[string]any{"dir": args[0], "lang": lang, "files": written})
			}
			for _, f := range written {
				if _, err := fmt.Fprintln(g.stdout, args[0]+"/"+f); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintf(g.stdout, "wrote the %s validator project %s: its README.md says how to build, test and upload it\n", lang, args[0])
			return err
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "", "the language: "+strings.Join(langs, ", "))
	markOffline(cmd)
	return cmd
}
