#!/usr/bin/env bash
# The README's walkthrough, run step by step against a real pawld: keys, a
# validator, a release rolled out by four pawl-agent processes in four zones
# (validate everywhere, then 1%, then zone by zone), promote and rollback.
#
# It builds pawld, pawl and pawl-agent, starts pawld on a free loopback port
# with a data directory under a temporary directory, runs every command of
# the walkthrough (each echoed as "$ COMMAND" before it runs), checks what
# each one should have done, and stops every process it started on exit.
#
#   bash examples/quickstart/run.sh      # from anywhere; needs Go only
#
# PAWL_QUICKSTART_KEEP=1 keeps the temporary directory (logs, agents' files).
# Each wait is bounded (PAWL_QUICKSTART_TIMEOUT seconds, default 180).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pawl-quickstart.XXXXXX")
timeout=${PAWL_QUICKSTART_TIMEOUT:-180}
pids=()

cleanup() {
  status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$status" -ne 0 ]; then
    echo "quickstart: FAILED (exit $status); logs:" >&2
    for log in "$work"/*.log; do
      [ -f "$log" ] || continue
      echo "--- $log (last 40 lines)" >&2
      tail -n 40 "$log" >&2
    done
  fi
  if [ -n "${PAWL_QUICKSTART_KEEP:-}" ]; then
    echo "quickstart: kept $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# step echoes a command of the walkthrough, then runs it.
step() {
  echo "\$ $*" >&2
  "$@"
}

# background LOG COMMAND... echoes a command of the walkthrough that runs
# in the background, then starts it with its output in LOG; the trap stops it.
background() {
  local log=$1
  shift
  echo "\$ $* &" >&2
  "$@" >"$log" 2>&1 &
  pids+=($!)
}

# say prints what the script checks or waits for (not a walkthrough step).
say() { echo "# $*"; }

fail() {
  echo "quickstart: $*" >&2
  exit 1
}

# await runs its arguments until they succeed, for at most $timeout seconds.
await() {
  local what=$1
  shift
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "waited ${timeout}s for $what"
    sleep 0.2
  done
}

# expect runs a command and fails unless its output is exactly WANT.
expect() {
  local want=$1
  shift
  local got
  got=$("$@")
  echo "$got"
  [ "$got" = "$want" ] || fail "$*: got '$got', want '$want'"
}

say "building pawld, pawl and pawl-agent into $work/bin"
(cd "$root" && go build -o "$work/bin/" ./cmd/pawld ./cmd/pawl ./cmd/pawl-agent)
export PATH="$work/bin:$PATH"
export XDG_CACHE_HOME="$work/cache" # the agents' last known good
unset PAWL_TOKEN PAWL_TOKEN_FILE PAWL_CA PAWL_CERT PAWL_KEY PAWL_ACTOR

say "starting pawld on a free port, data in $work/pawl-data"
background "$work/pawld.log" pawld --listen 127.0.0.1:0 --data "$work/pawl-data"
await "pawld to listen" grep -q 'msg="pawld listening"' "$work/pawld.log"
PAWL_SERVER=$(sed -n 's/.*msg="pawld listening".* url=\([^ ]*\).*/\1/p' "$work/pawld.log" | head -n 1)
export PAWL_SERVER
say "pawld listens on $PAWL_SERVER"

cd "$here" # the walkthrough's files: limits.json, deploy.json, routing.json

## Keys
step pawl put /payments/limits.json --file limits.json
step pawl put /payments/mode strict
step pawl put /payments/mode relaxed --expect-revision 2
step pawl put /payments/new x --expect-revision 0
if step pawl put /payments/new y --expect-revision 0; then
  fail "a put with --expect-revision 0 of an existing key succeeded"
fi
expect relaxed step pawl get /payments/mode
expect strict step pawl get /payments/mode --revision 2
step pawl ls /payments/
step pawl del /payments/mode
step pawl txn --file deploy.json
expect strict step pawl get /payments/mode
background "$work/watch.log" pawl watch /payments/ --from-revision 1
await "the watch to replay history" grep -q 'PUT /payments/index' "$work/watch.log"
cat "$work/watch.log"
step pawl snapshot save "$work/backup.db"

## Validators
say "building the example validators (GOOS=wasip1 GOARCH=wasm, as task validators does)"
for v in jsonschema routing; do
  step env GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$work/validators/$v.wasm" "../../validators/examples/$v"
done
limits=$(step pawl validator upload "$work/validators/jsonschema.wasm" --name limits | tail -n 1)
say "limits validator: $limits"
routing=$(step pawl validator upload "$work/validators/routing.wasm" --name routing | tail -n 1)
say "routing validator: $routing"
step pawl validator ls
expect valid step pawl validate --validator "$limits" --file limits.json
if step pawl validate --validator "$limits" --file limits-bad.json; then
  fail "limits-bad.json passed its validator"
fi

## Four instances, one per zone, each a pawl-agent writing files
zones=(zone-a zone-b zone-c zone-d)
for n in 1 2 3 4; do
  zone=${zones[n - 1]}
  mkdir -p "$work/pay-$n"
  background "$work/agent-$n.log" pawl-agent --identity "pay-$n" --zone "$zone" --label env=prod \
    --dir "$work/pay-$n" --exec ../agent/reload.sh
done
live() { [ "$(pawl instances | cut -f5 | grep -c '^live$')" -eq 4 ]; }
await "four live instances" live
step pawl instances

# applied GEN waits until every agent wrote generation GEN's file and its
# --exec ran for it.
applied() {
  local gen=$1 n
  for n in 1 2 3 4; do
    grep -q "payments.routing is now generation $gen" "$work/agent-$n.log" || return 1
  done
}
# same FILE checks every agent's file holds FILE's content.
same() {
  local n
  for n in 1 2 3 4; do cmp -s "$1" "$work/pay-$n/configs/payments.routing" || return 1; done
}
# passed checks that every stage of the newest release passed.
passed() {
  local status
  status=$(pawl rollout status payments.routing)
  grep -q '^stage ' <<<"$status" && ! grep '^stage ' <<<"$status" | grep -qv 'passed at'
}

## Releases
if step pawl release create payments.routing --file routing-bad.json --validator "$routing" --stage all:all; then
  fail "routing-bad.json became a release"
fi
step pawl release create payments.routing --file routing.json --validator "$routing" \
  --selector env=prod --health-window 2s --stage all:all
await "generation 1 to pass its stage" passed
step pawl rollout status payments.routing
step pawl promote payments.routing 1
await "every agent to apply generation 1" applied 1
same routing.json || fail "an agent's file is not routing.json"

## Rollout: validate everywhere, then 1%, then zone by zone
# The canary is drawn by a hash of config, generation and identity: for
# generation 2 of payments.routing it is pay-4 (zone-d), so zone-a and
# zone-b keep their instance, and rest takes pay-3. (A plan whose stage
# would take nobody is refused at create, naming the stage.)
step pawl release create payments.routing --file routing-2.json --validator "$routing" \
  --selector env=prod --health-window 2s \
  --stage validate:all:shadow --stage canary:fraction=0.01 \
  --stage zone-a@zone=zone-a:all --stage zone-b@zone=zone-b:all --stage rest:all
await "generation 2 to pass every stage" passed
step pawl rollout status payments.routing
step pawl rollout status payments.routing --acks
step pawl promote payments.routing 2
await "every agent to apply generation 2" applied 2
same routing-2.json || fail "an agent's file is not routing-2.json"
step pawl rollout applied payments.routing
step pawl release ls payments.routing

## Rollback: back to generation 1, a new receipt
step pawl rollback payments.routing
await "every agent to go back to generation 1" same routing.json
step pawl release ls payments.routing
step pawl audit verify

## Your own validator: write it, test it locally, upload it, release with it
cd "$work"
step pawl validator new --lang go payments-service
cd payments-service
step env GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o payments-service.wasm .
step pawl validator test payments-service.wasm --cases cases | tee "$work/kit.log"
grep -q '^ok sha256:.*: 22 passed, 0 failed, 0 skipped$' "$work/kit.log" || fail "the new validator did not pass every check"
service=$(step pawl validator upload payments-service.wasm --name payments-service | tail -n 1)
say "payments-service validator: $service"
if step pawl release create payments.service --file cases/too-many-replicas.json --validator "$service" --stage all:all; then
  fail "cases/too-many-replicas.json became a release"
fi
step pawl release create payments.service --file cases/valid.json --validator "$service" --stage all:all
step pawl release ls payments.service

say "quickstart: every step passed"
