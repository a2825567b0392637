"""The commands users run: ``ddp-operator`` (``cli``: the operator), ``kubectl-ddp``
(``kubectl_ddp``, with ``jobview`` for ``status`` and ``localrun`` for ``local``) and
``ddp-wait`` (``ddp_wait``: copied alone into trainer images, so it imports only the standard
library). It may import every layer below; nothing imports it."""
