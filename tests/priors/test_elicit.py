"""priors_for through the real openai client against a real loopback server: good answers, malformed
JSON, schema violations, refusals, timeouts, 429 + Retry-After, endpoints without structured outputs,
the cache, the record, and the sanity check against the offline knowledge base."""

from __future__ import annotations

import json
import logging
import time

import pytest

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.priors import LLMConfig, exchanges, offline_priors, priors_for
from infrarsi.testing.openai_server import OpenAIServer, Reply

WORKLOAD = dict(seq_length=4096, hidden_size=4096, num_layers=32, num_attention_heads=32, global_batch_size=64)
HARDWARE = dict(kind="H100-80GB", devices=8, memory_capacity_gib=80)

SPACE = KnobSpace([
    Knob(name="tensor_parallel", kind="int", domain=(1, 2, 4, 8), default=1),
    Knob(name="recompute_granularity", kind="categorical", domain=("none", "selective", "full")),
    Knob(name="attention_backend", kind="categorical", domain=("unfused", "flash")),
    Knob(name="distributed_optimizer", kind="bool"),
])


def item(knob, value, t=0.0, ts=0.1, m=0.0, ms=0.1, why="because"):
    return {"knob": knob, "value": value, "time_mean": t, "time_sd": ts, "mem_mean": m, "mem_sd": ms, "rationale": why}


GOOD = {"priors": [item("tensor_parallel", "2", 0.05, 0.1, -0.6, 0.1, "TP shards weights"),
                   item("recompute_granularity", "full", 0.3, 0.05, -0.5, 0.2, "recompute the forward")]}


def call(llm, tmp_path, **kw):
    return priors_for(SPACE, workload=WORKLOAD, hardware=HARDWARE, llm=llm, record_dir=tmp_path / "run", **kw)


def sources(priors):
    return {p.feature: p.source for p in priors}


def test_good_answer_is_used_and_the_rest_comes_from_the_knowledge_base(server, llm, tmp_path):
    server.script(Reply(json=GOOD, prompt_tokens=123, completion_tokens=45))
    priors = call(llm, tmp_path)
    assert [p.feature for p in priors] == SPACE.feature_names
    src = sources(priors)
    assert src["tensor_parallel=2"] == "llm" and src["recompute_granularity=full"] == "llm"
    assert src["tensor_parallel=4"] == "offline" and src["distributed_optimizer=True"] == "offline"
    tp2 = next(p for p in priors if p.feature == "tensor_parallel=2")
    assert (tp2.value, tp2.mem_mean, tp2.rationale) == (2, -0.6, "TP shards weights")  # "2" -> the domain's int 2
    # the request: strict JSON schema through chat.completions.parse, the knobs and values listed
    req = server.requests[0]
    assert req["response_format"]["type"] == "json_schema" and req["response_format"]["json_schema"]["strict"] is True
    assert "recompute_granularity" in req["messages"][-1]["content"] and req["model"] == "test-model"
    # the record: one exchange with prompt, response, tokens and latency
    (ex,) = exchanges(tmp_path / "run")
    assert (ex.stage, ex.mode, ex.ok, ex.prompt_tokens, ex.completion_tokens) == ("priors", "parse", True, 123, 45)
    assert json.loads(ex.response) == GOOD and ex.latency_s > 0 and ex.messages == req["messages"]
    assert (tmp_path / "run" / "llm" / "1.json").is_file()


def test_same_prompt_is_served_from_the_cache_and_still_recorded(server, llm, tmp_path):
    server.script(Reply(json=GOOD))
    first = call(llm, tmp_path)
    second = call(llm, tmp_path)
    assert len(server.requests) == 1 and first == second
    recs = exchanges(tmp_path / "run")
    assert [(e.mode, e.cached) for e in recs] == [("parse", False), ("cache", True)]


def test_malformed_json_is_retried_once_with_the_error(server, llm, tmp_path):
    server.script(Reply(content="Sure! Here are the priors: {tensor_parallel: faster"), Reply(json=GOOD))
    priors = call(llm, tmp_path)
    assert sources(priors)["tensor_parallel=2"] == "llm"
    assert len(server.requests) == 2
    feedback = server.requests[1]["messages"]
    assert feedback[-2]["role"] == "assistant" and "Here are the priors" in feedback[-2]["content"]
    assert "not valid JSON" in feedback[-1]["content"]
    assert [e.ok for e in exchanges(tmp_path / "run")] == [False, True]


def test_malformed_twice_falls_back_to_the_knowledge_base_with_a_warning(server, llm, tmp_path, caplog):
    server.script(Reply(content="not json"), Reply(content="```json\n{\"priors\": [}\n```"))
    with caplog.at_level(logging.WARNING, logger="infrarsi.priors"):
        priors = call(llm, tmp_path)
    assert set(sources(priors).values()) == {"offline"}
    assert priors == offline_priors(SPACE, workload=WORKLOAD, hardware=HARDWARE)
    assert any("LLM priors unusable" in r.message and "rejected twice" in r.message for r in caplog.records)
    assert len(server.requests) == 2  # exactly one retry


def test_value_outside_the_domain_never_gets_in(server, llm, tmp_path, caplog):
    bad = {"priors": [item("tensor_parallel", "3", -0.2), item("bogus_knob", "True")]}
    server.script(Reply(json=bad), Reply(json={"priors": [item("tensor_parallel", "1", 0.1)]}))
    with caplog.at_level(logging.WARNING):
        priors = call(llm, tmp_path)
    fed_back = server.requests[1]["messages"][-1]["content"]
    assert "tensor_parallel=3 is not in its domain" in fed_back and "'bogus_knob' is not in the space" in fed_back
    # the second answer names the default value: also rejected, so the stage falls back entirely
    assert all(p.source == "offline" for p in priors)
    assert all(p.value in SPACE[p.knob].domain and p.value != SPACE[p.knob].default for p in priors)
    assert "tensor_parallel=1 is the default" in exchanges(tmp_path / "run")[-1].error


def test_schema_violation_out_of_range_sd_is_retried(server, llm, tmp_path):
    server.script(Reply(json={"priors": [item("tensor_parallel", "2", ts=-1.0)]}), Reply(json=GOOD))
    priors = call(llm, tmp_path)
    assert "priors.0.time_sd" in server.requests[1]["messages"][-1]["content"]
    assert sources(priors)["tensor_parallel=2"] == "llm"


def test_refusal_is_retried_then_falls_back(server, llm, tmp_path, caplog):
    server.script(Reply(refusal="I can't help with that."), Reply(refusal="I can't help with that."))
    with caplog.at_level(logging.WARNING):
        priors = call(llm, tmp_path)
    assert "refused" in server.requests[1]["messages"][-1]["content"]
    assert all(p.source == "offline" for p in priors)
    assert exchanges(tmp_path / "run")[0].refusal == "I can't help with that."


def test_timeout_falls_back_fast(server, tmp_path, caplog):
    server.script(Reply(json=GOOD, delay_s=3.0))
    llm = LLMConfig(base_url=server.base_url, model="test-model", timeout_s=0.3, max_retries=0)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING):
        priors = call(llm, tmp_path)
    assert time.monotonic() - t0 < 2.0
    assert all(p.source == "offline" for p in priors)
    assert any("APITimeoutError" in r.message for r in caplog.records)
    assert "timed out" in exchanges(tmp_path / "run")[0].error.lower()


def test_429_with_retry_after_is_honoured_by_the_client(server, llm, tmp_path):
    server.script(Reply(status=429, headers={"Retry-After": "1"}, error="rate limited"), Reply(json=GOOD))
    t0 = time.monotonic()
    priors = call(llm, tmp_path)
    assert time.monotonic() - t0 >= 0.9  # waited the server's Retry-After, not the client's short backoff
    assert sources(priors)["tensor_parallel=2"] == "llm" and len(server.requests) == 2


def test_429_past_the_retries_falls_back_with_the_fix(server, tmp_path, caplog):
    server.script(*[Reply(status=429, headers={"Retry-After": "0"}) for _ in range(2)])
    llm = LLMConfig(base_url=server.base_url, model="test-model", max_retries=1)
    with caplog.at_level(logging.WARNING):
        priors = call(llm, tmp_path)
    assert all(p.source == "offline" for p in priors)
    assert any("HTTP 429" in r.message and "max_retries" in r.message for r in caplog.records)


def test_a_reply_that_is_not_a_chat_completion_falls_back(server, llm, tmp_path, caplog):
    server.script(Reply(raw="<html><body>502 Bad Gateway</body></html>"))
    with caplog.at_level(logging.WARNING):
        priors = call(llm, tmp_path)
    assert all(p.source == "offline" for p in priors)
    assert "not a chat completion" in exchanges(tmp_path / "run")[0].error


def test_401_says_to_check_the_key(server, llm, tmp_path, caplog):
    server.script(Reply(status=401, error="invalid api key"))
    with caplog.at_level(logging.WARNING):
        call(llm, tmp_path)
    assert any("OPENAI_API_KEY" in r.message for r in caplog.records)


def test_endpoint_without_structured_outputs_gets_json_mode(tmp_path):
    with OpenAIServer(reject_json_schema=True) as srv:
        srv.script(Reply(json=GOOD), Reply(json=GOOD))
        llm = LLMConfig(base_url=srv.base_url, model="m", cache=False)
        priors = call(llm, tmp_path)
        assert sources(priors)["tensor_parallel=2"] == "llm"
        assert [(r.get("response_format") or {}).get("type") for r in srv.requests] == ["json_schema", "json_object"]
        assert "JSON schema" in srv.requests[1]["messages"][0]["content"]  # the schema travels in the prompt
        call(llm, tmp_path)  # remembered: json_schema is not tried again
        assert [(r.get("response_format") or {}).get("type") for r in srv.requests][2:] == ["json_object"]


def test_plain_content_endpoint(tmp_path):
    with OpenAIServer(reject_json_schema=True, reject_json_object=True) as srv:
        srv.script(Reply(content="```json\n" + json.dumps(GOOD) + "\n```"))
        priors = call(LLMConfig(base_url=srv.base_url, model="m"), tmp_path)
        assert sources(priors)["recompute_granularity=full"] == "llm"
        assert "response_format" not in srv.requests[-1]


def test_nothing_configured_is_offline_and_says_so_once(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="infrarsi.llm"):
        a = priors_for(SPACE, workload=WORKLOAD, hardware=HARDWARE)
        b = priors_for(SPACE, workload=WORKLOAD, hardware=HARDWARE)
    assert a == b == offline_priors(SPACE, workload=WORKLOAD, hardware=HARDWARE)
    said = [r.message for r in caplog.records if "not configured" in r.message]
    assert len(said) == 1 and "OPENAI_API_KEY" in said[0]


def test_config_from_environment(monkeypatch, caplog):
    assert LLMConfig.from_env() is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    with caplog.at_level(logging.WARNING):
        assert LLMConfig.from_env() is None  # a base URL without a model: told to set INFRARSI_LLM_MODEL
    assert any("INFRARSI_LLM_MODEL" in r.message for r in caplog.records)
    monkeypatch.setenv("INFRARSI_LLM_MODEL", "llama3.1:8b")
    cfg = LLMConfig.from_env(timeout_s=5)
    assert (cfg.base_url, cfg.model, cfg.timeout_s) == ("http://127.0.0.1:8000/v1", "llama3.1:8b", 5)
    monkeypatch.setenv("INFRARSI_LLM", "off")
    assert LLMConfig.from_env() is None
    monkeypatch.delenv("INFRARSI_LLM")
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert LLMConfig.from_env().base_url is None and "sk-test" not in repr(LLMConfig.from_env())
    with pytest.raises(ValueError):
        LLMConfig(model="m", timeout_s=0)


def test_confident_contradiction_of_the_knowledge_base_is_widened(server, llm, tmp_path, caplog):
    # attention is unfused by default here, so selective recompute drops the 5as/h term: memory falls a lot
    wrong = {"priors": [item("recompute_granularity", "selective", 0.03, 0.02, +0.405, 0.05,
                             "selective recompute increases memory by 50%")]}
    server.script(Reply(json=wrong))
    with caplog.at_level(logging.WARNING):
        priors = call(llm, tmp_path)
    sel = next(p for p in priors if p.feature == "recompute_granularity=selective")
    kb = next(p for p in offline_priors(SPACE, workload=WORKLOAD, hardware=HARDWARE) if p.feature == sel.feature)
    assert kb.mem_mean < -0.3  # the knowledge base: Korthikanti's attention term removed
    assert sel.source == "llm" and sel.mem_mean == pytest.approx(0.405)
    assert sel.mem_sd >= abs(0.405 - kb.mem_mean) - 1e-9  # widened so the KB value is within one sd
    assert sel.time_sd == 0.02  # the time belief agrees with the KB: untouched
    assert sel.rationale.startswith("[widened")
    assert any("conflicts with the offline KB" in r.message for r in caplog.records)
    raw = call(llm, tmp_path, check_against_offline=False)  # cached answer, unchecked
    assert next(p for p in raw if p.feature == sel.feature).mem_sd == 0.05


def test_the_system_message_names_the_framework_the_caller_reads_from_the_workload(server, llm, tmp_path):
    """The LLM is told the workload's framework as its spec titles it (the run stage passes it); no framework named
    in the priors' own code. Without one it says PyTorch alone."""
    from infrarsi.adapters.registry import spec

    server.script(Reply(json=GOOD), Reply(json=GOOD))
    call(llm, tmp_path, framework=spec("megatron").title)
    call(llm, tmp_path)  # another system message: another prompt hash, asked again
    first, second = (r["messages"][0]["content"] for r in server.requests)
    assert first.startswith("You are a performance engineer for distributed LLM training (Megatron, PyTorch). ")
    assert second.startswith("You are a performance engineer for distributed LLM training (PyTorch). ")
    assert first.split(". ", 1)[1] == second.split(". ", 1)[1]


def test_the_run_stage_tells_the_llm_the_framework_of_its_workload(server, tmp_path, monkeypatch):
    """stages/run.load_priors reads the framework's title from the contract's spec (a simulated cluster here)."""
    import io
    from pathlib import Path

    from rich.console import Console

    from infrarsi.adapters import get_adapter
    from infrarsi.contract import load_contract
    from infrarsi.stages.run import load_priors

    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("INFRARSI_LLM_MODEL", "test-model")
    server.script(Reply(json={"priors": []}))
    c = load_contract(Path(__file__).resolve().parents[2] / "contracts" / "sim-dense8b-h100x8.toml")
    priors = load_priors(get_adapter("simulated").knob_space(c), c, tmp_path / "run", Console(file=io.StringIO()))
    assert priors and "llm" not in {p.source for p in priors}  # the answer named none: the knowledge base's
    (req,) = server.requests
    assert req["messages"][0]["content"].startswith(
        "You are a performance engineer for distributed LLM training (simulated Megatron-LM, PyTorch). ")
