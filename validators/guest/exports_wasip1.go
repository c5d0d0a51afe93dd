package guest

import "unsafe"

// buffers keeps the last input and output alive between calls; the host
// reads the output before the next call.
var inBuf, outBuf []byte

//go:wasmexport pawl_abi_version
func abiVersion() int32 { return ABIVersion }

//go:wasmexport pawl_alloc
func alloc(size int32) unsafe.Pointer {
	// The host writes all size bytes before the call: the last buffer,
	// when it is large enough, needs no zeroing or collecting.
	if int(size) <= cap(inBuf) {
		inBuf = inBuf[:size]
	} else {
		inBuf = make([]byte, size)
	}
	if size == 0 {
		return nil
	}
	return unsafe.Pointer(&inBuf[0])
}

//go:wasmexport pawl_validate
func validate(ptr unsafe.Pointer, size int32) int64 {
	input := unsafe.Slice((*byte)(ptr), size)
	outBuf = run(input)
	if len(outBuf) == 0 {
		return 0
	}
	return int64(uintptr(unsafe.Pointer(&outBuf[0])))<<32 | int64(len(outBuf))
}
