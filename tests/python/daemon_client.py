#!/usr/bin/env python3
"""Talks to ktuned from Python with Debian's python3-grpcio, using only the
.proto files: generates the stubs, starts a daemon on a recorded space,
submits a job, follows it, asks for the best configuration, and checks the
standard health and reflection services.

    daemon_client.py KTUNED SOURCE_DIR
Exit 77 (skipped) without python3-grpcio or grpc_python_plugin.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    import grpc
except ImportError:
    print("skipped: no python3-grpcio")
    sys.exit(77)


def main():
    ktuned, src = sys.argv[1], sys.argv[2]
    plugin = shutil.which("grpc_python_plugin")
    if plugin is None:
        print("skipped: no grpc_python_plugin")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="ktune_py_")
    gen = os.path.join(work, "gen")
    os.mkdir(gen)
    protos = os.path.join(src, "proto")
    files = [os.path.join("ktune/v1", f) for f in ("job.proto", "results.proto", "tuner.proto")]
    subprocess.run(["protoc", "-I", protos, "--python_out", gen, "--grpc_out", gen,
                    "--plugin=protoc-gen-grpc=" + plugin] + files, check=True)
    sys.path.insert(0, gen)
    from ktune.v1 import job_pb2, tuner_pb2, tuner_pb2_grpc, results_pb2  # noqa: E402

    cache = os.path.join(src, "kernels/recorded/convolution_milo_A100.json.gz")
    out = open(os.path.join(work, "out"), "w+")
    daemon = subprocess.Popen([ktuned, "--listen", "127.0.0.1:0", "--db",
                               os.path.join(work, "k.db"), "--device", "sim:" + cache],
                              stdout=out, stderr=subprocess.DEVNULL)
    try:
        address = None
        for _ in range(1000):
            out.seek(0)
            text = out.read()
            if "listening on " in text and text.endswith("\n"):
                address = text.split("listening on ")[1].split()[0]
                break
            time.sleep(0.01)
        assert address, "ktuned did not start"
        channel = grpc.insecure_channel(address)
        stub = tuner_pb2_grpc.TunerStub(channel)

        spec = job_pb2.JobSpec()
        spec.strategy.name = "random"
        spec.strategy.max_evaluations = 25
        spec.strategy.seed = 7
        submitted = stub.SubmitJob(tuner_pb2.SubmitJobRequest(spec=spec), timeout=30)
        states, measured = [], set()
        for event in stub.WatchJob(tuner_pb2.WatchJobRequest(job_id=submitted.job_id,
                                                             from_start=True), timeout=60):
            kind = event.WhichOneof("event")
            if kind == "state":
                states.append(results_pb2.JobState.Name(event.state))
            elif kind == "measurement":
                measured.add(event.measurement.config.key)
        assert states[-1] == "SUCCEEDED", states
        assert len(measured) == 25, len(measured)

        best = stub.GetBest(tuner_pb2.GetBestRequest(kernel="convolution_kernel"), timeout=10)
        assert best.match == tuner_pb2.GetBestResponse.EXACT
        assert best.best.time_ms > 0
        assert best.job_id == submitted.job_id

        try:
            stub.GetJob(tuner_pb2.GetJobRequest(job_id=""), timeout=10)
            raise AssertionError("an empty job id was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.code()

        # The standard services, called by name with hand-encoded messages:
        # HealthCheckRequest{} -> HealthCheckResponse{status: SERVING (1)}.
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda m: m,
                                    response_deserializer=lambda b: b)
        assert check(b"", timeout=10) == b"\x08\x01"
        # ServerReflectionRequest{list_services: ""} lists ktune.v1.Tuner.
        reflect = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda m: m, response_deserializer=lambda b: b)
        answers = list(reflect(iter([b"\x3a\x00"]), timeout=10))
        assert any(b"ktune.v1.Tuner" in a for a in answers), answers
        print("python client: job %s, best %s at %.4f ms, health SERVING, reflection lists "
              "ktune.v1.Tuner" % (submitted.job_id, best.best.config.key, best.best.time_ms))
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
