"""The gRPC interop cases with Python's grpcio (a second standard implementation, C core).

    python interop_client.py --addr HOST:PORT --test_case all|CASE[,CASE...]

Stubs are generated from proto/grpc/testing by scripts/interop (grpc_tools.protoc) into
a directory on PYTHONPATH. One line per case; exit status 1 if any case fails.
"""

import argparse
import queue
import sys
import time

import grpc

import empty_pb2
import messages_pb2
import test_pb2_grpc

CASES = [
    "empty_unary", "large_unary", "client_streaming", "server_streaming", "ping_pong",
    "empty_stream", "status_code_and_message", "special_status_message", "custom_metadata",
    "unimplemented_method", "unimplemented_service", "cancel_after_begin",
    "cancel_after_first_response", "timeout_on_sleeping_server",
]
PING_PONG = [(31415, 27182), (9, 8), (2653, 1828), (58979, 45904)]


def zeros(n):
    return messages_pb2.Payload(body=b"\0" * n)


def check(ok, what):
    if not ok:
        raise AssertionError(what)


def output_request(size, payload):
    return messages_pb2.StreamingOutputCallRequest(
        response_parameters=[messages_pb2.ResponseParameters(size=size)], payload=zeros(payload))


class Requests:
    """A request stream fed step by step."""

    def __init__(self):
        self.q = queue.Queue()

    def send(self, item):
        self.q.put(item)

    def close(self):
        self.q.put(None)

    def __iter__(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            yield item


def expect_status(call, code, message):
    try:
        result = call()
        if hasattr(result, "__iter__") and not isinstance(result, (bytes, str)):
            for _ in result:
                pass
    except grpc.RpcError as e:
        check(e.code() == code and e.details() == message, f"{e.code()} {e.details()!r}")
        return
    raise AssertionError("the call succeeded")


def run_case(channel, case):
    stub = test_pb2_grpc.TestServiceStub(channel)
    if case == "empty_unary":
        stub.EmptyCall(empty_pb2.Empty())
    elif case == "large_unary":
        r = stub.UnaryCall(messages_pb2.SimpleRequest(response_size=314159, payload=zeros(271828)))
        check(len(r.payload.body) == 314159, f"{len(r.payload.body)} bytes")
    elif case == "client_streaming":
        sizes = [27182, 8, 1828, 45904]
        r = stub.StreamingInputCall(iter(
            [messages_pb2.StreamingInputCallRequest(payload=zeros(s)) for s in sizes]))
        check(r.aggregated_payload_size == 74922, f"aggregated {r.aggregated_payload_size}")
    elif case == "server_streaming":
        sizes = [31415, 9, 2653, 58979]
        req = messages_pb2.StreamingOutputCallRequest(
            response_parameters=[messages_pb2.ResponseParameters(size=s) for s in sizes])
        got = [len(r.payload.body) for r in stub.StreamingOutputCall(req)]
        check(got == sizes, f"sizes {got}")
    elif case == "ping_pong":
        requests = Requests()
        responses = stub.FullDuplexCall(iter(requests))
        for size, payload in PING_PONG:
            requests.send(output_request(size, payload))
            r = next(responses)
            check(len(r.payload.body) == size, f"{len(r.payload.body)} bytes, not {size}")
        requests.close()
        check(next(responses, None) is None, "a response after the last request")
    elif case == "empty_stream":
        check(list(stub.FullDuplexCall(iter([]))) == [], "a response to no request")
    elif case in ("status_code_and_message", "special_status_message"):
        message = ("test status message" if case == "status_code_and_message" else
                   "\t\ntest with whitespace\r\nand Unicode BMP \u263a and non-BMP \U0001f608\t\n")
        echo = messages_pb2.EchoStatus(code=2, message=message)
        expect_status(lambda: stub.UnaryCall(messages_pb2.SimpleRequest(response_status=echo)),
                      grpc.StatusCode.UNKNOWN, message)
        expect_status(lambda: stub.FullDuplexCall(iter(
            [messages_pb2.StreamingOutputCallRequest(response_status=echo)])),
            grpc.StatusCode.UNKNOWN, message)
    elif case == "custom_metadata":
        metadata = (("x-grpc-test-echo-initial", "test_initial_metadata_value"),
                    ("x-grpc-test-echo-trailing-bin", b"\xab\xab\xab"))
        _, call = stub.UnaryCall.with_call(
            messages_pb2.SimpleRequest(response_size=314159, payload=zeros(271828)),
            metadata=metadata)
        initial, trailing = dict(call.initial_metadata()), dict(call.trailing_metadata())
        check(initial.get("x-grpc-test-echo-initial") == "test_initial_metadata_value",
              f"UnaryCall initial {initial}")
        check(trailing.get("x-grpc-test-echo-trailing-bin") == b"\xab\xab\xab",
              f"UnaryCall trailing {trailing}")
        responses = stub.FullDuplexCall(iter([output_request(314159, 271828)]), metadata=metadata)
        for _ in responses:
            pass
        initial, trailing = dict(responses.initial_metadata()), dict(responses.trailing_metadata())
        check(initial.get("x-grpc-test-echo-initial") == "test_initial_metadata_value",
              f"FullDuplexCall initial {initial}")
        check(trailing.get("x-grpc-test-echo-trailing-bin") == b"\xab\xab\xab",
              f"FullDuplexCall trailing {trailing}")
    elif case == "unimplemented_method":
        expect_code(lambda: stub.UnimplementedCall(empty_pb2.Empty()), grpc.StatusCode.UNIMPLEMENTED)
    elif case == "unimplemented_service":
        other = test_pb2_grpc.UnimplementedServiceStub(channel)
        expect_code(lambda: other.UnimplementedCall(empty_pb2.Empty()), grpc.StatusCode.UNIMPLEMENTED)
    elif case == "cancel_after_begin":
        requests = Requests()
        future = stub.StreamingInputCall.future(iter(requests))
        time.sleep(0.05)
        future.cancel()
        check(future.cancelled(), "not cancelled")
        requests.close()
        stub.EmptyCall(empty_pb2.Empty())
    elif case == "cancel_after_first_response":
        requests = Requests()
        responses = stub.FullDuplexCall(iter(requests))
        requests.send(output_request(*PING_PONG[0]))
        r = next(responses)
        check(len(r.payload.body) == 31415, "first response size")
        responses.cancel()
        expect_code(lambda: next(responses), grpc.StatusCode.CANCELLED)
        requests.close()
        stub.EmptyCall(empty_pb2.Empty())
    elif case == "timeout_on_sleeping_server":
        requests = Requests()
        requests.send(messages_pb2.StreamingOutputCallRequest(payload=zeros(27182)))
        responses = stub.FullDuplexCall(iter(requests), timeout=0.001)
        expect_code(lambda: next(responses), grpc.StatusCode.DEADLINE_EXCEEDED)
        requests.close()
    else:
        raise AssertionError(f"unknown test case {case!r}")


def expect_code(call, code):
    try:
        call()
    except grpc.RpcError as e:
        check(e.code() == code, f"{e.code()}, not {code}")
        return
    raise AssertionError(f"succeeded, not {code}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--addr", required=True)
    parser.add_argument("--test_case", default="all")
    parser.add_argument("--use_tls", action="store_true")
    parser.add_argument("--ca_file", help="PEM roots the server's certificate must lead to")
    parser.add_argument("--server_host_override", help="the name to verify instead of the host")
    args = parser.parse_args()
    cases = CASES if args.test_case == "all" else args.test_case.split(",")
    failed = 0
    options = [("grpc.max_receive_message_length", 4 << 20)]
    if args.use_tls:
        roots = open(args.ca_file, "rb").read() if args.ca_file else None
        if args.server_host_override:
            options.append(("grpc.ssl_target_name_override", args.server_host_override))
        credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        channel = grpc.secure_channel(args.addr, credentials, options=options)
    else:
        channel = grpc.insecure_channel(args.addr, options=options)
    with channel:
        for case in cases:
            try:
                run_case(channel, case)
                print(f"{case}: ok", flush=True)
            except Exception as e:  # report every case
                failed += 1
                print(f"{case}: FAILED: {e}", flush=True)
    print(f"{len(cases) - failed} of {len(cases)} cases passed over {args.addr} (Python grpcio {grpc.__version__})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
