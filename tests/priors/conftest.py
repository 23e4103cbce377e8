"""Fixtures for the LLM layer: a real OpenAI-compatible server on 127.0.0.1 and a clean environment."""

from __future__ import annotations

import pytest

from infrarsi.priors import llm as llm_mod
from infrarsi.testing.openai_server import OpenAIServer


@pytest.fixture(autouse=True)
def clean_llm_env(monkeypatch, tmp_path):
    """No endpoint from the developer's shell leaks in; the cache lives in the test's tmp dir;
    "said once" messages and the structured-mode memo start fresh."""
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "INFRARSI_LLM_MODEL", "INFRARSI_LLM"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("INFRARSI_CACHE", str(tmp_path / "cache"))
    llm_mod._said.clear()
    llm_mod._mode_memo.clear()
    yield


@pytest.fixture
def server():
    with OpenAIServer() as srv:
        yield srv


@pytest.fixture
def llm(server):
    return llm_mod.LLMConfig(base_url=server.base_url, model="test-model", timeout_s=5, max_retries=2)
