package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/snapshotfile"
)

func snapshotCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up the server's embedded store",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Save a consistent copy of the store, checked against its sha256, to FILE (restore it with pawld restore)",
		Long: `Streams a consistent copy of the server's embedded store as of one revision
(keys and their retained history, validator modules, records) and writes it to
FILE, followed by its sha256. The bytes go to a temporary file beside FILE,
which is renamed to FILE only once their checksum matches the server's.
A Redis store cannot be saved this way: back up Redis itself.
--timeout bounds how long the server may stay silent, not the whole copy.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.snapshotSave(cmd.Context(), args[0])
		},
	})
	return cmd
}

func (g *globals) snapshotSave(ctx context.Context, path string) error {
	client, opts := g.transport()
	mc := pawlv1connect.NewMaintenanceServiceClient(client, strings.TrimSuffix(g.server, "/"), opts...)
	out, err := snapshotfile.Save(ctx, mc, g.server, path, g.timeout)
	if errors.Is(err, snapshotfile.ErrIdle) {
		return fmt.Errorf("snapshot save: %w (--timeout)", err)
	}
	if err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	if g.output == "json" {
		return g.printValue(out)
	}
	_, err = fmt.Fprintf(g.stdout, "saved %s: revision %d, %d bytes, %s\n", path, out.Revision, out.Size, out.SHA256)
	return err
}
