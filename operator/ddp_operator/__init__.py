"""ddp-operator: runs multi-node PyTorch DDP jobs on Kubernetes.

Its layers, one subpackage each, top to bottom: ``commands`` (what users run), ``act`` (kopf's
handlers and the per-job loops), ``api`` (the I/O: the API server, the metrics endpoint),
``decide`` (the pure decisions), ``manifests`` (the pure builders) and ``model`` (the job, its
pods and the shared names). A layer imports only the layers below it; ``lint-imports`` checks
it (the contracts are in pyproject.toml)."""
