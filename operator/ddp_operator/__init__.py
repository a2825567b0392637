"""ddp-operator: runs multi-node PyTorch DDP jobs on Kubernetes."""
