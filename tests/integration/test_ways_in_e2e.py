"""Every way in ends as rows in the store, through one running worker: the
OpenAI SDK wrapper calling an ASGI gateway (PhasemeterMiddleware, real
Starlette app served by uvicorn) in front of a local OpenAI-compatible
engine, a LiteLLM call with the callback, and `phasemeter emit` of an NDJSON
file. (The OTLP receiver and the Collector topic: test_worker_otlp_topic.py.)
Each path labels its events with its own gateway, so each is counted apart."""

from __future__ import annotations

import json
import time

import clickhouse_connect
import httpx
import openai
import pytest
from llm_server import LLMServer, Script
from test_asgi_uvicorn import serve
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse
from starlette.routing import Route

from phasemeter.cli.main import main
from phasemeter.integrations.asgi import PhasemeterMiddleware
from phasemeter.integrations.openai import instrument
from phasemeter.producers import Meter

pytestmark = pytest.mark.integration


def gateway_app(engine_url: str):
    """A minimal streaming proxy, as a gateway in front of vLLM would be."""
    async def proxy(request):
        client = httpx.AsyncClient(base_url=engine_url, timeout=None)
        upstream = await client.send(client.build_request("POST", request.url.path, json=await request.json()),
                                     stream=True)

        async def close():
            await upstream.aclose()
            await client.aclose()
        return StreamingResponse(upstream.aiter_raw(), status_code=upstream.status_code,
                                 media_type=upstream.headers.get("content-type"), background=BackgroundTask(close))
    return Starlette(routes=[Route("/v1/chat/completions", proxy, methods=["POST"])])


def test_sdk_gateway_litellm_and_ndjson_all_reach_the_store(worker, pm_env, tmp_path, monkeypatch):
    import litellm

    from phasemeter.integrations.litellm import PhasemeterLogger

    worker.start()
    bootstrap, topic = pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"]
    meters = {g: Meter(bootstrap, topic=topic, gateway=g, flush_timeout_s=10) for g in ("sdk", "asgi", "litellm")}
    msgs = [{"role": "user", "content": "hi"}]
    with LLMServer() as engine:
        engine.push(*[Script(ttft_s=0.03, gap_s=0.005, chunks=6, model="served-a", prompt_tokens=700)] * 3,
                    Script(ttft_s=0.03, chunks=2, model="served-a", prompt_tokens=300),
                    Script(ttft_s=0.03, gap_s=0.005, chunks=4, model="served-b", prompt_tokens=90),
                    Script(ttft_s=0.03, chunks=2, model="served-b", prompt_tokens=90))
        gateway = PhasemeterMiddleware(gateway_app(engine.base_url), meters["asgi"])
        with serve(gateway) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
            inst = instrument(client, meters["sdk"])
            for _ in range(3):  # SDK -> gateway -> engine: both measure each call
                text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                    model="a", messages=msgs, stream=True))
                assert text == "t0 t1 t2 t3 t4 t5 "
            # not streamed: a whole JSON answer through the gateway; both record it streamed: false
            assert client.chat.completions.create(model="a", messages=msgs).usage.prompt_tokens == 300
        litellm.callbacks = [PhasemeterLogger(meters["litellm"])]
        try:
            list(litellm.completion(model="openai/b", api_base=engine.base_url, api_key="k", messages=msgs,
                                    stream=True, stream_options={"include_usage": True}))
            litellm.completion(model="openai/b", api_base=engine.base_url, api_key="k", messages=msgs)
            deadline = time.monotonic() + 20  # LiteLLM logs from its own threads
            while meters["litellm"].stats().enqueued < 2:
                assert time.monotonic() < deadline, meters["litellm"].stats()
                time.sleep(0.05)
        finally:
            litellm.callbacks = []
    assert set(meters) == {"sdk", "asgi", "litellm"}
    for m in meters.values():
        assert m.flush(15)
        m.close()
    assert inst.stats["recorded"] == 4 and gateway.stats()["recorded"] == 4

    t0 = time.time() - 120
    lines = [json.dumps({"schema_version": 1, "kind": "generation", "request_id": f"nd-{i}", "model": "from-go", "gateway": "ndjson",
                         "t0": t0 + i, "ttft_s": 0.2, "e2e_s": 1.2, "input_tokens": 3000 + i,
                         "output_tokens": 51, "status": "ok"}) for i in range(4)]
    path = tmp_path / "events.ndjson"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", bootstrap)
    monkeypatch.setenv("PHASEMETER_TOPIC", topic)
    assert main(["emit", str(path), "--no-progress"]) == 0

    health = worker.wait_processed(14, timeout_s=90)
    assert (health["accepted"], health["rejected"]) == (14, 0), worker.diagnose()
    worker.stop()
    client = clickhouse_connect.get_client(dsn=f"chdb://{pm_env['PHASEMETER_DATA_DIR']}/store")
    try:
        client.database = pm_env["PHASEMETER_DATABASE"]
        rows = client.query("SELECT gateway, model, input_tokens, output_tokens, ttft_s, e2e_s, decode_tps "
                            "FROM generations ORDER BY gateway, model").result_rows
        whole = client.query("SELECT gateway, streamed, ttft_s, prefill_tps, decode_tps, e2e_s > 0 "
                             "FROM generations WHERE input_tokens = 300 ORDER BY gateway").result_rows
    finally:
        client.close()
    by = {}
    for g, *rest in rows:
        by.setdefault(g, []).append(rest)
    assert sorted(by) == ["asgi", "litellm", "ndjson", "sdk"]
    # The SDK wrapper labels the model the response names; the gateway, the
    # model the request asked for (docs/ingest/asgi.md: a hook can map it).
    for g, model in (("sdk", "served-a"), ("asgi", "a")):
        streams = [r for r in by[g] if r[1] == 700]
        assert [(m, i, o) for m, i, o, *_ in streams] == [(model, 700, 6)] * 3, (g, by[g])
        # the engine's scripted first token (30 ms) is a floor; both ends see it
        assert all(0.03 <= ttft < e2e for *_, ttft, e2e, _ in streams), by[g]
        assert len(by[g]) == 4 and [(m, o) for m, i, o, *_ in by[g] if i == 300] == [(model, 2)], by[g]
    # the whole answer, seen by the SDK and by the gateway: stored not streamed, its
    # end kept, no first token and no phases (docs/ingest/asgi.md, openai.md)
    assert whole == [("asgi", 0, None, None, None, 1), ("sdk", 0, None, None, None, 1)], whole
    # LiteLLM's label is the deployment it called (docs/ingest/litellm.md)
    assert sorted((m, i, o) for m, i, o, *_ in by["litellm"]) == [("b", 90, 2), ("b", 90, 4)]
    # its whole (non-streaming) response is stored not streamed: no first token, no phases
    lite = {o: (ttft, decode_tps) for _, _, o, ttft, _, decode_tps in by["litellm"]}
    assert lite[2] == (None, None) and lite[4][0] is not None and lite[4][1] is not None
    assert [(m, i) for m, i, *_ in by["ndjson"]] == [("from-go", 3000 + i) for i in range(4)]
