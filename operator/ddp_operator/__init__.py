"""ddp-operator: runs multi-node PyTorch DDP jobs on Kubernetes.

Its layers, one subpackage each, top to bottom: ``sdk`` (the Python SDK), ``commands`` (what
users run), ``act`` (kopf's handlers and the per-job loops), ``api`` (the I/O: the API server,
the metrics and progress endpoints), ``decide`` (the pure decisions), ``manifests`` (the pure
builders), ``model`` (the job, its pods and the shared names) and ``progress`` (what training
scripts call to report, the standard library only). A layer imports only the layers below it;
``lint-imports`` checks it (the contracts are in pyproject.toml)."""
