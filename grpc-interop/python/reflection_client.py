"""Reflection and health with Python's grpcio packages (gRPC's C core), no stubs:

    python reflection_client.py --addr HOST:PORT --service grpc.testing.TestService

grpcio-reflection's ProtoReflectionDescriptorDatabase (which asks v1alpha) lists the
server's services; a descriptor pool over it builds TestService from the server's answers
alone and makes a dynamic UnaryCall; grpcio-health-checking's stub checks the server and
the service, which must be SERVING. One line per check; exit status 1 if any fails.
"""

import argparse
import sys

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

REFLECTION = ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]


def check(ok, what):
    if not ok:
        raise AssertionError(what)


def list_services(channel, service):
    listed = sorted(ProtoReflectionDescriptorDatabase(channel).get_services())
    expected = sorted([service, "grpc.health.v1.Health"] + REFLECTION)
    check(listed == expected, f"listed {listed}, expected {expected}")


def dynamic_unary_call(channel, service):
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    method = pool.FindServiceByName(service).FindMethodByName("UnaryCall")
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)
    call = channel.unary_unary(
        f"/{service}/UnaryCall",
        request_serializer=request_class.SerializeToString,
        response_deserializer=response_class.FromString,
    )
    response = call(request_class(response_size=314), timeout=10)
    check(len(response.payload.body) == 314, f"a payload of {len(response.payload.body)} bytes")


def health(channel, service):
    stub = health_pb2_grpc.HealthStub(channel)
    for name in ["", service]:
        status = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
        check(status == health_pb2.HealthCheckResponse.SERVING,
              f"{name!r} is {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}")
    try:
        stub.Check(health_pb2.HealthCheckRequest(service="no.Such"), timeout=10)
        raise AssertionError("an unknown service was found")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND, f"{e.code()} for an unknown service")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--addr", required=True)
    parser.add_argument("--service", required=True)
    args = parser.parse_args()
    checks = [list_services, dynamic_unary_call, health]
    failed = 0
    with grpc.insecure_channel(args.addr) as channel:
        for run in checks:
            try:
                run(channel, args.service)
                print(f"{run.__name__}: ok", flush=True)
            except Exception as e:  # report every check
                failed += 1
                print(f"{run.__name__}: FAILED: {e!r}", flush=True)
    print(f"{len(checks) - failed} of {len(checks)} reflection and health checks passed over "
          f"{args.addr} (Python grpcio {grpc.__version__})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
