"""Embedding backends: local ONNX through fastembed (default), any OpenAI-compatible
`/v1/embeddings` endpoint, and deterministic feature hashing.

An embedder turns texts into unit float32 vectors and names itself with a fingerprint
(backend, model id, dimension). Every decision that used a similarity records that fingerprint.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from keytrail.events import StoreError
from keytrail.projections.vectors import Matrix

from .validation import counted

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
EMBEDDERS = ("fastembed", "openai", "hash")
#: Dimensions of OpenAI's models, so opening a store needs no request to learn them.
OPENAI_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
#: OpenAI models that return shorter vectors on request (the API's `dimensions`): smaller
#: matrices and cache for a little less accuracy.
OPENAI_SHORTENED = ("text-embedding-3-small", "text-embedding-3-large")


class Embedder(Protocol):
    backend: str
    model_id: str

    @property
    def dim(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> Matrix: ...


def _normalise(matrix: np.ndarray[Any, Any]) -> Matrix:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: Matrix = matrix / norms
    return result


class HashEmbedder:
    """Signed feature hashing of words and their character trigrams. No download, no model.

    Similar strings (shared words, shared word pieces such as apple/apples) get similar vectors;
    meaning is not captured. Meant for offline use, fast tests and benchmarks of everything but
    the model.
    """

    backend = "hash"
    model_id = "hash"

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self._cache: dict[str, tuple[list[int], list[float]]] = {}

    @property
    def fingerprint(self) -> str:
        return f"hash:v1:{self.dim}"

    _word = re.compile(r"\w+")
    #: Words whose hashed features are kept (cleared when full): text repeats its words.
    _WORD_CACHE = 65536

    def _word_features(self, word: str) -> tuple[list[int], list[float]]:
        """Columns and signs of a word and its character trigrams."""
        padded = f"<{word}>"
        feats = [word, *(padded[i : i + 3] for i in range(len(padded) - 2))]
        columns, signs = [], []
        for feat in feats:
            h = zlib.crc32(feat.encode())
            columns.append(h % self.dim)
            signs.append(1.0 if (h >> 31) & 1 else -1.0)
        return columns, signs

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        cache = self._cache
        for row, text in enumerate(texts):
            columns: list[int] = []
            signs: list[float] = []
            for word in self._word.findall(text.casefold()):
                got = cache.get(word)
                if got is None:
                    if len(cache) >= self._WORD_CACHE:
                        cache.clear()
                    got = cache[word] = self._word_features(word)
                columns += got[0]
                signs += got[1]
            if columns:
                # Sums of +-1 are exact in any order, so this equals adding feature by feature.
                counts = np.bincount(columns, weights=signs, minlength=self.dim)
                squares = float(counts @ counts)  # an exact integer
                if squares:
                    # The float32 norm and division of `_normalise`, bit for bit: each float32
                    # operation done in float64 and rounded once is correctly rounded.
                    out[row] = counts / float(np.float32(math.sqrt(squares)))
        return out


class FastEmbedder:
    """A local ONNX model through fastembed. Loads lazily, on the first text to embed."""

    backend = "fastembed"

    def __init__(
        self,
        model_id: str = DEFAULT_MODEL,
        model_path: str | None = None,
        dim: int | None = None,
        batch_size: int = 64,
        threads: int = 1,
    ) -> None:
        self.model_id = model_id
        self.model_path = model_path
        self.batch_size = batch_size
        #: the ONNX runtime's threads; 0 leaves the choice to it (one per core)
        self.threads = threads
        self._model: Any = None
        known = self._known_dim(model_id)
        if dim is None:
            if known is None:
                raise StoreError(f"fastembed does not know model {model_id!r}", model=model_id)
            dim = known
        elif known is not None and dim != known:
            # Every vector would be of the wrong width: refused before a store is touched.
            raise StoreError(
                f"KEYTRAIL_EMBED_DIM (--embed-dim) is {dim}, but {model_id} makes "
                f"{known}-dimensional vectors; leave it unset for a model fastembed knows",
                field="embed_dim",
                model=model_id,
            )
        self.dim = dim

    @staticmethod
    def _known_dim(model_id: str) -> int | None:
        from fastembed import TextEmbedding

        for desc in TextEmbedding.list_supported_models():
            if desc.get("model") == model_id:
                return int(desc["dim"])
        return None

    @property
    def fingerprint(self) -> str:
        return f"fastembed:{self.model_id}:{self.dim}"

    def _load(self) -> Any:
        if self._model is None:
            from fastembed import TextEmbedding

            kwargs: dict[str, Any] = {"threads": self.threads or None}
            if self.model_path:
                kwargs["specific_model_path"] = self.model_path
            try:
                self._model = TextEmbedding(self.model_id, **kwargs)
            except Exception as exc:  # fastembed raises bare exceptions for download failures
                where = self.model_path or "the model hub"
                raise StoreError(
                    f"cannot load embedding model {self.model_id!r} from {where}: {exc}",
                    model=self.model_id,
                    path=self.model_path,
                ) from exc
        return self._model

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        vectors = np.array(list(model.embed(list(texts), batch_size=self.batch_size)))
        return _normalise(vectors)


class OpenAIEmbedder:
    """Any OpenAI-compatible `/v1/embeddings` endpoint, through the `openai` client.

    `api_key` and `base_url` default to OPENAI_API_KEY and OPENAI_BASE_URL as the client reads
    them. Texts go in batches of `batch_size` per request. Rate limits (429), server errors (5xx),
    timeouts and dropped connections are retried by the client (`max_retries` times, exponential
    backoff honouring Retry-After); what still fails raises a StoreError naming the URL.
    A model whose dimension is not known is asked once, on first use of `dim`.
    """

    backend = "openai"

    def __init__(
        self,
        model_id: str = DEFAULT_OPENAI_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dim: int | None = None,
        batch_size: int = 256,
        max_retries: int = 4,
        timeout: float = 60.0,
    ) -> None:
        import openai

        self.model_id = model_id
        self.batch_size = batch_size
        try:
            self._client = openai.OpenAI(
                # Local servers often need no key; the client refuses to start without one.
                api_key=api_key or os.environ.get("OPENAI_API_KEY") or "unused",
                base_url=base_url,
                max_retries=max_retries,
                timeout=timeout,
            )
        except openai.OpenAIError as exc:
            raise StoreError(f"cannot set up the OpenAI client: {exc}") from exc
        self.url = str(self._client.base_url)
        native = OPENAI_DIMS.get(model_id)
        #: sent as the request's `dimensions`: a shorter vector than the model's own, asked for
        self._dimensions: int | None = None
        if dim is not None and native is not None and dim != native:
            if model_id not in OPENAI_SHORTENED or dim > native:
                makes = (
                    f"vectors of at most {native} dimensions"
                    if model_id in OPENAI_SHORTENED
                    else f"{native}-dimensional vectors only"
                )
                raise StoreError(
                    f"KEYTRAIL_EMBED_DIM (--embed-dim) is {dim}, but {model_id} makes {makes}",
                    field="embed_dim",
                    model=model_id,
                )
            self._dimensions = dim
        self._dim = dim if dim is not None else native

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._request(["dimension probe"]).shape[1])
        return self._dim

    @property
    def dim_known(self) -> bool:
        """Whether `dim` answers without asking the endpoint."""
        return self._dim is not None

    @property
    def fingerprint(self) -> str:
        return f"openai:{self.model_id}:{self.dim}"

    def _request(self, texts: list[str]) -> Matrix:
        import openai

        try:
            if self._dimensions is not None:
                response = self._client.embeddings.create(
                    model=self.model_id,
                    input=texts,
                    encoding_format="float",
                    dimensions=self._dimensions,
                )
            else:
                response = self._client.embeddings.create(
                    model=self.model_id, input=texts, encoding_format="float"
                )
        except openai.APIStatusError as exc:
            raise StoreError(
                f"embeddings request to {self.url} failed with HTTP {exc.status_code}: "
                f"{exc.message}",
                url=self.url,
                status=exc.status_code,
                model=self.model_id,
            ) from exc
        except openai.APIError as exc:  # connection refused, DNS, timeouts after retries
            raise StoreError(
                f"cannot reach the embeddings endpoint {self.url}: {exc}",
                url=self.url,
                model=self.model_id,
            ) from exc
        rows = sorted(response.data, key=lambda item: item.index)
        if len(rows) != len(texts):
            raise StoreError(
                f"embeddings endpoint {self.url} returned {counted(len(rows), 'vector')} for "
                f"{counted(len(texts), 'text')}",
                url=self.url,
                model=self.model_id,
            )
        return _normalise(np.array([row.embedding for row in rows], dtype=np.float32))

    def embed(self, texts: Sequence[str]) -> Matrix:
        # The API refuses empty input; an empty text (a forgotten memory's) gets a zero vector.
        sent = [i for i, text in enumerate(texts) if text.strip()]
        result = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(sent), self.batch_size):
            rows = sent[start : start + self.batch_size]
            vectors = self._request([texts[i] for i in rows])
            if vectors.shape[1] != self.dim:
                raise StoreError(
                    f"embeddings endpoint {self.url} returned {vectors.shape[1]}-dimensional "
                    f"vectors for model {self.model_id!r}, expected {self.dim}",
                    url=self.url,
                    model=self.model_id,
                )
            result[rows] = vectors
        return result


def name_of(embedder: Embedder) -> str:
    """The embedder's fingerprint, or `backend:model` while its dimension is still to be asked
    of its endpoint: for what must answer without it (stats, messages about a failed build),
    since that endpoint may be the thing that is down."""
    if getattr(embedder, "dim_known", True):
        return embedder.fingerprint
    return f"{embedder.backend}:{embedder.model_id}"


def make_embedder(
    backend: str,
    model_id: str | None = None,
    model_path: str | None = None,
    dim: int | None = None,
    threads: int = 1,
) -> Embedder:
    if backend == "hash":
        return HashEmbedder() if dim is None else HashEmbedder(dim)
    if backend == "fastembed":
        return FastEmbedder(model_id or DEFAULT_MODEL, model_path, dim, threads=threads)
    if backend == "openai":
        return OpenAIEmbedder(model_id or DEFAULT_OPENAI_MODEL, dim=dim)
    raise StoreError(
        f"unknown embedder {backend!r} (choose {', '.join(EMBEDDERS)})", embedder=backend
    )
