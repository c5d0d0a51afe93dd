package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// txnFile is what `pawl txn --file` reads.
type txnFile struct {
	Compares []struct {
		Key         string `json:"key"`
		ModRevision *int64 `json:"mod_revision"`
	} `json:"compares"`
	Ops []struct {
		Put         string  `json:"put"`
		Delete      string  `json:"delete"`
		Value       *string `json:"value"`
		ValueBase64 *string `json:"value_base64"`
		ValueFile   *string `json:"value_file"`
	} `json:"ops"`
}

func txnCommand(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "txn --file OPS.json",
		Short: "Apply many puts and deletes atomically, if every compare holds",
		Long: `Apply many puts and deletes atomically, if every compare holds: all of
them or none. Watchers receive the changes in one message. OPS.json:

  {
    "compares": [{"key": "/app/index", "mod_revision": 12}],
    "ops": [
      {"put": "/app/a", "value": "text"},
      {"put": "/app/b", "value_base64": "AAE="},
      {"put": "/app/c", "value_file": "c.json"},
      {"delete": "/app/old"}
    ]
  }

A compare's mod_revision 0 means the key must not exist. value_file is
read relative to OPS.json. Deleting a key that does not exist changes
nothing. Prints the revision of the last change.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usageError{errors.New("give the transaction with --file (- for standard input)")}
			}
			req, err := readTxn(g.stdin, file)
			if err != nil {
				return err
			}
			resp, err := g.kv().Txn(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			return g.printMutation(resp.Msg)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the transaction as JSON (- for standard input)")
	return cmd
}

// readTxn reads a transaction file into a request.
func readTxn(stdin io.Reader, file string) (*pawlv1.TxnRequest, error) {
	var raw []byte
	var err error
	dir := "."
	if file == "-" {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(file)
		dir = filepath.Dir(file)
	}
	if err != nil {
		return nil, fmt.Errorf("read the transaction: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f txnFile
	if err := dec.Decode(&f); err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", file, err)}
	}
	req := &pawlv1.TxnRequest{}
	for i, c := range f.Compares {
		if c.Key == "" || c.ModRevision == nil {
			return nil, usageError{fmt.Errorf("%s: compare %d needs a key and a mod_revision (0: absent)", file, i)}
		}
		req.Compares = append(req.Compares, &pawlv1.TxnCompare{Key: c.Key, ModRevision: *c.ModRevision})
	}
	for i, op := range f.Ops {
		values := 0
		for _, v := range []*string{op.Value, op.ValueBase64, op.ValueFile} {
			if v != nil {
				values++
			}
		}
		switch {
		case (op.Put == "") == (op.Delete == ""):
			return nil, usageError{fmt.Errorf("%s: op %d needs exactly one of put and delete", file, i)}
		case op.Delete != "" && values > 0:
			return nil, usageError{fmt.Errorf("%s: op %d deletes %s and gives a value", file, i, op.Delete)}
		case op.Delete != "":
			req.Ops = append(req.Ops, &pawlv1.TxnOp{Key: op.Delete, Delete: true})
			continue
		case values != 1:
			return nil, usageError{fmt.Errorf("%s: op %d puts %s and needs exactly one of value, value_base64 and value_file", file, i, op.Put)}
		}
		var value []byte
		switch {
		case op.Value != nil:
			value = []byte(*op.Value)
		case op.ValueBase64 != nil:
			if value, err = base64.StdEncoding.DecodeString(*op.ValueBase64); err != nil {
				return nil, usageError{fmt.Errorf("%s: op %d: value_base64: %w", file, i, err)}
			}
		default:
			path := *op.ValueFile
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			if value, err = os.ReadFile(path); err != nil {
				return nil, fmt.Errorf("%s: op %d: %w", file, i, err)
			}
		}
		req.Ops = append(req.Ops, &pawlv1.TxnOp{Key: op.Put, Value: value})
	}
	return req, nil
}
