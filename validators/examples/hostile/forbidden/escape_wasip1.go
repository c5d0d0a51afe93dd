package main

//go:wasmimport env pawl_escape
func escape() int32
