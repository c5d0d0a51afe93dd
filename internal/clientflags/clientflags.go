// Package clientflags gives pawl and pawl-agent the same credential flags
// and environment variables:
//
//	--token       PAWL_TOKEN       a bearer token
//	--token-file  PAWL_TOKEN_FILE  a file holding it, read again when it changes
//	--ca          PAWL_CA          the CA bundle that signs the server's certificate
//	--cert        PAWL_CERT        a client certificate for mutual TLS
//	--key         PAWL_KEY         its private key
//
// A flag on the command line wins over the environment, even when it is
// empty (--token "" sends no token whatever PAWL_TOKEN says); the token is
// taken either from the flags or from the environment, never one from each.
package clientflags

import (
	"errors"
	"flag"
	"fmt"

	"github.com/pawlcfg/pawl/sdk/credentials"
)

// Credentials are what a command presents to the server.
type Credentials struct {
	// Token is a bearer token, or empty.
	Token string
	// TokenFile is a file holding the token, or empty; never both.
	TokenFile string
	// TLS names the CA bundle and client certificate files.
	TLS credentials.TLSFiles
}

// TokenSource returns where the token comes from (reading a token file
// now), or nil when there is none.
func (c Credentials) TokenSource() (credentials.TokenSource, error) {
	switch {
	case c.TokenFile != "":
		f, err := credentials.NewTokenFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		return f, nil
	case c.Token != "":
		return credentials.StaticToken(c.Token), nil
	}
	return nil, nil
}

// Flags are the credential flags of one flag set.
type Flags struct{ values []*value }

// value is one flag: what the command line said, if it said anything.
type value struct {
	flag, env, usage string
	v                string
	set              bool
}

func (v *value) String() string { return v.v }

// Type names the value's type in cobra's help.
func (v *value) Type() string { return "string" }

func (v *value) Set(s string) error {
	v.v, v.set = s, true
	return nil
}

const (
	token = iota
	tokenFile
	ca
	cert
	key
)

// Register defines the credential flags in fs (for cobra, in a flag set
// added with AddGoFlagSet).
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{values: []*value{
		token:     {flag: "token", env: "PAWL_TOKEN", usage: "a bearer token for the server; sent only over https or to loopback"},
		tokenFile: {flag: "token-file", env: "PAWL_TOKEN_FILE", usage: "a file holding the bearer token, read again when it changes"},
		ca:        {flag: "ca", env: "PAWL_CA", usage: "a PEM bundle of the CAs that sign the server's certificate (instead of the system's)"},
		cert:      {flag: "cert", env: "PAWL_CERT", usage: "a PEM client certificate for mutual TLS (with --key)"},
		key:       {flag: "key", env: "PAWL_KEY", usage: "the PEM private key of --cert"},
	}}
	for _, v := range f.values {
		fs.Var(v, v.flag, fmt.Sprintf("%s (env %s)", v.usage, v.env))
	}
	return f
}

// Resolve returns the credentials the command line and the environment
// (read through getenv) give, and fails when they give a token twice or a
// certificate without its key.
func (f *Flags) Resolve(getenv func(string) string) (Credentials, error) {
	get := func(i int) string {
		if v := f.values[i]; v.set {
			return v.v
		}
		return getenv(f.values[i].env)
	}
	var c Credentials
	switch t, tf := f.values[token], f.values[tokenFile]; {
	case t.set && tf.set:
		return c, errors.New("--token and --token-file: give the token one way")
	case t.set || tf.set:
		c.Token, c.TokenFile = t.v, tf.v
	default:
		c.Token, c.TokenFile = getenv(t.env), getenv(tf.env)
		if c.Token != "" && c.TokenFile != "" {
			return c, errors.New("PAWL_TOKEN and PAWL_TOKEN_FILE are both set: unset one, or pass --token or --token-file")
		}
	}
	c.TLS = credentials.TLSFiles{CA: get(ca), Cert: get(cert), Key: get(key)}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return c, fmt.Errorf("--cert %q and --key %q (or PAWL_CERT and PAWL_KEY) go together", c.TLS.Cert, c.TLS.Key)
	}
	return c, nil
}
