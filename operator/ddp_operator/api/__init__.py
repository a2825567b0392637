"""The operator's I/O: its requests to the API server (``kube``), its watch of pods
(``kubewatch``), the pods it sees, kept from a list and that watch (``podwatch``), and its
Prometheus metrics (``metrics``). It may import ``model`` and ``decide`` (``podwatch`` says why
the pods cannot be seen in ``failures``' words), never ``act`` or ``commands``; no layer below
it imports it."""
