"""An OpenAI-compatible embeddings endpoint (`POST …/v1/embeddings`), when one is configured
(`STEAMHARNESS_EMBEDDINGS_URL`, `_KEY`, `_MODEL`): the knowledge base embeds each chunk as
it is added and each vector or hybrid query. Bounded: batches of 64 texts, 30 s a request
(connecting, sending and reading the whole reply), a reply of at most 16 MiB; a failure is
one clear error and nothing is written.

The server calls the endpoint with `embed_async`, on the event loop and never inside a
database thread or session (webui.knowledge.service embeds before it opens the database work,
within the limits of webui.knowledge.gates); its reply is read as JSON in a plain thread.
`embed` is the blocking form for the command line; it refuses to run in a database thread."""

from __future__ import annotations

import json
from typing import Any, Final

import anyio
import anyio.to_thread

from webui.blocking import in_worker_thread
from webui.errors import SteamharnessError

BATCH: Final = 64
TIMEOUT_SECONDS: Final = 30.0
MAX_REPLY_BYTES: Final = 16 * 1024 * 1024  # 64 vectors of 3,072 floats as JSON take ~4 MiB


class EmbeddingsFailed(SteamharnessError):
    """The embedding endpoint did not answer with embeddings: nothing was written."""

    code = "embeddings_failed"
    status = 502


def batches(count: int) -> int:
    """The requests embedding `count` texts takes."""
    return -(-count // BATCH)


class Embedder:
    def __init__(self, url: str, *, key: str | None = None, model: str = "text-embedding-3-small") -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError("the embeddings URL must be http(s)")
        self.url = url
        self.key = key
        self.model = model

    def _request(self, texts: list[str]) -> tuple[dict[str, str], dict[str, Any]]:
        headers = {"content-type": "application/json"}
        if self.key:
            headers["authorization"] = f"Bearer {self.key}"
        return headers, {"model": self.model, "input": texts}

    # ------------------------------------------------------------------ the server's

    async def embed_async(self, texts: list[str]) -> list[list[float]]:
        """The texts' embeddings, a batch a request, each request bounded in time and size."""
        out: list[list[float]] = []
        for at in range(0, len(texts), BATCH):
            out += await self._batch_async(texts[at : at + BATCH])
        return out

    async def _batch_async(self, texts: list[str]) -> list[list[float]]:
        import httpx2

        headers, body = self._request(texts)
        raw = bytearray()
        try:
            with anyio.fail_after(TIMEOUT_SECONDS):
                async with (
                    httpx2.AsyncClient(timeout=TIMEOUT_SECONDS, follow_redirects=False) as client,
                    client.stream("POST", self.url, headers=headers, json=body) as reply,
                ):
                    if reply.status_code != 200:
                        raise EmbeddingsFailed(f"the embedding endpoint answered HTTP {reply.status_code}")
                    async for piece in reply.aiter_bytes():
                        raw += piece
                        if len(raw) > MAX_REPLY_BYTES:
                            raise EmbeddingsFailed("the embedding endpoint's reply is too large")
        except TimeoutError:
            raise EmbeddingsFailed(
                f"the embedding endpoint did not answer within {TIMEOUT_SECONDS:g} seconds"
            ) from None
        except httpx2.HTTPError as exc:
            raise EmbeddingsFailed(
                f"the embedding endpoint could not be reached ({type(exc).__name__})"
            ) from None
        return await anyio.to_thread.run_sync(vectors_of, bytes(raw), len(texts))

    # ------------------------------------------------------------------ the command line's

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Blocking: for the command line (and tests); never in a database thread."""
        if in_worker_thread():
            raise RuntimeError("an embeddings request inside a database thread: use embed_async before it")
        out: list[list[float]] = []
        for at in range(0, len(texts), BATCH):
            out += self._batch(texts[at : at + BATCH])
        return out

    def _batch(self, texts: list[str]) -> list[list[float]]:
        import httpx2

        headers, body = self._request(texts)
        try:
            with (
                httpx2.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False) as client,
                client.stream("POST", self.url, headers=headers, json=body) as reply,
            ):
                if reply.status_code != 200:
                    raise EmbeddingsFailed(f"the embedding endpoint answered HTTP {reply.status_code}")
                raw = bytearray()
                for piece in reply.iter_bytes():
                    raw += piece
                    if len(raw) > MAX_REPLY_BYTES:
                        raise EmbeddingsFailed("the embedding endpoint's reply is too large")
        except httpx2.HTTPError as exc:
            raise EmbeddingsFailed(
                f"the embedding endpoint could not be reached ({type(exc).__name__})"
            ) from None
        return vectors_of(bytes(raw), len(texts))


def vectors_of(raw: bytes, count: int) -> list[list[float]]:
    """The `count` embeddings of a reply, in the order of the texts sent."""
    try:
        data = json.loads(raw)["data"]
        vectors = [item["embedding"] for item in sorted(data, key=lambda d: d["index"])]
        if len(vectors) != count or not all(
            isinstance(v, list) and v and all(isinstance(x, int | float) for x in v) for v in vectors
        ):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise EmbeddingsFailed("the embedding endpoint's reply holds no embeddings for every text") from None
    return [[float(x) for x in v] for v in vectors]
