"""Reading a pickle of plain data only, as tests read torch's flight-recorder dumps (a dump is
the tenant's: the operator itself never reads one)."""

from __future__ import annotations

import io
import pickle
from typing import Any


class PlainData(pickle.Unpickler):
    """Refuses any class or function a pickle names, so loading one runs no code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}: not plain data")


def load(data: bytes) -> Any:
    return PlainData(io.BytesIO(data)).load()
