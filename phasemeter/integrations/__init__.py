"""Ways in without writing an emitter: OTLP spans, the OpenAI SDK, LiteLLM,
ASGI gateways and NDJSON files, each ending in the same event contract."""
