"""Embedding backends: local ONNX through fastembed (default) and deterministic feature hashing.

An embedder turns texts into unit float32 vectors and names itself with a fingerprint
(backend, model id, dimension). Every decision that used a similarity records that fingerprint.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from keytrail.events import StoreError
from keytrail.projections.vectors import Matrix

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class Embedder(Protocol):
    backend: str
    model_id: str
    dim: int

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

    @property
    def fingerprint(self) -> str:
        return f"hash:v1:{self.dim}"

    _word = re.compile(r"\w+")

    def _features(self, text: str) -> list[str]:
        feats: list[str] = []
        for word in self._word.findall(text.casefold()):
            feats.append(word)
            padded = f"<{word}>"
            feats.extend(padded[i : i + 3] for i in range(len(padded) - 2))
        return feats

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat in self._features(text):
                h = zlib.crc32(feat.encode())
                out[row, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        return _normalise(out)


class FastEmbedder:
    """A local ONNX model through fastembed. Loads lazily, on the first text to embed."""

    backend = "fastembed"

    def __init__(
        self,
        model_id: str = DEFAULT_MODEL,
        model_path: str | None = None,
        dim: int | None = None,
        batch_size: int = 64,
    ) -> None:
        self.model_id = model_id
        self.model_path = model_path
        self.batch_size = batch_size
        self._model: Any = None
        self.dim = dim if dim is not None else self._known_dim(model_id)

    @staticmethod
    def _known_dim(model_id: str) -> int:
        from fastembed import TextEmbedding

        for desc in TextEmbedding.list_supported_models():
            if desc.get("model") == model_id:
                return int(desc["dim"])
        raise StoreError(f"fastembed does not know model {model_id!r}", model=model_id)

    @property
    def fingerprint(self) -> str:
        return f"fastembed:{self.model_id}:{self.dim}"

    def _load(self) -> Any:
        if self._model is None:
            from fastembed import TextEmbedding

            kwargs: dict[str, Any] = {}
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


def make_embedder(
    backend: str, model_id: str | None = None, model_path: str | None = None
) -> Embedder:
    if backend == "hash":
        return HashEmbedder()
    if backend == "fastembed":
        return FastEmbedder(model_id or DEFAULT_MODEL, model_path)
    raise StoreError(f"unknown embedder {backend!r} (choose fastembed or hash)", embedder=backend)
