package host

import (
	"reflect"
	"testing"
)

func TestRedact(t *testing.T) {
	config := []byte(`{"db":{"password":"hunter2-long","port":5432},"tokens":["abc\"def12"],"a/b":{"~k":"tilde-secret"},"short":"ab"}`)
	values := SecretValues(config, []string{"/db/password", "/db/port", "/tokens/0", "/a~1b/~0k", "/short", "/missing", "/tokens/9"})
	want := []string{"hunter2-long", "5432", `abc"def12`, "tilde-secret"}
	if !reflect.DeepEqual(values, want) {
		t.Fatalf("SecretValues = %q; want %q", values, want)
	}
	got := Redact(`password "hunter2-long" on port 5432, token "abc\"def12", tilde-secret`, values)
	if w := `password "[redacted]" on port [redacted], token "[redacted]", [redacted]`; got != w {
		t.Fatalf("Redact = %q; want %q", got, w)
	}
	if SecretValues([]byte("not json"), []string{"/a"}) != nil {
		t.Fatal("values from content that is not JSON")
	}
}
