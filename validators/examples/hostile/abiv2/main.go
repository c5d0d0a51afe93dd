// Command abiv2 is a hostile validator that claims an ABI version this host
// does not run. It implements the exports itself, without the guest library.
package main

func main() {}
