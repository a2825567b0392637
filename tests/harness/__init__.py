"""Test harness: a real Kubernetes API server (the local kwok cluster, or KUBECONFIG)."""
