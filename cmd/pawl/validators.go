package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

// errInvalid makes "pawl validate" exit 1 after printing the violations.
var errInvalid = errors.New("the content is invalid")

// validators returns a ValidatorService client, as kv does for KVService.
func (g *globals) validators() pawlv1connect.ValidatorServiceClient {
	client, opts := g.transport()
	return pawlv1connect.NewValidatorServiceClient(client, strings.TrimSuffix(g.server, "/"), opts...)
}

func validatorCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "validator", Short: "Write, test, upload and inspect validators (Wasm modules, validators/ABI.md)"}
	var name, actor string
	uploadCmd := &cobra.Command{
		Use:   "upload FILE.wasm",
		Short: "Upload a validator module and print its digest",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			wasm, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("read module: %w", err)
			}
			req := connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasm, Name: name})
			setActor(req, actor)
			done := g.slowNotice(fmt.Sprintf("uploading validator %s (%d bytes): the server checks and compiles it", args[0], len(wasm)))
			resp, err := g.validators().Upload(cmd.Context(), req)
			done()
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(resp.Msg)
			}
			_, err = fmt.Fprintln(g.stdout, resp.Msg.GetValidator().GetDigest())
			return err
		},
	}
	uploadCmd.Flags().StringVar(&name, "name", "", "a human name for the validator")
	uploadCmd.Flags().StringVar(&actor, "actor", os.Getenv("PAWL_ACTOR"), "who is uploading, recorded as the uploader (env PAWL_ACTOR)")

	lsCmd := &cobra.Command{
		Use:   "ls",
		Short: "List validators: DIGEST<TAB>NAME<TAB>SIZE<TAB>UPLOADED<TAB>UPLOADER",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &pawlv1.ListValidatorsRequest{}
			for {
				resp, err := g.validators().ListValidators(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				if g.output == "json" {
					if err := g.printJSON(resp.Msg); err != nil {
						return err
					}
				} else {
					for _, v := range resp.Msg.GetValidators() {
						if _, err := fmt.Fprintf(g.stdout, "%s\t%s\t%d\t%s\t%s\n", v.GetDigest(), v.GetName(), v.GetSizeBytes(),
							v.GetUploadedAt().AsTime().Format("2006-01-02T15:04:05Z"), v.GetUploader()); err != nil {
							return err
						}
					}
				}
				if resp.Msg.GetNextPageToken() == "" {
					return nil
				}
				req.PageToken = resp.Msg.GetNextPageToken()
			}
		},
	}
	cmd.AddCommand(uploadCmd, lsCmd, validatorTestCommand(g), validatorNewCommand(g))
	return cmd
}

func validateCommand(g *globals) *cobra.Command {
	var digest, file, params, mediaType, configName string
	cmd := &cobra.Command{
		Use:   "validate --validator sha256:... --file CONFIG [--params PARAMS.json]",
		Short: "Dry-run a stored validator on a config; exits 1 when it is invalid",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if digest == "" || file == "" {
				return usageError{errors.New("give --validator and --file")}
			}
			content, err := readValue(g.stdin, nil, file)
			if err != nil {
				return err
			}
			req := &pawlv1.ValidateRequest{Digest: digest, Content: content, MediaType: mediaType, ConfigName: configName}
			if params != "" {
				if req.Params, err = os.ReadFile(params); err != nil {
					return fmt.Errorf("read params: %w", err)
				}
			}
			resp, err := g.validators().Validate(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			if g.output == "json" {
				if err := g.printJSON(resp.Msg); err != nil {
					return err
				}
			} else {
				for _, v := range resp.Msg.GetViolations() {
					sev := "error"
					if v.GetSeverity() == pawlv1.Severity_SEVERITY_WARNING {
						sev = "warning"
					}
					path := v.GetPath()
					if path == "" {
						path = "(document)"
					}
					if _, err := fmt.Fprintf(g.stdout, "%s\t%s\t%s\n", sev, path, v.GetMessage()); err != nil {
						return err
					}
				}
				if resp.Msg.GetValid() {
					if _, err := fmt.Fprintln(g.stdout, "valid"); err != nil {
						return err
					}
				}
			}
			if !resp.Msg.GetValid() {
				return errInvalid
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&digest, "validator", "", "digest of the validator to run (sha256:...)")
	cmd.Flags().StringVarP(&file, "file", "f", "", "the config to validate (- for standard input)")
	cmd.Flags().StringVar(&params, "params", "", "a JSON file of validator parameters")
	cmd.Flags().StringVar(&mediaType, "media-type", "application/json", "the config's media type")
	cmd.Flags().StringVar(&configName, "name", "", "the config's name, passed to the validator")
	return cmd
}
