// Command routing is an example domain validator: an upstream routing table
// whose weights must sum to 100 and whose hosts must be unique.
//
//	{"upstreams": [{"host": "a.internal:443", "weight": 60}, {"host": "b.internal:443", "weight": 40}]}
//
// An upstream may carry a "token" to authenticate to it, of at least 16
// characters; the validator marks every token secret (Result.Secrets), so
// hosts redact it from what they report, this validator's own messages
// included.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o routing.wasm .
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/pawlcfg/pawl/validators/guest"
)

func init() { guest.Handle(validate) }

func main() {}

type table struct {
	Upstreams []struct {
		Host   string `json:"host"`
		Weight *int   `json:"weight"`
		Token  string `json:"token"`
	} `json:"upstreams"`
}

func validate(in guest.Input) guest.Result {
	var t table
	if err := json.Unmarshal(in.Config, &t); err != nil {
		return fail("", "not a routing table: "+decodeError(err))
	}
	var res guest.Result
	add := func(path, format string, args ...any) {
		res.Violations = append(res.Violations, guest.Violation{Path: path, Message: fmt.Sprintf(format, args...), Severity: guest.SeverityError})
	}
	if len(t.Upstreams) == 0 {
		add("/upstreams", "at least one upstream is required")
	}
	seen := map[string]int{}
	sum := 0
	for i, u := range t.Upstreams {
		path := fmt.Sprintf("/upstreams/%d", i)
		switch {
		case u.Host == "":
			add(path+"/host", "host is required")
		case seen[u.Host] > 0:
			add(path+"/host", "host %q is also upstream %d; hosts must be unique", u.Host, seen[u.Host]-1)
		default:
			seen[u.Host] = i + 1
		}
		if u.Token != "" {
			res.Secrets = append(res.Secrets, path+"/token")
			if len(u.Token) < 16 {
				add(path+"/token", "token %q is shorter than 16 characters", u.Token)
			}
		}
		switch {
		case u.Weight == nil:
			add(path+"/weight", "weight is required")
		case *u.Weight < 0 || *u.Weight > 100:
			add(path+"/weight", "weight %d is outside 0..100", *u.Weight)
		default:
			sum += *u.Weight
		}
	}
	if len(t.Upstreams) > 0 && sum != 100 {
		add("/upstreams", "weights sum to %d; they must sum to 100", sum)
	}
	res.Valid = len(res.Violations) == 0
	return res
}

// decodeError says why the config is not a routing table in words that
// do not depend on Go: the Rust and AssemblyScript ports of this example
// (routing-rust, routing-as) write the same messages.
func decodeError(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return "invalid JSON"
	}
	place := te.Field
	if place == "" {
		place = "the config"
	}
	var want string
	switch te.Type.Kind() {
	case reflect.Struct:
		if te.Field != "" {
			return fmt.Sprintf("%s must hold objects, not %s", place, te.Value)
		}
		want = "an object"
	case reflect.Slice:
		want = "an array"
	case reflect.Int:
		want = "an integer"
	default:
		want = "a string"
	}
	return fmt.Sprintf("%s must be %s, not %s", place, want, te.Value)
}

func fail(path, msg string) guest.Result {
	return guest.Result{Violations: []guest.Violation{{Path: path, Message: msg, Severity: guest.SeverityError}}}
}
