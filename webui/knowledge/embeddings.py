"""An OpenAI-compatible embeddings endpoint (`POST …/v1/embeddings`), when one is configured
(`STEAMHARNESS_EMBEDDINGS_URL`, `_KEY`, `_MODEL`): the knowledge base embeds each chunk as
it is added and each vector or hybrid query. Bounded: batches of 64 texts, 30 s a request,
a reply of at most 64 MiB; a failure is one clear error and nothing is written."""

from __future__ import annotations

import json
from typing import Final

from webui.errors import SteamharnessError

BATCH: Final = 64
TIMEOUT_SECONDS: Final = 30.0
MAX_REPLY_BYTES: Final = 64 * 1024 * 1024


class EmbeddingsFailed(SteamharnessError):
    """The embedding endpoint did not answer with embeddings: nothing was written."""

    code = "embeddings_failed"
    status = 502


class Embedder:
    def __init__(self, url: str, *, key: str | None = None, model: str = "text-embedding-3-small") -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError("the embeddings URL must be http(s)")
        self.url = url
        self.key = key
        self.model = model

    def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for at in range(0, len(texts), BATCH):
            out += self._batch(texts[at : at + BATCH])
        return out

    def _batch(self, texts: list[str]) -> list[list[float]]:
        import httpx2

        headers = {"content-type": "application/json"}
        if self.key:
            headers["authorization"] = f"Bearer {self.key}"
        body = {"model": self.model, "input": texts}
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
        try:
            data = json.loads(raw)["data"]
            vectors = [item["embedding"] for item in sorted(data, key=lambda d: d["index"])]
            if len(vectors) != len(texts) or not all(
                isinstance(v, list) and v and all(isinstance(x, int | float) for x in v) for v in vectors
            ):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise EmbeddingsFailed(
                "the embedding endpoint's reply holds no embeddings for every text"
            ) from None
        return [[float(x) for x in v] for v in vectors]
