"""Places counted per key (an account), at most `limit` held at once: what the caps on an
account's open streams and heavy reads share. Thread-safe (routes and their work run in
threads); a place is given back by the release `take` returned, once, however often it is
called."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class CountedSlots(Generic[K]):
    def __init__(self, limit: int, refusal: Callable[[int], Exception]) -> None:
        """`refusal(count)`: what a key already holding `count` places is told (each cap says
        it its own way)."""
        self.limit = limit
        self.refusal = refusal
        self._held: dict[K, int] = {}
        self._lock = threading.Lock()

    def held(self, key: K) -> int:
        with self._lock:
            return self._held.get(key, 0)

    def take(self, key: K) -> Callable[[], None]:
        """One of `key`'s places, or its refusal; returns the place's release (idempotent)."""
        with self._lock:
            count = self._held.get(key, 0)
            if count >= self.limit:
                raise self.refusal(count)
            self._held[key] = count + 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                left = self._held.get(key, 1) - 1
                if left > 0:
                    self._held[key] = left
                else:
                    self._held.pop(key, None)

        return release

    @contextmanager
    def holding(self, key: K) -> Iterator[None]:
        release = self.take(key)
        try:
            yield
        finally:
            release()
