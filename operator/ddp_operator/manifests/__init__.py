"""The manifests: a resolved job in, the Kubernetes objects it needs out, as plain dicts (the
worker pods and Service in ``builders``, what an in-place pod carries in ``inplace_pod``, the
gang's group objects in ``gang``, the NetworkPolicy in ``netpol``). Pure: no I/O. It may import
``model``, and nothing of ``decide``, ``api``, ``act`` or ``commands``; of third-party packages
only ``kubernetes.utils.quantity`` (``gang`` adds up resource quantities with it)."""
