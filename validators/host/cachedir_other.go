//go:build !unix

package host

// checkOwned checks nothing where the OS has no Unix owners and
// permission bits (Windows): there, keep the directory's ACL to the
// service's user.
func checkOwned(string, bool) error { return nil }
