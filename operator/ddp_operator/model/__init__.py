"""The model: what every other layer speaks in. The names shared with the CRD and the cluster
(``constants``), a DDPJob's spec with its defaults resolved (``jobspec``) and the summary of an
observed worker pod (``workers``). Pure: plain data and its parsing, no I/O. It imports nothing
of the package but itself, and no third-party package."""
