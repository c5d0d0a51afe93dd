// Package auth says who is calling: it reads the auth file (bearer tokens,
// stored only as hashes, and the principals of client certificates, each
// with its grants), finds the principal of a bearer token or of a verified
// client certificate, and carries the principal on the request's context.
//
// The file (pawld --auth-file) is YAML:
//
//	tokens:
//	  - principal: ci-deployer
//	    hash: sha256:3f1c...            # of the token: "sha256:" + hex of sha256(token)
//	    expires: 2027-06-01T00:00:00Z   # optional, RFC 3339
//	    grants:
//	      - role: releaser
//	        configs: ["checkout", "payments-*"]
//	      - role: writer
//	        prefixes: ["/app/"]
//	certificates:
//	  - principal: spiffe://prod.example/ns/shop/sa/checkout
//	    grants:
//	      - role: instance
//	        identities: ["checkout-1"]
//
// A token is "pawl_" and the unpadded base64url of 32 random bytes. The
// file is checked whole before it is used: an unknown field, role or
// scope, a malformed hash or time, a duplicate hash or certificate
// principal, or a grant without the scope its role needs is an error that
// names the entry and its line, and a bad file on reload leaves the one in
// use in place (Authenticator.Reload).
//
// What a role allows is decided by the Connect edge (server/internal/api,
// its role table); this package only answers whether a principal holds a
// role for a key, a config or a workload identity. Keys under /_pawl/ are
// for admins only, whatever the prefixes of a grant.
package auth
