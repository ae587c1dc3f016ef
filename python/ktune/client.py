"""A ktuned daemon from Python (gRPC, ktune.v1.Tuner)."""
import getpass
import json
import os
import socket
from typing import Dict, Iterator, List, Optional, Union

import grpc
from google.protobuf import json_format

from ktune._values import Best, Job, KtuneError, Problem
from ktune.v1 import job_pb2, results_pb2, tuner_pb2, tuner_pb2_grpc

_MATCH = {
    tuner_pb2.GetBestResponse.EXACT: "exact",
    tuner_pb2.GetBestResponse.NEAREST_PROBLEM: "nearest_problem",
    tuner_pb2.GetBestResponse.SAME_ARCHITECTURE: "same_architecture",
}
_ENDED = {"succeeded", "failed", "cancelled", "interrupted"}


def _config(record: results_pb2.MeasurementRecord) -> Dict[str, object]:
    out = {}
    for name in record.config.names:
        v = record.config.values[name]
        out[name] = getattr(v, v.WhichOneof("kind")) if v.WhichOneof("kind") else None
    return out


def _state(state: int) -> str:
    return results_pb2.JobState.Name(state).lower()


def _job(j: results_pb2.Job) -> Job:
    best = None
    if j.HasField("best") and j.best.HasField("time_ms"):
        best = Best(kernel=j.kernel, key=j.best.config.key, config=_config(j.best),
                    time_ms=j.best.time_ms, device=j.device.name,
                    architecture=j.device.architecture, problem=dict(j.problem), job_id=j.id)
    return Job(id=j.id, kernel=j.kernel, state=_state(j.state), device=j.device.name,
               problem=dict(j.problem), evaluations=j.progress.evaluations,
               max_evaluations=j.progress.max_evaluations, strategy=j.strategy,
               message=j.message, client=j.client, best=best)


_FORMS = ("give HOST:PORT (127.0.0.1:7070, gpu7.example:7070, [::1]:7070), unix:PATH "
          "or a gRPC target (dns:///HOST:PORT)")


def _check_address(address: str) -> None:
    """As the C++ client (server/common/address.h): left to gRPC, a port
    above 65535 is taken modulo 65536 and calls another port, a missing
    port becomes 443 (or 0), and an IPv6 address without brackets cannot be
    told from its port; each is refused here, naming what is wrong."""
    if not address:
        raise KtuneError(f"empty address; {_FORMS}")
    if address.startswith(("unix:", "unix-abstract:")):
        return
    host, colon, port = address.rpartition(":")

    def check_port() -> None:
        if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise KtuneError(f"{address}: port {port} is not a port; give one in [1, 65535]")

    if "://" in address or address.startswith(("dns:", "ipv4:", "ipv6:", "vsock:", "xds:")):
        if colon and port.isascii() and port.isdigit():
            check_port()  # the rest is gRPC's to read
        return
    if address.startswith("["):
        close = address.find("]")
        if close in (-1, 1):
            what = "no address in the brackets" if close == 1 else "no closing ']'"
            raise KtuneError(f"{address}: {what}; {_FORMS}")
        after = address[close + 1:]
        if not after:
            raise KtuneError(f"{address}: no port; {_FORMS}")
        if after[0] != ":" or len(after) - 1 != len(port):
            raise KtuneError(f"{address}: after [ADDRESS] comes :PORT and nothing else; {_FORMS}")
    elif not colon:
        raise KtuneError(f"{address}: no port; {_FORMS}")
    elif not host:
        raise KtuneError(f"{address}: no host; {_FORMS}")
    elif any(c in host for c in ":[]"):
        raise KtuneError(f"{address}: an IPv6 address goes in brackets, [ADDRESS]:PORT; {_FORMS}")
    if not port:
        raise KtuneError(f"{address}: no port; {_FORMS}")
    check_port()


def _load_spec(spec: Union[str, dict, job_pb2.JobSpec]) -> job_pb2.JobSpec:
    """A job file (path), its JSON text or dict, or the message itself; a
    file's kernel sources go inline (the daemon reads no client paths)."""
    if isinstance(spec, job_pb2.JobSpec):
        return spec
    base = "."
    if isinstance(spec, str) and not spec.lstrip().startswith("{"):
        base = os.path.dirname(os.path.abspath(spec))
        with open(spec) as f:
            spec = f.read()
    text = spec if isinstance(spec, str) else json.dumps(spec)
    out = job_pb2.JobSpec()
    try:
        json_format.Parse(text, out)
    except json_format.ParseError as e:
        raise KtuneError(f"job spec: {e}") from None
    for kernel in (out.kernel, out.verification.reference_kernel.kernel):
        if kernel.WhichOneof("source") == "file":
            with open(os.path.join(base, kernel.file)) as f:
                kernel.code = f.read()
    return out


class Daemon:
    """A connection to one ktuned. Every call has a deadline (`timeout`
    seconds; a followed job's stream has a day)."""

    def __init__(self, address: str, token_file: Optional[str] = None,
                 tls_ca: Optional[str] = None, timeout: float = 30.0,
                 client: Optional[str] = None):
        _check_address(address)
        self.address = address
        self.timeout = timeout
        self.client = client or f"{getpass.getuser()}@{socket.gethostname()}"
        self._metadata = []
        if token_file:
            with open(token_file) as f:
                self._metadata.append(("authorization", "Bearer " + f.read().strip()))
        if tls_ca:
            with open(tls_ca, "rb") as f:
                channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(f.read()))
        else:
            channel = grpc.insecure_channel(address)
        self._channel = channel
        self._stub = tuner_pb2_grpc.TunerStub(channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout=None):
        try:
            return method(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise KtuneError(f"{self.address}: {e.code().name.lower()}: {e.details()}") from None

    def best(self, kernel: str, device: str = "", problem: Optional[Problem] = None,
             exact_only: bool = False, tune_on_miss: bool = False,
             spec=None) -> Optional[Best]:
        """The best configuration through the fallback chain, or None when
        nothing fits. With tune_on_miss, a fallback (or nothing) queues a
        job for the exact problem (from `spec`, a job file, or the
        fallback's own job): its id is in tuning_job_id, and with nothing
        stored yet the answer is a Best with match "" and no config."""
        req = tuner_pb2.GetBestRequest(kernel=kernel, device=device, problem=problem or {},
                                       exact_only=exact_only, tune_on_miss=tune_on_miss,
                                       client=self.client)
        if spec is not None:
            req.spec.CopyFrom(_load_spec(spec))
        try:
            r = self._stub.GetBest(req, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise KtuneError(f"{self.address}: {e.code().name.lower()}: {e.details()}") from None
        return Best(kernel=r.kernel or kernel, key=r.best.config.key, config=_config(r.best),
                    time_ms=r.best.time_ms, device=r.device.name,
                    architecture=r.device.architecture, problem=dict(r.problem),
                    match=_MATCH.get(r.match, ""), job_id=r.job_id, objective=r.objective,
                    problem_distance=r.problem_distance, tuning_job_id=r.tuning_job_id)

    def tune(self, spec, wait: bool = True, priority: int = 0,
             device: Optional[str] = None) -> Job:
        """Queues a job (a job file's path, its JSON or dict); with `wait`,
        follows it to its end. Submitting a job the daemon holds resumes it."""
        s = _load_spec(spec)
        if device:
            del s.device.devices[:]
            s.device.devices.append(device)
        r = self._call(self._stub.SubmitJob,
                       tuner_pb2.SubmitJobRequest(spec=s, priority=priority, client=self.client))
        if wait:
            for _ in self.watch(r.job_id):
                pass
        return self.job(r.job_id)

    def watch(self, job_id: str, from_start: bool = False) -> Iterator[dict]:
        """The job's events until it ends: dicts with "kind" ("state",
        "measurement", "new_best", "progress") and the event's fields."""
        stream = self._stub.WatchJob(
            tuner_pb2.WatchJobRequest(job_id=job_id, from_start=from_start),
            timeout=24 * 3600, metadata=self._metadata)
        try:
            for ev in stream:
                kind = ev.WhichOneof("event")
                if kind == "state":
                    yield {"kind": "state", "job_id": ev.job_id, "state": _state(ev.state)}
                else:
                    out = json_format.MessageToDict(getattr(ev, kind),
                                                    preserving_proto_field_name=True)
                    out.update({"kind": kind, "job_id": ev.job_id})
                    yield out
        except grpc.RpcError as e:
            raise KtuneError(f"{self.address}: {e.code().name.lower()}: {e.details()}") from None

    def job(self, job_id: str) -> Job:
        return _job(self._call(self._stub.GetJob, tuner_pb2.GetJobRequest(job_id=job_id)))

    def jobs(self, kernel: str = "", state: str = "") -> List[Job]:
        """The daemon's jobs, newest first (every page)."""
        out, token = [], ""
        req_state = results_pb2.JobState.Value(state.upper()) if state else 0
        while True:
            r = self._call(self._stub.ListJobs,
                           tuner_pb2.ListJobsRequest(kernel=kernel, state=req_state,
                                                     page_size=1000, page_token=token,
                                                     include_best=True))
            out += [_job(j) for j in r.jobs]
            token = r.next_page_token
            if not token:
                return out

    def cancel(self, job_id: str) -> Job:
        return _job(self._call(self._stub.CancelJob, tuner_pb2.CancelJobRequest(job_id=job_id)))

    def devices(self) -> List[dict]:
        r = self._call(self._stub.ListDevices, tuner_pb2.ListDevicesRequest())
        return [json_format.MessageToDict(d, preserving_proto_field_name=True)
                for d in r.devices]


def connect(address: str, token_file: Optional[str] = None, tls_ca: Optional[str] = None,
            timeout: float = 30.0, client: Optional[str] = None) -> Daemon:
    """A Daemon for ktuned at `address` (HOST:PORT)."""
    return Daemon(address, token_file=token_file, tls_ca=tls_ca, timeout=timeout, client=client)
