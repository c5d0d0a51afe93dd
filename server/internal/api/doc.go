// Package api is Pawl's Connect edge: one handler per service of
// proto/pawl/v1 (kv.go, validator.go, release.go, instance.go, rollout.go,
// audit.go, and session.go, an instance's one stream for all of them), the one place where domain errors become Connect codes
// (errors.go), and the interceptors that wrap unary and streaming calls
// alike (interceptors.go; auditinterceptor.go, which records mutations and
// refusals in the audit log; authz.go, which authenticates and authorizes
// every call by the role table of roles.go; messageguard.go, through which
// they also guard each request a session carries). Handlers convert between wire and domain types and
// call the domain packages (store, watch, validator, instance, release,
// rollout); those never see a wire type.
package api
