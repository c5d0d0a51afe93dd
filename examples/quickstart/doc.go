// Package quickstart holds the README's walkthrough as a script, run.sh,
// with the files its commands use (limits.json, deploy.json, routing.json
// and the rest). The script builds pawld, pawl and pawl-agent, starts pawld
// on a free loopback port with a temporary data directory, and runs every
// command of the walkthrough against it, echoing each one: keys, a
// validator built from validators/examples, and a release rolled out by
// four pawl-agent processes in four zones (validate everywhere, then 1%,
// then zone by zone), promoted, then rolled back. It stops every process
// it started on exit.
//
// The package's test runs the script (skipped under -short), and checks
// that the README's walkthrough block shows exactly the commands the
// script runs, so the README cannot drift from what works.
package quickstart
