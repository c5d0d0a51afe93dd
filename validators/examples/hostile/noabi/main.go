// Command noabi is a plain WASI program with none of the ABI's exports; it
// is built as an ordinary executable, not with -buildmode=c-shared.
package main

func main() {}
