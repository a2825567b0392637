"""The benchmark's contenders: ours, raw (the API server's own limit), Kubeflow's training
operator v1 and JobSet. Each is a small module with one Contender subclass."""
