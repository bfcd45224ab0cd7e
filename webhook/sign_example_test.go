package webhook_test

import (
	"fmt"

	"kat.dws.rip/kat/webhook"
)

// The generic provider's X-Kat-Signature, as openssl computes it too:
// printf %s "$body" | openssl dgst -sha256 -hmac "$secret" | sed 's/^.* /sha256=/'
func ExampleSign() {
	body := []byte(`{"repository":"file:///srv/config.git","ref":"main"}`)
	fmt.Println(webhook.Sign([]byte("topsecret"), body))
	// Output: sha256=2f5730b175b021a432745c057cf426554885655ac8638af2b2538850a3ea1a99
}
