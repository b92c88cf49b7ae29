"""OTLP/gRPC trace receiver: TraceService/Export -> otlp_map -> the Receiver's Meter.

The gRPC twin of otlp_receiver's POST /v1/traces, for exporters that speak
gRPC by default (vLLM's --otlp-traces-endpoint, port 4317). It shares the
HTTP Receiver's Meter, counts and shutdown, so both answer alike:

  * mapped: ExportTraceServiceResponse, with partial_success (rejected_spans
    and a message) for the spans that cannot be mapped;
  * not an ExportTraceServiceRequest: INVALID_ARGUMENT;
  * larger than the body limit, also once inflated: RESOURCE_EXHAUSTED
    (refused by gRPC itself, before any of this code runs, so it is not in
    the receiver's refused count);
  * more spans than the receiver's max_spans: RESOURCE_EXHAUSTED without a
    RetryInfo, which the OTLP spec makes not retryable (a smaller batch is
    the cure, not a retry);
  * the emitter's queue cannot take all the events (none is queued), or the
    receiver is stopping: UNAVAILABLE with a RetryInfo of 1 s, which is how
    the OTLP spec says to signal backpressure ("the server MUST return an
    error with code Unavailable"), and exporters retry it.

Bounded: `max_workers` threads serve calls, at most `max_concurrent_rpcs`
are taken at once (gRPC answers RESOURCE_EXHAUSTED beyond, before this code
runs), each HTTP/2 connection carries at most that many streams, a
connection idle for `idle_s` is closed, and so is one that has not begun
HTTP/2 within the receiver's read timeout; every connection is asked to go
away after `max_age_s` and closed the read timeout later, which frees the
threads of calls whose message never arrived whole.

The request is handed over as bytes, not parsed by gRPC: the mapping decodes
it as it does an HTTP body (otlp_decode.proto_spans), and a body that does
not parse is INVALID_ARGUMENT instead of the INTERNAL that a failing
deserializer gives. gzip and deflate request compression are gRPC's own.
grpcio is imported when a server is built, never by `phasemeter --help`.
"""

from __future__ import annotations

from concurrent import futures

from .otlp_wire import status_protobuf
from .otlp_map import PROTOBUF, BadRequest, TooManySpans
from .otlp_receiver import Receiver, export_response

DEFAULT_PORT = 4317
# google.rpc.RetryInfo{retry_delay: Duration{seconds: 1}}, encoded by hand: the
# OTLP package does not ship it. The exporters read it to time their retry.
RETRY_INFO_1S = b"\x0a\x02\x08\x01"
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"  # where the OpenTelemetry Python exporter reads it
# The spec's place for it: a google.rpc.Status detail, an Any of RetryInfo, in
# grpc-status-details-bin (where Go's and Java's exporters read it).
_RETRY_INFO_ANY = b"\x0a" + bytes([len(b"type.googleapis.com/google.rpc.RetryInfo")]) + \
    b"type.googleapis.com/google.rpc.RetryInfo" + b"\x12" + bytes([len(RETRY_INFO_1S)]) + RETRY_INFO_1S
DETAILS_KEY = "grpc-status-details-bin"


def service_name() -> str:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    return trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name


class GrpcReceiver:
    """A gRPC server in front of `rx`'s Meter. Binds when built (OSError when
    the port is taken), serves from start(), and stops when rx.stop() does."""

    def __init__(self, rx: Receiver, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 max_workers: int = 8, max_concurrent_rpcs: int = 16, idle_s: float = 60.0,
                 max_age_s: float = 60.0) -> None:
        import grpc

        self.rx = rx
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="phasemeter-otlp-grpc"),
            maximum_concurrent_rpcs=max_concurrent_rpcs,
            options=[("grpc.max_receive_message_length", rx.max_body_bytes),
                     ("grpc.max_concurrent_streams", max_concurrent_rpcs),
                     ("grpc.max_connection_idle_ms", int(idle_s * 1000)),
                     # a connection that never completes HTTP/2's preface is closed after the read timeout
                     ("grpc.server_handshake_timeout_ms", int(rx.read_timeout_s * 1000)),
                     # A call whose message never arrives whole holds a thread (gRPC waits for it
                     # before calling us): a connection is told to go away after max_age_s, and
                     # closed, cancelling such calls, the read timeout after. Exporters reconnect.
                     ("grpc.max_connection_age_ms", int(max_age_s * 1000)),
                     ("grpc.max_connection_age_grace_ms", int(rx.read_timeout_s * 1000)),
                     ("grpc.so_reuseport", 0)])  # a port already taken fails here, as it does for HTTP
        handler = grpc.unary_unary_rpc_method_handler(self._export)  # no (de)serializers: bytes in and out
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service_name(), {"Export": handler}),))
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:  # recent grpcio raises; older ones returned 0
            self.port = self.server.add_insecure_port(address)
        except RuntimeError:
            self.port = 0
        if not self.port:
            raise OSError(f"cannot bind {address} (in use, or not an address of this host)")
        self.host = host
        self._started = False
        rx.on_stop(self.stop)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def start(self) -> GrpcReceiver:
        self.server.start()
        self._started = True
        return self

    def stop(self, grace_s: float = 10.0) -> None:
        """Refuse new calls, give those in hand `grace_s` to finish. Called by
        Receiver.stop() once it refuses new requests, before it flushes."""
        self.server.stop(grace_s if self._started else None).wait(grace_s + 1)

    def _export(self, body: bytes, context) -> bytes:
        import grpc

        rx = self.rx
        if not rx.enter():
            return self._refuse(context, grpc.StatusCode.UNAVAILABLE, "shutting down; retry later", retry=True)
        try:
            try:
                mapped = rx.decode(body, PROTOBUF)
            except rx.Busy:
                refusal = (grpc.StatusCode.UNAVAILABLE, "every decoder is busy; retry later", True)
            except TooManySpans as exc:
                refusal = (grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), False)
            except BadRequest as exc:
                refusal = (grpc.StatusCode.INVALID_ARGUMENT, str(exc), False)
            else:
                answer = rx.handle(mapped)
                if answer is not None:
                    return export_response(*answer)
                refusal = (grpc.StatusCode.UNAVAILABLE, "emitter queue full; retry later", True)
        except Exception as exc:  # a bug of ours: say so, as the HTTP receiver's 500 does
            rx.log(f"otlp: internal error on a gRPC request: {exc!r}")
            refusal = (grpc.StatusCode.INTERNAL, f"internal error: {exc!r}"[:300], False)
        finally:
            rx.leave()
        return self._refuse(context, *refusal)

    def _refuse(self, context, code, message: str, retry: bool = False) -> bytes:
        self.rx.count_refused()
        if retry:
            context.set_trailing_metadata(((RETRY_INFO_KEY, RETRY_INFO_1S),
                                           (DETAILS_KEY, status_protobuf(code.value[0], message, _RETRY_INFO_ANY))))
        context.set_code(code)
        context.set_details(message)
        return b""
