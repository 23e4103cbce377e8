"""The LLM layer: configuration, structured answers, the record of every exchange, the prompt cache.

Works with any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, SGLang) through the ``openai``
client, and fully offline: with nothing configured every caller falls back to its offline source,
and says so once.

Configuration, highest precedence first: an explicit :class:`LLMConfig`; the environment
(``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``INFRARSI_LLM_MODEL``); nothing = offline.
``INFRARSI_LLM=off`` forces offline even when a key is set (CI, air-gapped clusters).

One call to :func:`ask` is one *stage* (priors, a kernel, a contract draft):

1. the prompt's hash (model, endpoint, messages, schema) is looked up in the cache
   (``$INFRARSI_CACHE`` or ``~/.cache/infrarsi/llm``); only answers that passed validation are cached;
2. the endpoint is asked for JSON matching a pydantic schema: ``chat.completions.parse`` (strict JSON
   schema) where the endpoint takes it, else ``response_format={"type": "json_object"}``, else the
   schema in the prompt and JSON in the content -- an endpoint that answers 400 to one mode is
   remembered and asked in the next;
3. the answer is validated (schema, then the caller's ``check``, e.g. "value outside the knob's
   domain"); a malformed, refused or invalid answer is asked again ONCE with the errors fed back;
4. a second failure, or a transport failure after the client's own retries (timeouts, 429s with
   ``Retry-After``, 5xx), returns ``Answer(ok=False)``; the caller warns and uses its offline source.

Every exchange -- prompt, raw response, tokens, latency, verdict -- is written, numbered, to the run
directory's LLM folder (``RunDir(record_dir).llm_dir``); :func:`exchanges` lists them for the experience bank.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..io import atomic_write

log = logging.getLogger("infrarsi.llm")

StructuredMode = Literal["auto", "parse", "json_object", "content"]
_MODES: tuple[str, ...] = ("parse", "json_object", "content")


class LLMConfig(BaseModel):
    """How to reach an OpenAI-compatible endpoint.

    Usage::

        llm = LLMConfig(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-7B-Instruct")
        llm = LLMConfig.from_env()          # None when nothing is configured (= offline)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    """Model name as the endpoint spells it ("gpt-4o-mini", "llama3.1:8b" for Ollama, the HF id for vLLM)."""
    base_url: str | None = None
    """Endpoint root ending in /v1; None = api.openai.com."""
    api_key: str = Field("not-needed", repr=False)
    """Local endpoints (vLLM, Ollama, SGLang) accept any key."""
    timeout_s: float = Field(60.0, gt=0)
    """Per-request timeout; a request that runs past it is retried by the client, then given up."""
    max_retries: int = Field(2, ge=0)
    """Transport retries inside the openai client (timeouts, 429 honouring Retry-After, 5xx)."""
    temperature: float | None = Field(0.0, ge=0)
    """None leaves it to the endpoint (OpenAI's reasoning models accept only their default)."""
    max_tokens: int = Field(4096, ge=1)
    """Sent as max_completion_tokens to api.openai.com, as max_tokens elsewhere (vLLM, Ollama, SGLang)."""
    structured: StructuredMode = "auto"
    """"auto" tries parse -> json_object -> content; the others pin one mode."""
    cache: bool = True
    cache_dir: Path | None = None
    """Default: $INFRARSI_CACHE, else ~/.cache/infrarsi/llm."""

    @classmethod
    def from_env(cls, **overrides: Any) -> "LLMConfig | None":
        """The endpoint the environment names, or None (offline). ``overrides`` set other fields."""
        if os.environ.get("INFRARSI_LLM", "").strip().lower() in ("off", "0", "false", "offline"):
            return None
        key = os.environ.get("OPENAI_API_KEY", "").strip()
        base = os.environ.get("OPENAI_BASE_URL", "").strip() or None
        model = os.environ.get("INFRARSI_LLM_MODEL", "").strip()
        if not key and not base:
            return None
        if not model:
            if base is not None:
                _say_once(
                    "no-model",
                    f"LLM: OPENAI_BASE_URL={base} is set but INFRARSI_LLM_MODEL is not; set it to the model the "
                    f"endpoint serves (e.g. INFRARSI_LLM_MODEL=llama3.1:8b). Using the offline knowledge base.",
                )
                return None
            model = "gpt-4o-mini"
        return cls(model=model, base_url=base, api_key=key or "not-needed", **overrides)

    def resolved_cache_dir(self) -> Path:
        if self.cache_dir is not None:
            return Path(self.cache_dir)
        env = os.environ.get("INFRARSI_CACHE", "").strip()
        return Path(env) if env else Path.home() / ".cache" / "infrarsi" / "llm"


_said: set[str] = set()


def _say_once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        log.warning(message)


def resolve(llm: LLMConfig | None) -> LLMConfig | None:
    """The explicit config, else the environment's, else None -- and "offline" said once per process."""
    cfg = llm if llm is not None else LLMConfig.from_env()
    if cfg is None:
        _say_once(
            "offline",
            "LLM: not configured (set OPENAI_API_KEY, or OPENAI_BASE_URL + INFRARSI_LLM_MODEL for vLLM/Ollama/"
            "SGLang); using offline sources (knowledge-base priors, deterministic contract drafts).",
        )
    return cfg


class Answer(BaseModel):
    """The outcome of one stage: the validated value, or why there is none."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    ok: bool
    value: Any = None  # an instance of the stage's schema when ok
    error: str = ""  # one line: the last failure (transport, refusal, validation)
    records: list[Path] = []  # the exchange files this stage wrote
    cached: bool = False


# ------------------------------------------------------------------------------------------ record
class Exchange(BaseModel):
    """One request/response pair as stored in ``<run>/llm/<n>.json``."""

    model_config = ConfigDict(extra="ignore")

    n: int
    stage: str
    model: str
    base_url: str | None
    mode: str  # parse | json_object | content | cache
    attempt: int  # 1, or 2 when the errors of attempt 1 were fed back
    messages: list[dict[str, Any]]
    response: str | None  # the raw assistant content (None on transport failure)
    refusal: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float
    cached: bool = False
    ok: bool
    error: str = ""
    prompt_hash: str
    time: float


def exchanges(run_dir: str | Path) -> list[Exchange]:
    """Every LLM exchange recorded in a run directory, in order (for the experience bank)."""
    from ..rundir import RunDir

    d = RunDir(run_dir).llm_dir
    if not d.is_dir():
        return []
    out = []
    for p in d.glob("*.json"):
        if p.stem.isdigit():
            out.append(Exchange.model_validate_json(p.read_text()))
    return sorted(out, key=lambda e: e.n)


def _record(record_dir: Path | None, body: dict[str, Any]) -> Path | None:
    if record_dir is None:
        return None
    from ..rundir import RunDir

    d = RunDir(record_dir).llm_dir
    d.mkdir(parents=True, exist_ok=True)
    n = 1 + max((int(p.stem) for p in d.glob("*.json") if p.stem.isdigit()), default=0)
    while True:  # O_EXCL claims the number even when two stages record at once
        path = d / f"{n}.json"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            n += 1
            continue
        with os.fdopen(fd, "w") as f:
            f.write(Exchange.model_validate({**body, "n": n}).model_dump_json(indent=2))
        return path


# ------------------------------------------------------------------------------------------- cache
def prompt_hash(llm: LLMConfig, messages: list[dict[str, Any]], schema: type[BaseModel]) -> str:
    key = json.dumps(
        {"model": llm.model, "base_url": llm.base_url, "messages": messages, "schema": schema.model_json_schema()},
        sort_keys=True,
    )
    return hashlib.sha256(key.encode()).hexdigest()


def _cache_get(llm: LLMConfig, h: str) -> str | None:
    if not llm.cache:
        return None
    p = llm.resolved_cache_dir() / f"{h}.json"
    try:
        return json.loads(p.read_text())["response"]
    except (OSError, ValueError, KeyError):
        return None


def _cache_put(llm: LLMConfig, h: str, response: str) -> None:
    if not llm.cache:
        return
    d = llm.resolved_cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        atomic_write(d / f"{h}.json", json.dumps({"model": llm.model, "response": response}))
    except OSError as e:  # a read-only home must not stop a run
        _say_once("cache", f"LLM: cannot write the response cache in {d} ({e}); set INFRARSI_CACHE to a writable dir")


# ------------------------------------------------------------------------------------------ asking
def _client(llm: LLMConfig) -> Any:
    from openai import OpenAI

    return OpenAI(api_key=llm.api_key, base_url=llm.base_url, timeout=llm.timeout_s, max_retries=llm.max_retries)


# endpoint+model -> the first structured mode it accepted (an endpoint that 400s json_schema is not asked again)
_mode_memo: dict[tuple[str | None, str], str] = {}


class _Reply(BaseModel):
    content: str | None
    refusal: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def _schema_instructions(schema: type[BaseModel]) -> str:
    return (
        "Answer with one JSON object only (no prose, no code fences) that matches this JSON schema:\n"
        + json.dumps(schema.model_json_schema(), indent=1)
    )


def _call(client: Any, llm: LLMConfig, mode: str, messages: list[dict[str, Any]], schema: type[BaseModel]) -> _Reply:
    """One request in one structured mode. Raises openai errors (transport, HTTP status)."""
    common: dict[str, Any] = dict(model=llm.model, messages=messages)
    if llm.temperature is not None:
        common["temperature"] = llm.temperature
    openai_proper = llm.base_url is None or "api.openai.com" in llm.base_url
    common["max_completion_tokens" if openai_proper else "max_tokens"] = llm.max_tokens
    if mode == "parse":
        raw = client.chat.completions.with_raw_response.parse(response_format=schema, **common)
        body = json.loads(raw.http_response.text)
        try:
            raw.parse()  # the client's own strict parse; we re-validate below either way
        except Exception:
            pass  # a schema-violating answer: kept as raw content and judged by _judge
    else:
        msgs = [{"role": "system", "content": _schema_instructions(schema)}, *messages]
        kw: dict[str, Any] = {"response_format": {"type": "json_object"}} if mode == "json_object" else {}
        raw = client.chat.completions.with_raw_response.create(**{**common, "messages": msgs}, **kw)
        body = json.loads(raw.http_response.text)
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object, got {type(body).__name__}")
    choice = (body.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    usage = body.get("usage") or {}
    return _Reply(
        content=msg.get("content"),
        refusal=msg.get("refusal"),
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
    )


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def _judge(content: str | None, refusal: str | None, finish: str | None, schema: type[BaseModel],
           check: Callable[[Any], list[str]] | None) -> tuple[Any, list[str]]:
    """(value, []) for a valid answer, else (None, one line per problem)."""
    if refusal:
        return None, [f"the model refused: {refusal.strip()[:300]}"]
    if finish == "length":
        return None, ["the answer was cut off (finish_reason=length); answer more briefly"]
    if not content or not content.strip():
        return None, ["the answer was empty; answer with one JSON object"]
    text = content.strip()
    m = _FENCE.match(text)
    if m:
        text = m.group(1)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return None, [f"the answer is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"]
    try:
        value = schema.model_validate(data)
    except ValidationError as e:
        return None, [
            f"{'.'.join(str(x) for x in err['loc']) or '(top level)'}: {err['msg']}" for err in e.errors()[:20]
        ]
    problems = check(value) if check is not None else []
    return (None, problems) if problems else (value, [])


def ask(
    llm: LLMConfig,
    *,
    stage: str,
    messages: list[dict[str, Any]],
    schema: type[BaseModel],
    check: Callable[[Any], list[str]] | None = None,
    record_dir: Path | None = None,
) -> Answer:
    """Ask one structured question; validate; retry once with the errors; never raise for endpoint trouble.

    ``check(value) -> list[str]`` adds the caller's rules (knob domains, signatures); each string is
    one problem, fed back to the model verbatim on the retry.
    """
    from openai import APIError, APIStatusError

    h = prompt_hash(llm, messages, schema)
    base = dict(stage=stage, model=llm.model, base_url=llm.base_url, prompt_hash=h)
    records: list[Path] = []

    def rec(**kw: Any) -> None:
        p = _record(record_dir, {**base, "time": time.time(), **kw})
        if p is not None:
            records.append(p)

    hit = _cache_get(llm, h)
    if hit is not None:
        value, problems = _judge(hit, None, None, schema, check)
        if not problems:  # a cached answer is re-checked: the domain may have changed since
            rec(mode="cache", attempt=1, messages=messages, response=hit, latency_s=0.0, cached=True, ok=True)
            return Answer(ok=True, value=value, records=records, cached=True)

    client = _client(llm)
    memo_key = (llm.base_url, llm.model)
    modes = [llm.structured] if llm.structured != "auto" else list(_MODES[_MODES.index(_mode_memo.get(memo_key, "parse")):])
    convo = list(messages)
    error = ""
    for attempt in (1, 2):
        reply: _Reply | None = None
        while reply is None:
            mode = modes[0]
            t0 = time.monotonic()
            try:
                reply = _call(client, llm, mode, convo, schema)
            except APIStatusError as e:
                dt = time.monotonic() - t0
                unsupported = e.status_code in (400, 422) and len(modes) > 1
                error = f"{mode}: HTTP {e.status_code}: {_one_line(e)}"
                rec(mode=mode, attempt=attempt, messages=convo, response=None, latency_s=dt, ok=False, error=error)
                if unsupported:  # e.g. "response_format json_schema is not supported": try the next mode
                    modes.pop(0)
                    continue
                return Answer(ok=False, error=_status_hint(e, llm), records=records)
            except APIError as e:  # timeouts and connection errors, after the client's own retries
                dt = time.monotonic() - t0
                error = f"{type(e).__name__}: {_one_line(e)} (after {llm.max_retries} retries, timeout {llm.timeout_s:g} s)"
                rec(mode=mode, attempt=attempt, messages=convo, response=None, latency_s=dt, ok=False, error=error)
                return Answer(ok=False, error=error, records=records)
            except (ValueError, TypeError, AttributeError) as e:  # a 200 whose body is not a chat completion
                dt = time.monotonic() - t0
                error = f"{mode}: the endpoint's reply is not a chat completion ({type(e).__name__}: {_one_line(e)})"
                rec(mode=mode, attempt=attempt, messages=convo, response=None, latency_s=dt, ok=False, error=error)
                return Answer(ok=False, error=error, records=records)
            dt = time.monotonic() - t0
        if llm.structured == "auto":
            _mode_memo[memo_key] = mode
        value, problems = _judge(reply.content, reply.refusal, reply.finish_reason, schema, check)
        error = "; ".join(problems)
        rec(mode=mode, attempt=attempt, messages=convo, response=reply.content, refusal=reply.refusal,
            prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens, latency_s=dt,
            ok=not problems, error=error)
        if not problems:
            if reply.content is not None:
                _cache_put(llm, h, reply.content)
            return Answer(ok=True, value=value, records=records)
        convo = [
            *convo,
            {"role": "assistant", "content": reply.content or reply.refusal or ""},
            {"role": "user", "content": "Your answer was rejected:\n- " + "\n- ".join(problems)
             + "\nAnswer again: one JSON object that fixes every problem above."},
        ]
    return Answer(ok=False, error=f"rejected twice: {error}", records=records)


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:300]


def _status_hint(e: Any, llm: LLMConfig) -> str:
    code = e.status_code
    where = llm.base_url or "api.openai.com"
    if code == 401:
        return f"HTTP 401 from {where}: the key was refused; check OPENAI_API_KEY"
    if code == 404:
        return f"HTTP 404 from {where}: model {llm.model!r} or the /chat/completions route is unknown; check INFRARSI_LLM_MODEL and OPENAI_BASE_URL (it ends in /v1)"
    if code == 429:
        return f"HTTP 429 from {where}: rate limited after {llm.max_retries} retries; raise LLMConfig.max_retries or wait"
    return f"HTTP {code} from {where}: {_one_line(e)}"
