"""Run by Python's ``site`` at the start of every process of a DDPJob's worker (the operator's
helpers come first on its ``PYTHONPATH``): starts the operator's helpers, then runs the image's
own ``sitecustomize``, if it has one, as Python would have without this file (its errors
reported by ``site`` as before). Python 3.9 and later; ours never prints or raises."""


def _ours() -> None:
    try:
        import ddp_operator_helpers

        ddp_operator_helpers.start()
    except Exception:
        pass


def _image_own() -> None:
    """The next ``sitecustomize`` on ``sys.path`` after this one, run as ``sitecustomize``."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_ours()
_image_own()
