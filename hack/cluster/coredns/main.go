// Command coredns is the real node's cluster DNS (hack/cluster/realnode.sh): CoreDNS with only
// the plugins its Corefile uses (bind, errors, log, kubernetes), no resolver to forward to.
package main

import (
	"fmt"
	"os"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func main() {
	// The directives in CoreDNS's own execution order (core/dnsserver/zdirectives.go).
	if err := dnsserver.SetDirectives([]string{"bind", "errors", "log", "kubernetes"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	coremain.Run()
}
