// Package api is Pawl's Connect edge: one handler per service of
// proto/pawl/v1 (kv.go, validator.go, release.go, instance.go, rollout.go,
// audit.go), the one place where domain errors become Connect codes
// (errors.go), and the interceptors that wrap unary and streaming calls
// alike (interceptors.go; auditinterceptor.go, which records mutations and
// refusals in the audit log; authz.go, which authenticates and authorizes
// every call by the role table of roles.go). Handlers convert between wire and domain types and
// call the domain packages (store, watch, validator, instance, release,
// rollout); those never see a wire type.
package api
