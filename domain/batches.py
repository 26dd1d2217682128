"""What a batch of job writes answers each job: its own value, or its own error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """One job's part of a batch: the value its write returned, or the error it raised.

    `get()` gives the value or raises the error, so the job that waits on it sees what it
    would have seen writing alone.
    """

    value: T
    error: BaseException | None = None

    @staticmethod
    def failed(error: BaseException) -> Outcome[Any]:
        """A job whose write raised error."""
        return Outcome(None, error)

    def get(self) -> T:
        """The value, or the job's own error raised."""
        if self.error is not None:
            raise self.error
        return self.value
