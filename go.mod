module github.com/pawlcfg/pawl

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	go.etcd.io/bbolt v1.4.3
	go.uber.org/goleak v1.3.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
