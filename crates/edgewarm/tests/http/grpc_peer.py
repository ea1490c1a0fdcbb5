"""A real gRPC server and client for the edge's tests, on grpcio (Debian's python3-grpcio), with
generic handlers and bytes as messages: no .proto, no protoc.

    grpc_peer.py serve
        Listen on 127.0.0.1 (h2c, a free port), print the port on a line of its own, then
        serve until killed. Methods of service `edgewarm.test.Echo`:
          Say    unary: answers b"echo:" + the request
          Slow   unary: answers after 5 s (an origin slower than the edge waits)
          Count  server-streaming: the request is a number N, answered with N messages "0".."N-1"
          Calls  unary: how many Say and Count calls reached this server, as a number

    grpc_peer.py call TARGET METHOD DATA [--tls CA SNI] [--stream] [--timeout S]
        One call to /edgewarm.test.Echo/METHOD with DATA as the request, over TLS trusting CA
        with SNI and :authority SNI when --tls is given (else h2c); at most S seconds (default
        20). Prints one JSON object: code (grpc.StatusCode name), details, replies (the
        messages as text), initial and trailing metadata.
"""

import json
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "edgewarm.test.Echo"


def serve():
    calls = {"n": 0}
    lock = threading.Lock()

    def counted():
        with lock:
            calls["n"] += 1

    def say(request, _context):
        counted()
        return b"echo:" + request

    def slow(request, _context):
        time.sleep(5)
        return request

    def count(request, _context):
        counted()
        for i in range(int(request)):
            yield str(i).encode()

    def how_many(_request, _context):
        with lock:
            return str(calls["n"]).encode()

    same = {"request_deserializer": None, "response_serializer": None}
    handlers = {
        "Say": grpc.unary_unary_rpc_method_handler(say, **same),
        "Slow": grpc.unary_unary_rpc_method_handler(slow, **same),
        "Count": grpc.unary_stream_rpc_method_handler(count, **same),
        "Calls": grpc.unary_unary_rpc_method_handler(how_many, **same),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def call(argv):
    target, method, data = argv[0], argv[1], argv[2].encode()
    rest = argv[3:]
    stream = "--stream" in rest
    timeout = float(rest[rest.index("--timeout") + 1]) if "--timeout" in rest else 20.0
    if "--tls" in rest:
        at = rest.index("--tls")
        ca, sni = rest[at + 1], rest[at + 2]
        with open(ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        options = [("grpc.ssl_target_name_override", sni), ("grpc.default_authority", sni)]
        channel = grpc.secure_channel(target, creds, options=options)
    else:
        channel = grpc.insecure_channel(target)
    path = f"/{SERVICE}/{method}"
    out = {"code": "OK", "details": None, "replies": [], "initial": {}, "trailing": {}}
    try:
        if stream:
            it = channel.unary_stream(path)(data, timeout=timeout)
            try:
                for reply in it:
                    out["replies"].append(reply.decode())
            finally:
                out["initial"] = dict(it.initial_metadata() or ())
                out["trailing"] = dict(it.trailing_metadata() or ())
        else:
            reply, c = channel.unary_unary(path).with_call(data, timeout=timeout)
            out["replies"].append(reply.decode())
            out["initial"] = dict(c.initial_metadata() or ())
            out["trailing"] = dict(c.trailing_metadata() or ())
    except grpc.RpcError as e:
        out["code"] = e.code().name
        out["details"] = e.details()
        out["initial"] = dict(e.initial_metadata() or ())
        out["trailing"] = dict(e.trailing_metadata() or ())
    channel.close()
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        call(sys.argv[2:])
