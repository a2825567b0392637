// Command netpol enforces Kubernetes NetworkPolicy for the pods of the local cluster's real node
// (hack/cluster/realnode.sh), beside its bridge CNI. The decisions are kube-network-policies'
// (sigs.k8s.io/kube-network-policies: its standard NetworkPolicy evaluator, fed by informers);
// the dataplane is this file's: the first packet of every connection forwarded to or from a pod
// that a policy selects goes to an NFQUEUE, where the evaluator's verdict accepts or drops it.
// kube-network-policies' own dataplane needs nftables' queue statement, which this kernel lacks
// (CONFIG_NFT_QUEUE is off); iptables' NFQUEUE target works.
//
// Fail closed: the rules carry no --queue-bypass, so while this process is down (stopped,
// crashed, not started yet after a reboot of the node) the kernel drops every new connection of
// a selected pod; connections already accepted go on. `netpol -cleanup` removes the rules.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/florianl/go-nfqueue/v2"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/api"
	"sigs.k8s.io/kube-network-policies/pkg/network"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
	"sigs.k8s.io/kube-network-policies/pkg/podinfo"
)

const chain = "DDP-NETPOL"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	node := flag.String("node", "", "the node's name: only its pods are enforced")
	queue := flag.Uint("queue", 98, "NFQUEUE number")
	cleanup := flag.Bool("cleanup", false, "remove the rules and exit")
	klog.InitFlags(nil)
	flag.Parse()
	if *cleanup {
		if err := removeRules(); err != nil {
			klog.Fatal(err)
		}
		return
	}
	if *kubeconfig == "" || *node == "" {
		klog.Fatal("-kubeconfig and -node are required")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, *kubeconfig, *node, uint16(*queue)); err != nil && ctx.Err() == nil {
		klog.Fatal(err)
	}
}

func run(ctx context.Context, kubeconfig, node string, queue uint16) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	pods, namespaces := factory.Core().V1().Pods(), factory.Core().V1().Namespaces()
	policies := factory.Networking().V1().NetworkPolicies()
	resolver, err := podinfo.NewInformerResolver(pods.Informer())
	if err != nil {
		return err
	}
	provider := podinfo.NewInformerProvider(pods, namespaces, nil, []podinfo.IPResolver{resolver})
	standard := networkpolicy.NewStandardNetworkPolicy(node, namespaces, pods, policies)
	engine := networkpolicy.NewPolicyEngine(provider, []api.PolicyEvaluator{standard})
	changed := make(chan struct{}, 1)
	engine.SetDataplaneSyncCallbacks(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	factory.Start(ctx.Done())
	for !engine.Ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	nf, err := listen(ctx, engine, queue)
	if err != nil {
		return err
	}
	defer nf.Close()
	klog.Info("ready: enforcing NetworkPolicy for the pods of node ", node)
	return syncLoop(ctx, engine, queue, changed)
}

// listen gives each queued packet the engine's verdict (a packet it cannot read is dropped).
func listen(ctx context.Context, engine *networkpolicy.PolicyEngine, queue uint16) (*nfqueue.Nfqueue, error) {
	nf, err := nfqueue.Open(&nfqueue.Config{
		NfQueue:      queue,
		MaxPacketLen: 128, // the headers
		MaxQueueLen:  1024,
		Copymode:     nfqueue.NfQnlCopyPacket,
		WriteTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("opening NFQUEUE %d: %w", queue, err)
	}
	verdict := func(a nfqueue.Attribute) int {
		allowed := false
		packet, err := network.ParsePacket(*a.Payload)
		if err == nil {
			allowed, err = engine.EvaluatePacket(ctx, &packet)
		}
		if err != nil {
			klog.ErrorS(err, "dropping a packet it cannot judge")
		}
		v := nfqueue.NfDrop
		if allowed {
			v = nfqueue.NfAccept
		}
		klog.V(2).InfoS("verdict", "packet", packet.String(), "allowed", allowed)
		if err := nf.SetVerdict(*a.PacketID, v); err != nil {
			klog.ErrorS(err, "setting a verdict")
		}
		return 0
	}
	onError := func(err error) int {
		if ctx.Err() == nil {
			klog.ErrorS(err, "reading the queue")
		}
		return 0
	}
	if err := nf.RegisterWithErrorFunc(ctx, verdict, onError); err != nil {
		nf.Close()
		return nil, err
	}
	return nf, nil
}

// syncLoop writes the rules now, after each change the engine reports, and every minute.
func syncLoop(ctx context.Context, engine *networkpolicy.PolicyEngine, queue uint16, changed <-chan struct{}) error {
	written := ""
	for {
		ips, all, err := engine.GetManagedIPs(ctx)
		if err == nil {
			rules := ruleset(ips, all, queue)
			if rules != written {
				if err = restore(rules); err == nil {
					written = rules
					klog.InfoS("rules written", "pods", len(ips), "all", all)
				}
			}
		}
		if err != nil {
			klog.ErrorS(err, "writing the rules (retry in 1 s)")
		}
		wait := time.Minute
		if err != nil {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return nil // the rules stay: fail closed
		case <-changed:
		case <-time.After(wait):
		}
	}
}

// ruleset is the filter table's DDP-NETPOL chain, jumped to first from FORWARD (pods on the
// node's bridge reach each other through it: bridge-nf-call-iptables): every new connection
// to or from a managed pod (every pod, if some policy asks for all) goes to the queue.
func ruleset(ips []netip.Addr, all bool, queue uint16) string {
	var b strings.Builder
	b.WriteString("*filter\n:" + chain + " - [0:0]\n")
	target := fmt.Sprintf("-m conntrack --ctstate NEW -j NFQUEUE --queue-num %d", queue)
	if all {
		fmt.Fprintf(&b, "-A %s %s\n", chain, target)
	} else {
		slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
		for _, ip := range ips {
			if ip.Is4() {
				fmt.Fprintf(&b, "-A %s -d %s %s\n-A %s -s %s %s\n", chain, ip, target, chain, ip, target)
			}
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// restore replaces the chain's rules in one transaction, then makes sure FORWARD jumps to it.
func restore(rules string) error {
	cmd := exec.Command("iptables-restore", "--noflush", "-w", "5")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore: %w: %s", err, out)
	}
	if iptables("-C", "FORWARD", "-j", chain) == nil {
		return nil
	}
	return iptables("-I", "FORWARD", "1", "-j", chain)
}

func removeRules() error {
	for iptables("-D", "FORWARD", "-j", chain) == nil {
	}
	if iptables("-n", "-L", chain) != nil {
		return nil // no chain
	}
	return errors.Join(iptables("-F", chain), iptables("-X", chain))
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
