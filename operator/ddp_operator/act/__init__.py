"""Acting: kopf's handlers (``handlers``) feed the registry of per-job loops (``registry``);
each loop (``runner``) asks ``decide`` for a Plan and carries it out through ``api``: the
objects a job claims (``claims``), Kueue's marks and finalizers (``kueue_steps``), the Events of
stalled workers (``stalls``), each step's error naming it (``steps``). It may import every layer
below (``api``, ``decide``, ``manifests``, ``model``), never ``commands``."""
