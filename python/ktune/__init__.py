"""ktune from Python: ask a ktuned daemon for tuned configurations, submit
tuning jobs and follow them, or read a local ktune store without a daemon.

    import ktune
    daemon = ktune.connect("127.0.0.1:7070")
    job = daemon.tune("kernels/sgemm.json", wait=True)
    best = daemon.best("sgemm", "NVIDIA H200", {"M": 4096, "N": 4096, "K": 4096})
    print(best.match, best.config["block_size_x"], best.time_ms)
    print(ktune.open_store("tuning.db").best("sgemm", "NVIDIA H200", {"M": 4096}))

The daemon's client uses Debian's python3-grpcio and python3-protobuf; the
ktune.v1 stubs are generated from proto/ at build time (build/python holds
the package). Reading a store needs neither: the client is imported when
`connect` or `Daemon` is first used, so `open_store` works on a node with
the standard library alone.
"""
from ktune._values import Best, Job, KtuneError
from ktune.store import Store, open_store

__all__ = ["Best", "Daemon", "Job", "KtuneError", "Store", "connect", "open_store"]


def __getattr__(name):
    if name not in ("Daemon", "connect"):
        raise AttributeError(f"module 'ktune' has no attribute {name!r}")
    try:
        from ktune import client
    except ImportError as e:
        raise ImportError(f"ktune.{name} needs gRPC for Python (Debian: python3-grpcio "
                          f"python3-protobuf): {e}") from e
    return getattr(client, name)
