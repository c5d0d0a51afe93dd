// Package server runs Pawl: it opens the store, starts the watch hub, the
// rollout views (every config's rollout, kept current from the store's
// feed, which every rollout decision and assignment stream reads), the
// rollout supervisor (which settles rollouts left mid-step by a crash, and
// stops rollouts at their deadline) and the lease checkpoint, and
// serves the Connect handlers (Connect, gRPC and gRPC-Web on one port), with
// gRPC health checking and server reflection.
//
// The store is the embedded bbolt file in the data directory, or Redis
// (WithStore), which several servers share as replicas: then the
// compactor and the rollout supervisor run under a lease on one replica
// at a time (package singleton), instance leases are shared through the
// store, and health checks report NOT_SERVING while the replica cannot
// follow Redis.
//
// A program needs four things from it:
//
//	srv, err := server.New(ctx, server.WithDataDir("./pawl-data"))
//	...
//	err = srv.Serve(ctx, listener) // until ctx is done, then a graceful stop
//	...
//	err = srv.Close()              // stops the supervisor, closes the store
//
// Imports go one way: cmd → server → server/internal/* → gen. The parts:
//
//	server/internal/store      the storage contract, with its conformance suite in storetest
//	server/internal/store/boltstore  the embedded bbolt engine (the default)
//	server/internal/store/redisstore the Redis engine, shared by replicas
//	server/internal/retention  the change log's retention policy and the compactor
//	server/internal/singleton  work that runs on one replica at a time, under a fenced lease
//	server/internal/watch      the watch hub
//	server/internal/api        the Connect edge: a handler per service, the error-to-code mapper, interceptors, the role table
//	server/internal/connlimit  the listener's connection limits: in total, per address, and the admin networks' reserve
//	server/internal/auth       the auth file: principals of bearer tokens and client certificates, and their grants
//	server/internal/records    the layout of /_pawl/ and its codec
//	server/internal/audit      the hash-chained audit log of every mutation and refusal: a file beside the embedded store, or keys of its own in Redis
//	server/internal/pagetoken  the tokens that continue paginated listings
//	server/internal/validator  stored validators: upload checks, loading, runs
//	server/internal/instance   the instance registry: leases, boots, membership epochs
//	server/internal/release    immutable releases and their generations
//	server/internal/quorum     ACK policies evaluated against a frozen membership
//	server/internal/rollout    what counts, stage progress, stops, promotion, rollback, receipts, retirements, applied records
package server
