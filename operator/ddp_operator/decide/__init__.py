"""The decisions: a job, its status and its observed pods in; the next status, Events and a
``Plan`` (which pods to create, delete, tell or let go) out. ``reconcile.plan`` decides, with
the modules beside it for each concern (starting, failures and recovery, in-place restarts,
elastic replacement, Kueue, obstacles, the end of a job). Pure: no I/O, no clock of its own
(``now`` is passed in). It may import ``model`` and ``manifests`` (a worker's name), and
nothing of ``api``, ``act`` or ``commands``, nor ``kopf``, ``kubernetes`` or
``prometheus_client``."""
