"""The Python SDK: submit, follow and manage DDPJobs from Python or a notebook, on a cluster
(``Client``) or as local processes (``LocalClient``: the ``kubectl ddp local`` runner, no
cluster), with the same calls::

    from ddp_operator.sdk import Client

    with Client() as client:  # the kubeconfig's cluster and namespace; deletes its jobs on exit
        name = client.train(
            "examples/scripts/progress_train.py", image=IMAGE, nodes=2,
            resources={"requests": {"cpu": "500m"}}, node_selector={"pool": "cpu"},
        )
        client.wait(name, timeout=600)  # Succeeded, or JobFailed with the job's own message
        print(client.progress(name), client.logs(name))  # or: for line in client.stream(name)

Errors are exceptions carrying the API's message: ``SDKError``, and from ``wait`` ``JobFailed``
or ``TimeoutError``.
"""

from .cluster import Client, JobFailed, SDKError
from .local import LocalClient
from .manifest import job_manifest

__all__ = ["Client", "JobFailed", "LocalClient", "SDKError", "job_manifest"]
